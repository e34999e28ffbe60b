package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	inferencestack "github.com/titanml/inference-stack-operator"
)

// The hand-off contract, whatever the order of relabelling, unlabelling,
// operator restarts, leader changes, operator uninstalls and deletions:
//
//   - no stack keeps a finalizer that no running operator will remove;
//   - no operator removes a finalizer another major relies on;
//   - no workload is deleted by surprise: the operator that loses a stack
//     never uninstalls it, and the new major's operator adopts the Helm
//     release (keyed by namespace and stack name);
//   - a stack no operator reconciles says so in its Managed condition
//     instead of keeping a stale Deployed=True.
//
// It rests on two label-selected caches of stacks, each normally empty, so
// the state is read from the cluster rather than from events a stopped
// operator could have missed: at start-up the caches list what happened
// while it was away, and a resync re-checks them periodically at no API
// cost.
//
//   - released: claimed by this major but no longer labelled for it. The
//     operator removes its claim and the finalizer in one write guarded by
//     the resourceVersion (a stack claimed meanwhile by its new major, or
//     deleted and re-created, fails that guard and is left alone).
//   - unclaimed: claimed by no operator and not labelled for this one. A
//     missing or malformed label can never be claimed: the stack is told
//     so at once. A well-formed label of a major whose operator has not
//     claimed the stack within unclaimedGrace of this operator first seeing
//     it unclaimed is reported too. Either way a finalizer left on it (by
//     a claim a label-replacing write wiped, or an operator version without
//     claims) is removed.
//   - claimed elsewhere: claimed by another major. A claim is a promise
//     that its operator will remove the finalizer; once that operator is
//     gone (its leader-election Lease, in the namespace that operator runs
//     in, unrenewed for the claim grace: uninstalled, scaled to zero) the
//     claim is void, and this operator removes it with the finalizer, so
//     deleting the stack or its namespace completes. The release's objects
//     go with the stack through their owner references; nothing is
//     uninstalled while it lives. The stack's Managed condition says so at
//     once.
//
// What decides that another major's operator is gone is never data a
// stack's tenant can write: a Lease counts only in that operator's own
// namespace (see majorLiveness), and a voided stack claimed again shows
// its operator alive only once that operator has also written the stack's
// status (a claim is a label, which the tenant can write; the status
// subresource it cannot).
//
// Every object of a release keeps its owner reference to the stack, so
// deleting an unclaimed stack still garbage-collects all it created.
type handoff struct {
	client client.Client
	// reader reads a stack uncached: the status a re-claim is proven by,
	// which the hand-off caches leave out.
	reader    client.Reader
	released  cache.Cache
	unclaimed cache.Cache
	// elsewhere and liveness are nil when the operator cannot tell another
	// major's operator is alive (no Options.MajorLease).
	elsewhere cache.Cache
	liveness  *majorLiveness
	gvk       schema.GroupVersionKind
	major     majorSelector
	recorder  record.EventRecorder
	grace     time.Duration

	mu sync.Mutex
	// unclaimedSince is when this process first saw each unclaimed stack:
	// the grace a stack's major gets to claim it counts from then, not from
	// the stack's creation (a label-replacing write on an old stack drops
	// its claim for a moment).
	unclaimedSince map[types.NamespacedName]seenSince
	// voided remembers the stacks whose claims this process voided (an
	// entry outlives its stack: there are few).
	voided map[types.UID]*voidedClaim
}

// voidedClaim is a claim this process voided.
type voidedClaim struct {
	owner string
	// managed is the stack's Managed condition (managedStamp) right after
	// the void: a re-claim is proven by a newer one its owner wrote.
	managed string
	// reclaimedAt is when the stack was first seen claimed again by owner
	// without that proof (zero until then); unproven: that was logged.
	reclaimedAt time.Time
	unproven    bool
}

type seenSince struct {
	uid   types.UID
	since time.Time
}

