package controller

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inferencestack "github.com/titanml/inference-stack-operator"
)

// Reading another major's Lease takes get on Leases (never list, watch or a
// write: this operator's own Lease is the only one it writes, in its own
// namespace), and get on the one CRD whose annotation says where each
// major's operator runs.
//
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,resourceNames=inferencestacks.models.takeoff.co,verbs=get

// majorLiveness tells whether another major's operator is still there, from
// the leader-election Lease every installed operator renews (the bundle
// runs it with --leader-elect). A claim is a promise to remove the
// finalizer; a major whose Lease nobody has renewed for grace (uninstalled,
// scaled to zero, crash-looping) cannot keep it, so its claims are void.
//
// Only the Lease in the namespace the major's operator runs in counts: a
// namespace's editors may create Leases, and one of the same name in their
// namespace must keep no major alive. That namespace is the major's entry
// in the CRD's inferencestack.OperatorNamespacesAnnotation (written by the
// catalog chart; only cluster admins can write a CRD), else the major's
// default install namespace. One GET of the CRD and one of the Lease per
// major at most every livenessRecheck, whatever the number of its stacks.
type majorLiveness struct {
	reader    client.Reader
	mapper    meta.RESTMapper
	gvk       schema.GroupVersionKind
	leaseName func(major string) string
	// defaultNamespace is where a major the annotation does not list runs.
	defaultNamespace func(major string) string
	grace            time.Duration

	mu     sync.Mutex
	majors map[string]*leaseSeen

	// crdName is the stacks' CRD, found once through the mapper.
	crdMu   sync.Mutex
	crdName string
}

// livenessRecheck bounds how often a major's Lease is read.
const livenessRecheck = 15 * time.Second

// maxClockSkew is how far ahead of this process's clock a Lease's time may
// be and still count: more than synchronised clocks ever differ, far less
// than the claim grace. A time beyond it is no renewal (a Lease dated in
// the future would otherwise stay "renewed" until then).
const maxClockSkew = time.Minute

type leaseSeen struct {
	checked time.Time
	// renewed is when the major's Lease was last renewed (or acquired):
	// the Lease's own time the first time it is read, then this process's
	// clock at the first look after each change, so another machine's
	// clock skew counts only once. where names the Lease; stamp is its
	// last renew time as written.
	renewed time.Time
	where   string
	stamp   string
	// absentSince: since when no Lease with a usable time has been seen
	// where the major's operator runs. future: the Lease's times were all
	// beyond maxClockSkew at the last look (logged once).
	absentSince  time.Time
	future       bool
	futureLogged bool
	// aliveUntil: the major's operator re-claimed a stack whose claim this
	// process voided and wrote its status, proof that it runs although
	// its Lease says nothing (no leader election, another Lease name or
	// namespace).
	aliveUntil time.Time
}

func newMajorLiveness(reader client.Reader, mapper meta.RESTMapper, gvk schema.GroupVersionKind, leaseName func(string) string, grace time.Duration) *majorLiveness {
	return &majorLiveness{reader: reader, mapper: mapper, gvk: gvk, leaseName: leaseName,
		defaultNamespace: inferencestack.Namespace, grace: grace, majors: map[string]*leaseSeen{}}
}

// reclaimed records that major's operator claimed again a stack whose claim
// this process voided, and then wrote the stack's status as its operator
// (see handoff.reclaimProof): it runs whatever its Lease says, so its
// claims are not voided again for a long while (a Lease it does not renew,
// because it runs without leader election or under another Lease name,
// would otherwise make the two operators take the stack from each other).
func (l *majorLiveness) reclaimed(major string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen(major).aliveUntil = time.Now().Add(reclaimedTrust)
}

// seen returns what is known of major; l.mu must be held.
func (l *majorLiveness) seen(major string) *leaseSeen {
	s := l.majors[major]
	if s == nil {
		s = &leaseSeen{}
		l.majors[major] = s
	}
	return s
}

// reclaimedTrust is how long a proven re-claim shows an operator alive.
const reclaimedTrust = time.Hour

// gone reports whether major's operator has been gone for longer than the
// grace period, and why (or, if not gone, what was seen).
func (l *majorLiveness) gone(ctx context.Context, major string) (bool, string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.seen(major)
	now := time.Now()
	if now.Sub(s.checked) >= livenessRecheck {
		if err := l.look(ctx, major, s, now); err != nil {
			return false, "", err
		}
	}
	if now.Before(s.aliveUntil) {
		return false, fmt.Sprintf("it re-claimed a stack whose claim was voided and wrote its status, so it runs, although its Lease %s says otherwise", s.where), nil
	}
	if !s.absentSince.IsZero() {
		what := "no Lease " + s.where + " exists"
		if s.future {
			what = "the Lease " + s.where + " is dated in the future"
		}
		return now.Sub(s.absentSince) > l.grace,
			fmt.Sprintf("%s (for %s)", what, now.Sub(s.absentSince).Round(time.Second)), nil
	}
	return now.Sub(s.renewed) > l.grace,
		fmt.Sprintf("its Lease %s was last renewed at %s", s.where, s.renewed.UTC().Format(time.RFC3339)), nil
}

// look reads major's Lease where its operator runs into s; l.mu must be
// held.
func (l *majorLiveness) look(ctx context.Context, major string, s *leaseSeen, now time.Time) error {
	ns, err := l.namespace(ctx, major)
	if err != nil {
		return err
	}
	key := types.NamespacedName{Namespace: ns, Name: l.leaseName(major)}
	var lease coordinationv1.Lease
	err = l.reader.Get(ctx, key, &lease)
	present := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading the %s operator's Lease %s: %w", major, key, err)
	}
	s.checked = now
	var latest time.Time
	future := false
	if present {
		for _, t := range []*metav1.MicroTime{lease.Spec.AcquireTime, lease.Spec.RenewTime} {
			switch {
			case t == nil:
			case t.After(now.Add(maxClockSkew)):
				future = true
			case t.After(latest):
				latest = t.Time
			}
		}
	}
	if future && !s.futureLogged {
		s.futureLogged = true
		ctrl.LoggerFrom(ctx).Info("another major's Lease is dated in the future: that time is not taken as a renewal (is a clock wrong?)",
			"major", major, "lease", key.String(), "renewTime", lease.Spec.RenewTime, "acquireTime", lease.Spec.AcquireTime)
	}
	s.future = future && latest.IsZero()
	where := key.String()
	if where != s.where {
		// The major moved (the CRD's annotation changed): its Lease there
		// is read afresh.
		s.stamp = ""
	}
	stamp := where + "@" + latest.UTC().Format(time.RFC3339Nano)
	switch {
	case s.stamp == "":
		s.renewed = latest
	case stamp != s.stamp:
		s.renewed = now
	}
	s.stamp, s.where = stamp, where
	switch {
	case !latest.IsZero():
		s.absentSince = time.Time{}
	case s.absentSince.IsZero():
		s.absentSince = now
	}
	return nil
}

// namespace is where major's operator runs: its entry in the CRD's
// annotation, else its default install namespace.
func (l *majorLiveness) namespace(ctx context.Context, major string) (string, error) {
	namespaces, err := l.listed(ctx)
	if err != nil {
		return "", err
	}
	if ns := namespaces[major]; ns != "" {
		return ns, nil
	}
	return l.defaultNamespace(major), nil
}

// listedMajors are the majors the CRD's annotation names.
func (l *majorLiveness) listedMajors(ctx context.Context) ([]string, error) {
	namespaces, err := l.listed(ctx)
	if err != nil {
		return nil, err
	}
	majors := make([]string, 0, len(namespaces))
	for m := range namespaces {
		majors = append(majors, m)
	}
	sort.Strings(majors)
	return majors, nil
}

// listed reads the CRD's annotation of where each major's operator runs.
func (l *majorLiveness) listed(ctx context.Context) (map[string]string, error) {
	l.crdMu.Lock()
	if l.crdName == "" {
		m, err := l.mapper.RESTMapping(l.gvk.GroupKind(), l.gvk.Version)
		if err != nil {
			l.crdMu.Unlock()
			return nil, fmt.Errorf("finding the resource of %s: %w", l.gvk, err)
		}
		l.crdName = m.Resource.Resource + "." + m.Resource.Group
	}
	name := l.crdName
	l.crdMu.Unlock()
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := l.reader.Get(ctx, types.NamespacedName{Name: name}, crd); err != nil {
		return nil, fmt.Errorf("reading where the operators run (the annotation %s of the CRD %s): %w",
			inferencestack.OperatorNamespacesAnnotation, name, err)
	}
	namespaces, err := inferencestack.OperatorNamespaces(crd.GetAnnotations()[inferencestack.OperatorNamespacesAnnotation])
	if err != nil {
		// An admin's typo voids no claim: the stacks wait for it to be fixed.
		return nil, fmt.Errorf("the CRD %s: %w", name, err)
	}
	return namespaces, nil
}