func setupHandoff(mgr ctrl.Manager, gvk schema.GroupVersionKind, major majorSelector, recorder record.EventRecorder, opts Options) error {
	h := &handoff{client: mgr.GetClient(), reader: mgr.GetAPIReader(), gvk: gvk, major: major, recorder: recorder, grace: opts.unclaimedGrace(),
		unclaimedSince: map[types.NamespacedName]seenSince{}, voided: map[types.UID]*voidedClaim{}}
	var err error
	if h.released, err = newStackCache(mgr, major.released(), opts, keepConditions); err != nil {
		return err
	}
	if h.unclaimed, err = newStackCache(mgr, major.unclaimed(), opts, keepConditions); err != nil {
		return err
	}
	caches := []cache.Cache{h.released, h.unclaimed}
	if opts.MajorLease != nil {
		if h.elsewhere, err = newStackCache(mgr, major.claimedElsewhere(), opts, keepMetadata); err != nil {
			return err
		}
		h.liveness = newMajorLiveness(mgr.GetAPIReader(), mgr.GetRESTMapper(), gvk, opts.MajorLease, opts.claimGrace())
		caches = append(caches, h.elsewhere)
	}
	for _, c := range caches {
		if err := mgr.Add(c); err != nil {
			return fmt.Errorf("adding a hand-off cache: %w", err)
		}
	}
	c, err := controller.New(fmt.Sprintf("%s-handoff", strings.ToLower(gvk.Kind)), mgr, controller.Options{Reconciler: h})
	if err != nil {
		return fmt.Errorf("creating the hand-off controller: %w", err)
	}
	for _, src := range caches {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(gvk)
		if err := c.Watch(source.Kind(src, obj, &handler.TypedEnqueueRequestForObject[*unstructured.Unstructured]{})); err != nil {
			return fmt.Errorf("watching stacks for the hand-off: %w", err)
		}
	}
	return nil
}

// newStackCache caches the stacks selector matches, keeping only what the
// hand-off reads (transform: metadata, and status conditions where it
// writes them), so even a cluster full of another major's stacks costs
// little memory.
func newStackCache(mgr ctrl.Manager, selector labels.Selector, opts Options, transform toolscache.TransformFunc) (cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient:           mgr.GetHTTPClient(),
		Scheme:               mgr.GetScheme(),
		Mapper:               mgr.GetRESTMapper(),
		DefaultLabelSelector: selector,
		DefaultNamespaces:    opts.namespaces(),
		DefaultTransform:     transform,
		SyncPeriod:           opts.resyncPeriod(),
	})
	if err != nil {
		return nil, fmt.Errorf("creating a hand-off cache for %s: %w", selector, err)
	}
	return c, nil
}

// keepConditions strips a cached stack down to its metadata and status
// conditions.
func keepConditions(in any) (any, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return in, nil
	}
	out := stackMetadata(u)
	if conds, found, _ := unstructured.NestedSlice(u.Object, "status", "conditions"); found {
		out.Object["status"] = map[string]any{"conditions": conds}
	}
	return out, nil
}

// keepMetadata strips a cached stack down to its metadata.
func keepMetadata(in any) (any, error) {
	if u, ok := in.(*unstructured.Unstructured); ok {
		return stackMetadata(u), nil
	}
	return in, nil
}

func stackMetadata(u *unstructured.Unstructured) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": u.GetAPIVersion(),
		"kind":       u.GetKind(),
	}}
	meta := map[string]any{}
	for _, k := range []string{"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp", "labels", "finalizers"} {
		if v, ok := u.Object["metadata"].(map[string]any)[k]; ok {
			meta[k] = v
		}
	}
	out.Object["metadata"] = meta
	return out
}

var _ toolscache.TransformFunc = keepConditions
var _ toolscache.TransformFunc = keepMetadata

func (h *handoff) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	type step struct {
		from cache.Cache
		do   func(context.Context, *unstructured.Unstructured) (reconcile.Result, error)
	}
	steps := []step{{h.released, h.release}, {h.unclaimed, h.explain}}
	if h.elsewhere != nil {
		steps = append(steps, step{h.elsewhere, h.voidIfGone})
	}
	for _, s := range steps {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(h.gvk)
		err := s.from.Get(ctx, req.NamespacedName, obj)
		if apierrors.IsNotFound(err) {
			if s.from == h.unclaimed {
				h.forgetUnclaimed(req.NamespacedName)
			}
			continue
		}
		if err != nil {
			return reconcile.Result{}, err
		}
		return s.do(ctx, obj)
	}
	return reconcile.Result{}, nil
}

// firstUnclaimed returns when this process first saw obj unclaimed.
func (h *handoff) firstUnclaimed(obj *unstructured.Unstructured) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	key := client.ObjectKeyFromObject(obj)
	if s, ok := h.unclaimedSince[key]; ok && s.uid == obj.GetUID() {
		return s.since
	}
	now := time.Now()
	h.unclaimedSince[key] = seenSince{uid: obj.GetUID(), since: now}
	return now
}

func (h *handoff) forgetUnclaimed(key types.NamespacedName) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.unclaimedSince, key)
}

// release lets go of a stack this operator claimed and that is no longer
// labelled for it: claim and finalizer go in one guarded write, the
// workloads stay.
func (h *handoff) release(ctx context.Context, obj *unstructured.Unstructured) (reconcile.Result, error) {
	if err := h.dropClaim(ctx, obj); err != nil {
		// A conflict means the stack changed (claimed by its new major,
		// deleted and re-created): retried with what the cache then holds.
		return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("releasing the stack: %w", err))
	}
	value, present := obj.GetLabels()[h.major.Key]
	ctrl.LoggerFrom(ctx).Info("stack no longer selected: released it without uninstalling", "labels", obj.GetLabels())
	h.recorder.Eventf(obj, corev1.EventTypeNormal, "Released",
		"no longer labelled %s=%s: the %s operator stopped reconciling the stack and removed its finalizer; its workloads were kept",
		h.major.Key, h.major.Major, h.major.Major)
	if obj.GetDeletionTimestamp() != nil {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, h.writeConditions(ctx, obj, unmanaged(h.major.Key, value, present, h.major.Major))
}

// explain reports why no operator reconciles an unclaimed stack.
func (h *handoff) explain(ctx context.Context, obj *unstructured.Unstructured) (reconcile.Result, error) {
	value, present := obj.GetLabels()[h.major.Key]
	wellFormed := present && majorLabelValue.MatchString(value)
	if wellFormed {
		// Its major's operator claims the stack within moments if it is
		// installed and running.
		if wait := h.grace - time.Since(h.firstUnclaimed(obj)); wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
	}
	// A finalizer on an unclaimed stack has nobody to remove it: its claim
	// was lost with a write that replaced the labels, or an operator version
	// without claims put it there. Without it, deleting the stack still
	// removes everything through the owner references; an operator of the
	// stack's major that turns up later claims it and adds it back.
	if controllerutil.ContainsFinalizer(obj, uninstallFinalizer) {
		patch := client.MergeFromWithOptions(obj.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(obj, uninstallFinalizer)
		if err := h.client.Patch(ctx, obj, patch); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("removing the finalizer of an unclaimed stack: %w", err))
		}
		h.recorder.Eventf(obj, corev1.EventTypeNormal, "Released",
			"no operator has claimed this stack (%s=%q); the %s operator removed the uninstall finalizer so it can be deleted; the workloads were kept",
			h.major.Key, value, h.major.Major)
	}
	if obj.GetDeletionTimestamp() != nil {
		return reconcile.Result{}, nil
	}
	if c, ok := conditionOf(obj, conditionManaged); wellFormed && ok && c.Status == "False" {
		// Already explained, by the operator that released it or another.
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, h.writeConditions(ctx, obj, unmanaged(h.major.Key, value, present, ""))
}

// voidIfGone voids another major's claim on a stack once that major's
// operator is gone: the claim label and the finalizer go in one guarded
// write (a stack its operator touched meanwhile fails the guard), and the
// stack then counts as unclaimed. Stacks labelled for this major are left
// to its reconciler, which adopts them.
func (h *handoff) voidIfGone(ctx context.Context, obj *unstructured.Unstructured) (reconcile.Result, error) {
	if h.major.own().Matches(labels.Set(obj.GetLabels())) {
		return reconcile.Result{}, nil
	}
	owner := obj.GetLabels()[ReconciledByLabel]
	if wait, err := h.reclaim(ctx, obj, owner); err != nil || wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, client.IgnoreNotFound(err)
	}
	gone, why, err := h.liveness.gone(ctx, owner)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !gone {
		// Checked again later: a claim stays valid only while its
		// operator lives. The Lease is read once per major whatever the
		// number of stacks.
		return reconcile.Result{RequeueAfter: h.liveness.grace / 2}, nil
	}
	if err := h.dropClaim(ctx, obj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("voiding the %s operator's claim: %w", owner, err))
	}
	// obj is now the stack as the API server returned it, status included.
	managed := managedStamp(obj)
	if obj.GetDeletionTimestamp() == nil {
		// Said at once rather than after the unclaimed grace; and the
		// status a re-claim must be followed by is then newer than this.
		value, present := obj.GetLabels()[h.major.Key]
		if err := h.writeConditions(ctx, obj, unmanaged(h.major.Key, value, present, "")); err != nil {
			ctrl.LoggerFrom(ctx).Info("could not say in its status that a stack whose claim was voided is unmanaged; the unclaimed stacks' check says it later", "error", err.Error())
		} else {
			managed = managedStamp(obj)
		}
	}
	h.mu.Lock()
	h.voided[obj.GetUID()] = &voidedClaim{owner: owner, managed: managed}
	h.mu.Unlock()
	ctrl.LoggerFrom(ctx).Info("voided the claim of an operator that is gone", "claimedBy", owner, "why", why)
	h.recorder.Eventf(obj, corev1.EventTypeWarning, "ClaimVoided",
		"claimed by the %s operator, which is gone (%s, over %s ago): the %s operator voided the claim and removed the uninstall finalizer, so deleting the stack completes (its objects go with it through their owner references); nothing was uninstalled",
		owner, why, h.liveness.grace, h.major.Major)
	return reconcile.Result{}, nil
}

// reclaim looks at a stack claimed by owner whose claim by owner this
// process voided. Its operator claiming it again would show that it runs
// whatever its Lease says (no leader election, another Lease name or
// namespace), but the claim is a label anyone who may edit the stack can
// write: only its operator's next status write proves it (reclaimProof).
// Until that comes, for at most the claim grace after the re-claim was
// first seen, the stack is left alone (wait > 0); a status write wakes the
// hand-off before. Without it the re-claim counts for nothing, and the
// stack is judged on its operator's Lease like any other.
func (h *handoff) reclaim(ctx context.Context, obj *unstructured.Unstructured, owner string) (wait time.Duration, err error) {
	h.mu.Lock()
	v := h.voided[obj.GetUID()]
	if v != nil && v.owner != owner {
		delete(h.voided, obj.GetUID())
		v = nil
	}
	h.mu.Unlock()
	if v == nil {
		return 0, nil
	}
	proven, err := h.reclaimProof(ctx, obj, v)
	if err != nil {
		return 0, fmt.Errorf("reading the status of a stack claimed again: %w", err)
	}
	log := ctrl.LoggerFrom(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	if proven {
		delete(h.voided, obj.GetUID())
		h.liveness.reclaimed(owner)
		log.Info("an operator whose Lease looks gone claimed a stack again and wrote its status: it runs; its claims are kept (run every major with --leader-elect, the default --leader-election-id, in the namespace the CRD's annotation or the default names, so the others can tell it lives)",
			"major", owner, "lease", h.liveness.leaseName(owner), "annotation", inferencestack.OperatorNamespacesAnnotation)
		return 0, nil
	}
	if v.reclaimedAt.IsZero() {
		v.reclaimedAt = time.Now()
	}
	if wait := h.liveness.grace - time.Since(v.reclaimedAt); wait > 0 {
		return wait, nil
	}
	if !v.unproven {
		v.unproven = true
		log.Info("a stack whose claim was voided is claimed again, but its operator has written no status since: not taken as a sign of life (anyone who may edit the stack can write the claim label)",
			"claimedBy", owner, "waited", h.liveness.grace.String())
	}
	return 0, nil
}

// reclaimProof tells whether the stack's status shows that v.owner's
// operator reconciled it after the void: its Managed condition says so,
// and differs from the one the void left. Tenants cannot write a stack's
// status subresource, and only the owner's operator writes that message
// (stackReconciler.conditions); the condition moved since the void, so it
// is no older status.
func (h *handoff) reclaimProof(ctx context.Context, obj *unstructured.Unstructured, v *voidedClaim) (bool, error) {
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(h.gvk)
	if err := h.reader.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
		return false, err
	}
	if cur.GetUID() != obj.GetUID() {
		return false, nil
	}
	c, ok := conditionOf(cur, conditionManaged)
	return ok && c.Status == "True" && c.Reason == reasonReconciling &&
		strings.HasPrefix(c.Message, "reconciled by the "+v.owner+" operator ") &&
		managedStamp(cur) != v.managed, nil
}

// managedStamp is obj's Managed condition, lastTransitionTime included, as
// one string ("" without one).
func managedStamp(obj *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == conditionManaged {
			return fmt.Sprintf("%v|%v|%v|%v", m["status"], m["reason"], m["message"], m["lastTransitionTime"])
		}
	}
	return ""
}

// dropClaim removes the claim label and the uninstall finalizer in one
// write guarded by the resourceVersion obj was read at.
func (h *handoff) dropClaim(ctx context.Context, obj *unstructured.Unstructured) error {
	patch := client.MergeFromWithOptions(obj.DeepCopy(), client.MergeFromWithOptimisticLock{})
	lbls := obj.GetLabels()
	delete(lbls, ReconciledByLabel)
	obj.SetLabels(lbls)
	controllerutil.RemoveFinalizer(obj, uninstallFinalizer)
	return h.client.Patch(ctx, obj, patch)
}

// writeConditions sets the Managed condition c (and clears a stale
// Deployed=True) with a status patch guarded by the resourceVersion.
func (h *handoff) writeConditions(ctx context.Context, obj *unstructured.Unstructured, c condition) error {
	before := obj.DeepCopy()
	if !setConditions(obj, time.Now(), append([]condition{c}, notDeployed(obj)...)...) {
		return nil
	}
	patch := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
	if err := h.client.Status().Patch(ctx, obj, patch); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("writing the Managed condition: %w", err))
	}
	h.recorder.Event(obj, corev1.EventTypeWarning, c.Reason, c.Message)
	return nil
}
