package controller

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/yaml"
)

// Readiness: whether a stack serves, where, and if not why.
//
// A controller of its own computes the Ready condition and status.endpoint,
// ingressURLs, available and applications from what the operator already
// caches: the stack (its deployed release's manifest says which
// Deployments, Service and Ingress it has) and the Helm-managed
// Deployments, whose status the Deployment controller keeps. There is no
// pod watch: pods are LISTed only for a Deployment that has not been
// Available for a while, only that Deployment's, at most every
// podReadInterval (podReadMinInterval when the Deployment changes), to name
// what holds it (the scheduler's message, an image that cannot be pulled, a
// crash loop). The status is written only when what it says changes.
const (
	conditionReady = "Ready"

	reasonAvailable        = "Available"
	reasonInstalling       = "Installing"
	reasonReleaseFailed    = "ReleaseFailed"
	reasonProgressing      = "Progressing"
	reasonRolloutStalled   = "RolloutStalled"
	reasonReplicaFailure   = "ReplicaFailure"
	reasonInsufficientGPU  = "InsufficientGPU"
	reasonUnschedulable    = "Unschedulable"
	reasonImagePullBackOff = "ImagePullBackOff"
	reasonCrashLoopBackOff = "CrashLoopBackOff"

	gpuResource   = "nvidia.com/gpu"
	gpuProductKey = "nvidia.com/gpu.product"

	// podReadDelay: a Deployment that has made no progress for this long
	// gets its pods read. Rollouts are done before it, even in a burst of
	// new stacks on a busy control plane, so a burst reads no pods; what
	// holds a rollout for good (no GPU, no image, a crash loop) is named
	// this long after it began.
	podReadDelay = 30 * time.Second
	// podReadInterval bounds the pod LISTs of one Deployment that does not
	// change; one that changes (a new condition, a replica more or less)
	// is read again after podReadMinInterval.
	podReadInterval    = 30 * time.Second
	podReadMinInterval = 5 * time.Second
	// notReadyRecheckMax bounds how long a stack that is not ready waits
	// for its next look when nothing it watches changes; the wait starts at
	// podReadInterval and doubles while nothing changes.
	notReadyRecheckMax = 5 * time.Minute
	// settle delays the first report of a stack that is still coming up
	// and spaces updates that change the reason, so a rollout costs a few
	// writes, not one per replica.
	settle = 3 * time.Second
	// installingReport delays the first report of a stack whose first
	// release is not written yet: the operator's own status write at the
	// end of the install says Ready False, and in a burst of new stacks an
	// earlier "Installing" would cost a write per stack (and conflicts with
	// the install's write). A stack still installing this long after the
	// operator claimed it says so; one not claimed yet waits for a worker
	// and nothing of it is being installed: in a burst of thousands that
	// is most stacks for minutes, and "Installing" would be a write per
	// stack while the API server is the bottleneck.
	installingReport = 30 * time.Second
	// messageSettle: a change of only the message or the counts (same
	// status and reason) waits this long after it was first seen, so a
	// rollout that ends within it costs one write, not one per step.
	messageSettle = 10 * time.Second
	// quietRollout bounds how long a stack just installed says only that
	// it is rolling out: one whose replicas are all still unavailable
	// this long after its install (a slow image pull, a readiness probe
	// that does not pass, pods waiting for the controller-manager in a
	// burst) gets its counts.
	quietRollout = time.Minute
	// componentLabel tells the gateway from the applications.
	componentLabel = "app.kubernetes.io/component"
	// applicationComponentPrefix starts the component of an application's
	// objects: application-<name>.
	applicationComponentPrefix = "application-"
)

// readiness is the controller that keeps the stacks' readiness.
type readiness struct {
	// cache reads the stacks and Deployments; the manager's client would
	// read unstructured objects (the stacks) from the API server.
	cache  client.Reader
	client client.Client // writes the status
	pods   client.Reader // uncached: pods are never cached
	gvk    schema.GroupVersionKind
	now    func() time.Time
	waves  *upgradeWaves
	// written holds Deployments to the generations the operator's writes
	// gave them, however late the cache is.
	written *writtenGenerations

	mu     sync.Mutex
	views  map[types.UID]*releaseView
	stacks map[types.NamespacedName]*readinessMemo
}

type podRead struct {
	at time.Time
	// of is the Deployment's resourceVersion when its pods were read.
	of       string
	findings []podFinding
}

// readinessMemo is what the controller remembers of one stack between
// looks.
type readinessMemo struct {
	lastWrite time.Time
	// pendingSince: since when the stack has been coming up without a
	// Ready condition.
	pendingSince time.Time
	// recheck is the wait before the next look at a stack that is not
	// ready; it doubles while nothing changes.
	recheck time.Duration
	said    string
	// differsSince: since when what the stack says has differed from what
	// it should say only in the message or the counts.
	differsSince time.Time
	// podReads are the last pod findings of each of its Deployments.
	podReads map[string]podRead
}

func setupReadiness(mgr ctrl.Manager, gvk schema.GroupVersionKind, waves *upgradeWaves, written *writtenGenerations) error {
	r := &readiness{cache: mgr.GetCache(), client: mgr.GetClient(), pods: mgr.GetAPIReader(), gvk: gvk, now: time.Now, waves: waves, written: written,
		views: map[types.UID]*releaseView{}, stacks: map[types.NamespacedName]*readinessMemo{}}
	c, err := controller.New(fmt.Sprintf("%s-readiness", strings.ToLower(gvk.Kind)), mgr,
		controller.Options{Reconciler: r, MaxConcurrentReconciles: 2})
	if err != nil {
		return err
	}
	primary := &unstructured.Unstructured{}
	primary.SetGroupVersionKind(gvk)
	// Every change of a stack, its status included: the release's writes
	// drop nothing the readiness says (see statusWriter), but a new
	// generation or a failure changes what it must say.
	if err := c.Watch(source.Kind(mgr.GetCache(), primary,
		&handler.TypedEnqueueRequestForObject[*unstructured.Unstructured]{},
		predicate.TypedFuncs[*unstructured.Unstructured]{
			DeleteFunc: func(e event.TypedDeleteEvent[*unstructured.Unstructured]) bool {
				r.forget(client.ObjectKeyFromObject(e.Object), e.Object.GetUID())
				waves.forget(client.ObjectKeyFromObject(e.Object))
				return false
			},
		})); err != nil {
		return fmt.Errorf("watching %s: %w", gvk.Kind, err)
	}
	if err := c.Watch(source.Kind(mgr.GetCache(), &appsv1.Deployment{},
		handler.TypedEnqueueRequestForOwner[*appsv1.Deployment](mgr.GetScheme(), mgr.GetRESTMapper(), primary, handler.OnlyControllerOwner()),
		predicate.TypedFuncs[*appsv1.Deployment]{
			UpdateFunc: func(e event.TypedUpdateEvent[*appsv1.Deployment]) bool {
				return e.ObjectOld.ResourceVersion != e.ObjectNew.ResourceVersion
			},
			GenericFunc: func(event.TypedGenericEvent[*appsv1.Deployment]) bool { return false },
		})); err != nil {
		return fmt.Errorf("watching Deployments: %w", err)
	}
	return nil
}

// slimDeployment is the cache transform of Deployments: the readiness reads
// their replicas, selector and status; the pod template, most of the
// object, stays out of memory.
// The transform applies to every cache of Deployments, the dependents'
// metadata-only one included, so it slims the metadata of any object as
// the default transform it replaces does (slimcache.go).
func slimDeployment(obj any) (any, error) {
	if d, ok := obj.(*appsv1.Deployment); ok {
		d.Spec.Template = corev1.PodTemplateSpec{}
	}
	return slimMetadata(obj)
}

func (r *readiness) forget(key types.NamespacedName, uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.views, uid)
	delete(r.stacks, key)
}

// memo returns what is remembered of the stack; r.mu must be held.
func (r *readiness) memo(key types.NamespacedName) *readinessMemo {
	m := r.stacks[key]
	if m == nil {
		m = &readinessMemo{podReads: map[string]podRead{}}
		r.stacks[key] = m
	}
	return m
}

func (r *readiness) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	// The stack's Deployments changed (or the stack): its turn in an
	// upgrade wave may be over.
	if r.waves != nil {
		r.waves.check(ctx, req.NamespacedName)
	}
	stack := &unstructured.Unstructured{}
	stack.SetGroupVersionKind(r.gvk)
	if err := r.cache.Get(ctx, req.NamespacedName, stack); err != nil {
		// The cache holds only this major's stacks: NotFound includes
		// stacks of others, whose readiness is theirs to say.
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if stack.GetDeletionTimestamp() != nil {
		return reconcile.Result{}, nil
	}
	view, err := r.view(stack)
	if err != nil {
		// A manifest the operator wrote itself; reading it cannot fail
		// unless the status was edited by hand.
		ctrl.LoggerFrom(ctx).Info("cannot read the deployed release's manifest", "error", err.Error())
	}
	deployments, err := r.deployments(ctx, stack, view)
	if err != nil {
		return reconcile.Result{}, err
	}
	now := r.now()
	want := assess(stack, view, deployments, now, func(d *appsv1.Deployment) []podFinding {
		return r.findings(ctx, req.NamespacedName, d, now)
	})
	return r.report(ctx, stack, want, now)
}

// report writes want unless the stack already says it, and says when to
// look again.
func (r *readiness) report(ctx context.Context, stack *unstructured.Unstructured, want readinessStatus, now time.Time) (reconcile.Result, error) {
	r.mu.Lock()
	memo := r.memo(client.ObjectKeyFromObject(stack))
	write, wait, recheck := memo.next(stack, want, now)
	r.mu.Unlock()
	if !write {
		return requeue(recheck), nil
	}
	if wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	updated := stack.DeepCopy()
	want.apply(updated, now)
	if err := r.client.Status().Update(ctx, updated); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// The stack changed; its event brings it back.
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("writing the stack's readiness: %w", err)
	}
	r.mu.Lock()
	memo.lastWrite = now
	r.mu.Unlock()
	return requeue(recheck), nil
}

// next decides what a look at stack does with want: write it (after wait,
// when wait > 0) or not, and when to look again after a write or none
// (recheck); r.mu must be held.
func (m *readinessMemo) next(stack *unstructured.Unstructured, want readinessStatus, now time.Time) (write bool, wait, recheck time.Duration) {
	said := want.String()
	changed := said != m.said
	m.said = said
	if want.ready.Status == "True" {
		m.recheck, m.pendingSince = 0, time.Time{}
	} else if changed || m.recheck == 0 {
		m.recheck = podReadInterval
	} else {
		m.recheck = min(2*m.recheck, notReadyRecheckMax)
	}
	recheck = m.recheck
	if want.recheck > 0 && (recheck == 0 || want.recheck < recheck) {
		recheck = want.recheck
	}
	same := want.same(stack)
	if same {
		m.writeDelay(stack, want, same, now)
		return false, 0, recheck
	}
	if quiet := want.quietFor(stack, now); quiet > 0 {
		// Nothing new to say: a message-only change, when one comes, is
		// held back from then, not from this look.
		m.differsSince = time.Time{}
		if recheck == 0 || quiet < recheck {
			recheck = quiet
		}
		return false, 0, recheck
	}
	return true, m.writeDelay(stack, want, same, now), recheck
}

// writeDelay says how long to hold back writing want to a stack that does
// not say it (same tells whether it does); r.mu must be held.
func (m *readinessMemo) writeDelay(stack *unstructured.Unstructured, want readinessStatus, same bool, now time.Time) time.Duration {
	current, has := conditionOf(stack, conditionReady)
	minor := !same && has && current.Status == want.ready.Status && current.Reason == want.ready.Reason
	if !minor {
		m.differsSince = time.Time{}
	}
	switch {
	case same:
		return 0
	case !has && want.ready.Reason == reasonInstalling && !controllerutil.ContainsFinalizer(stack, uninstallFinalizer):
		// Not claimed yet: its clock starts at the claim.
		m.pendingSince = time.Time{}
		return installingReport
	case !has && want.ready.Status != "True":
		// A stack coming up is reported once it has been coming up for a
		// while: most are Ready by then, which is one write.
		if m.pendingSince.IsZero() {
			m.pendingSince = now
		}
		delay := settle
		if want.ready.Reason == reasonInstalling {
			delay = installingReport
		}
		return m.pendingSince.Add(delay).Sub(now)
	case minor:
		if m.differsSince.IsZero() {
			m.differsSince = now
		}
		return max(m.differsSince.Add(messageSettle).Sub(now), m.lastWrite.Add(settle).Sub(now))
	case has && current.Status == want.ready.Status:
		return m.lastWrite.Add(settle).Sub(now)
	}
	return 0
}

func requeue(after time.Duration) reconcile.Result {
	return reconcile.Result{RequeueAfter: after}
}

// deployments returns the stack's Deployments from the cache, by the names
// its release manifest gives (absent ones are nil).
func (r *readiness) deployments(ctx context.Context, stack *unstructured.Unstructured, view *releaseView) (map[string]*appsv1.Deployment, error) {
	out := map[string]*appsv1.Deployment{}
	if view == nil {
		return out, nil
	}
	for _, w := range view.workloads {
		d := &appsv1.Deployment{}
		err := r.cache.Get(ctx, types.NamespacedName{Namespace: stack.GetNamespace(), Name: w.name}, d)
		switch {
		case apierrors.IsNotFound(err):
			out[w.name] = nil
			r.written.forget(types.NamespacedName{Namespace: stack.GetNamespace(), Name: w.name})
		case err != nil:
			return nil, fmt.Errorf("reading Deployment %s: %w", w.name, err)
		default:
			out[w.name] = r.written.atLeast(d)
		}
	}
	return out, nil
}

// findings LISTs the pods of d, at most every podReadInterval.
func (r *readiness) findings(ctx context.Context, stack types.NamespacedName, d *appsv1.Deployment, now time.Time) []podFinding {
	r.mu.Lock()
	last, ok := r.memo(stack).podReads[d.Name]
	r.mu.Unlock()
	if ok && (now.Sub(last.at) < podReadMinInterval || last.of == d.ResourceVersion && now.Sub(last.at) < podReadInterval) {
		return last.findings
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || sel.Empty() {
		return nil
	}
	pods := &corev1.PodList{}
	if err := r.pods.List(ctx, pods, client.InNamespace(d.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		ctrl.LoggerFrom(ctx).Info("cannot read the pods of a Deployment that is not available", "deployment", d.Name, "error", err.Error())
		return nil
	}
	found := podFindings(pods.Items)
	r.mu.Lock()
	r.memo(stack).podReads[d.Name] = podRead{at: now, of: d.ResourceVersion, findings: found}
	r.mu.Unlock()
	return found
}

// view returns what the stack's deployed release contains, parsed once per
// manifest.
func (r *readiness) view(stack *unstructured.Unstructured) (*releaseView, error) {
	manifest, _, _ := unstructured.NestedString(stack.Object, "status", "deployedRelease", "manifest")
	if manifest == "" {
		return nil, nil
	}
	sum := sha256.Sum256([]byte(manifest))
	r.mu.Lock()
	v := r.views[stack.GetUID()]
	r.mu.Unlock()
	if v != nil && v.sum == sum {
		return v, nil
	}
	v, err := parseRelease(manifest, stack.GetNamespace())
	if err != nil {
		return nil, err
	}
	v.sum = sum
	r.mu.Lock()
	r.views[stack.GetUID()] = v
	r.mu.Unlock()
	return v, nil
}

// releaseView is what readiness needs of a release's manifest.
type releaseView struct {
	sum         [32]byte
	workloads   []workload // gateway first, then applications by name
	endpoint    string
	ingressURLs []string
}

// workload is one Deployment of a release.
type workload struct {
	name        string
	application string // "" for the gateway
	gpus        int64
	gpuProduct  string
}

func parseRelease(manifest, namespace string) (*releaseView, error) {
	v := &releaseView{}
	for _, y := range releaseutil.SplitManifests(manifest) {
		// One YAML parse per document, then JSON decodes (its kind, then
		// the object), which cost a fraction of the parse.
		doc, err := yaml.YAMLToJSON([]byte(y))
		if err != nil {
			return nil, fmt.Errorf("reading the release manifest: %w", err)
		}
		var head struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(doc, &head); err != nil {
			return nil, fmt.Errorf("reading the release manifest: %w", err)
		}
		component := head.Metadata.Labels[componentLabel]
		switch head.Kind {
		case "Deployment":
			var d appsv1.Deployment
			if err := json.Unmarshal(doc, &d); err != nil {
				return nil, fmt.Errorf("reading Deployment %s: %w", head.Metadata.Name, err)
			}
			w := workload{name: d.Name}
			if app, ok := strings.CutPrefix(component, applicationComponentPrefix); ok {
				w.application = app
				w.gpus, w.gpuProduct = gpuPlacement(&d.Spec.Template.Spec)
			}
			v.workloads = append(v.workloads, w)
		case "Service":
			if component != "gateway" {
				continue
			}
			var s corev1.Service
			if err := json.Unmarshal(doc, &s); err != nil {
				return nil, fmt.Errorf("reading Service %s: %w", head.Metadata.Name, err)
			}
			if port, ok := httpPort(s.Spec.Ports); ok {
				v.endpoint = fmt.Sprintf("http://%s.%s.svc:%d", s.Name, namespace, port)
			}
		case "Ingress":
			var in networkingv1.Ingress
			if err := json.Unmarshal(doc, &in); err != nil {
				return nil, fmt.Errorf("reading Ingress %s: %w", head.Metadata.Name, err)
			}
			v.ingressURLs = append(v.ingressURLs, ingressURLs(&in)...)
		}
	}
	sort.SliceStable(v.workloads, func(i, j int) bool {
		a, b := v.workloads[i], v.workloads[j]
		if (a.application == "") != (b.application == "") {
			return a.application == ""
		}
		return a.application < b.application
	})
	sort.Strings(v.ingressURLs)
	v.ingressURLs = slices.Compact(v.ingressURLs)
	return v, nil
}

// gpuPlacement returns the nvidia.com/gpu a pod asks for and the GPU
// product it is placed on (its node selector, else a required node
// affinity on the product label).
func gpuPlacement(spec *corev1.PodSpec) (int64, string) {
	var gpus int64
	for _, c := range spec.Containers {
		q, ok := c.Resources.Limits[gpuResource]
		if !ok {
			q, ok = c.Resources.Requests[gpuResource]
		}
		if ok {
			gpus += q.Value()
		}
	}
	if p := spec.NodeSelector[gpuProductKey]; p != "" {
		return gpus, p
	}
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		var products []string
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, e := range term.MatchExpressions {
				if e.Key == gpuProductKey && e.Operator == corev1.NodeSelectorOpIn {
					products = append(products, e.Values...)
				}
			}
		}
		slices.Sort(products)
		return gpus, strings.Join(slices.Compact(products), ",")
	}
	return gpus, ""
}

// httpPort is the Service port named http, else its first.
func httpPort(ports []corev1.ServicePort) (int32, bool) {
	for _, p := range ports {
		if p.Name == "http" {
			return p.Port, true
		}
	}
	if len(ports) > 0 {
		return ports[0].Port, true
	}
	return 0, false
}

func ingressURLs(in *networkingv1.Ingress) []string {
	tls := map[string]bool{}
	for _, t := range in.Spec.TLS {
		for _, h := range t.Hosts {
			tls[h] = true
		}
	}
	var out []string
	for _, rule := range in.Spec.Rules {
		if rule.Host == "" || rule.HTTP == nil {
			continue // no host: the URL depends on the ingress controller
		}
		scheme := "http"
		if tls[rule.Host] {
			scheme = "https"
		}
		for _, p := range rule.HTTP.Paths {
			path := p.Path
			if path == "" {
				path = "/"
			}
			out = append(out, scheme+"://"+rule.Host+path)
		}
	}
	return out
}

// podFinding is what holds a pod back, as the readiness reports it.
type podFinding struct {
	reason  string
	message string
}

// findingRank orders pod findings: the first a Deployment has is reported.
var findingRank = map[string]int{
	reasonInsufficientGPU:  0,
	reasonUnschedulable:    1,
	reasonImagePullBackOff: 2,
	reasonCrashLoopBackOff: 3,
}

// podFindings names what holds back each pod of a Deployment that is not
// available, most telling first: one finding per reason.
func podFindings(pods []corev1.Pod) []podFinding {
	byReason := map[string]podFinding{}
	add := func(f podFinding) {
		if _, ok := byReason[f.reason]; !ok {
			byReason[f.reason] = f
		}
	}
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				reason := reasonUnschedulable
				if gpuShort(&p.Spec, c.Message) {
					reason = reasonInsufficientGPU
				}
				add(podFinding{reason: reason, message: fmt.Sprintf("pod %s cannot be scheduled: %s", p.Name, c.Message)})
			}
		}
		statuses := append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
		for _, cs := range statuses {
			w := cs.State.Waiting
			if w == nil || w.Reason == "" || w.Reason == "ContainerCreating" || w.Reason == "PodInitializing" {
				continue
			}
			reason := w.Reason
			if reason == "ErrImagePull" {
				reason = reasonImagePullBackOff
			}
			msg := fmt.Sprintf("pod %s, container %s: %s", p.Name, cs.Name, w.Reason)
			if w.Message != "" {
				msg += ": " + w.Message
			}
			// The exit, not the restart count: the message must not change
			// (and cost a status write) with every restart.
			if t := cs.LastTerminationState.Terminated; reason == reasonCrashLoopBackOff && t != nil {
				msg += fmt.Sprintf(" (last exit code %d", t.ExitCode)
				if t.Reason != "" {
					msg += ", " + t.Reason
				}
				msg += ")"
			}
			add(podFinding{reason: reason, message: msg})
		}
	}
	out := make([]podFinding, 0, len(byReason))
	for _, f := range byReason {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b podFinding) int {
		ra, oka := findingRank[a.reason]
		rb, okb := findingRank[b.reason]
		if !oka {
			ra = len(findingRank)
		}
		if !okb {
			rb = len(findingRank)
		}
		if ra != rb {
			return ra - rb
		}
		return strings.Compare(a.reason, b.reason)
	})
	return out
}

// gpuShort tells whether the scheduler could not place a GPU pod for want
// of GPUs: too few free on the nodes it could use, or no node with the
// GPU product it selects.
func gpuShort(spec *corev1.PodSpec, message string) bool {
	if strings.Contains(message, "Insufficient "+gpuResource) {
		return true
	}
	gpus, product := gpuPlacement(spec)
	return gpus > 0 && product != "" && strings.Contains(message, "didn't match Pod's node affinity/selector")
}

// readinessStatus is what the stack's status should say.
type readinessStatus struct {
	ready        condition
	endpoint     string
	ingressURLs  []string
	available    string
	applications []any
	// recheck: look again this soon even if nothing changes (a
	// Deployment that reaches podReadDelay).
	recheck time.Duration
}

func (s readinessStatus) String() string {
	return fmt.Sprintf("%v|%s|%v|%s|%v", s.ready, s.endpoint, s.ingressURLs, s.available, s.applications)
}

func (s readinessStatus) fields() map[string]any {
	f := map[string]any{"endpoint": nil, "ingressURLs": nil, "available": nil, "applications": nil}
	if s.endpoint != "" {
		f["endpoint"] = s.endpoint
	}
	if len(s.ingressURLs) > 0 {
		urls := make([]any, len(s.ingressURLs))
		for i, u := range s.ingressURLs {
			urls[i] = u
		}
		f["ingressURLs"] = urls
	}
	if s.available != "" {
		f["available"] = s.available
	}
	if len(s.applications) > 0 {
		f["applications"] = s.applications
	}
	return f
}

// same tells whether the stack already says s.
func (s readinessStatus) same(stack *unstructured.Unstructured) bool {
	if c, ok := conditionOf(stack, conditionReady); !ok || c != s.ready {
		return false
	}
	status, _ := stack.Object["status"].(map[string]any)
	for k, v := range s.fields() {
		got, ok := status[k]
		if v == nil {
			if ok {
				return false
			}
			continue
		}
		if !ok || !reflect.DeepEqual(normalize(got), normalize(v)) {
			return false
		}
	}
	return true
}

// appliedMessage is what the operator's own status write says of a stack
// whose spec generation was just applied.
func appliedMessage(generation int64) string {
	return fmt.Sprintf("generation %d of the spec was applied; its Deployments are rolling out", generation)
}

// quietFor says how much longer s would only restate what a stack just
// installed already says; 0 means s is news. It is quiet while the stack
// has had no readiness report (its install's own write says Ready False,
// Progressing, generation applied and rolling out), s says the same status
// and reason with no replica available, and for at most quietRollout after
// that condition was set. Counts of nothing are not worth a write per
// stack: in a burst of new stacks that is one write each while the API
// server is the bottleneck. The first replica available, a problem with
// its own reason, Ready, or a rollout still at zero after quietRollout is
// written as usual; so is everything once the stack has had a report.
func (s readinessStatus) quietFor(stack *unstructured.Unstructured, now time.Time) time.Duration {
	if s.ready.Status != "False" || s.ready.Reason != reasonProgressing || !strings.HasPrefix(s.available, "0/") {
		return 0
	}
	current, ok := conditionOf(stack, conditionReady)
	if !ok || current.Status != "False" || current.Reason != reasonProgressing || current.Message != appliedMessage(stack.GetGeneration()) {
		return 0
	}
	if _, reported, _ := unstructured.NestedFieldNoCopy(stack.Object, "status", "available"); reported {
		return 0
	}
	since, ok := conditionSince(stack, conditionReady)
	if !ok {
		return 0
	}
	return max(since.Add(quietRollout).Sub(now), 0)
}

// normalize makes numbers from JSON and from Go compare equal.
func normalize(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = normalize(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = normalize(e)
		}
		return out
	case int32:
		return int64(t)
	case int:
		return int64(t)
	case float64:
		return int64(t)
	}
	return v
}

func (s readinessStatus) apply(stack *unstructured.Unstructured, now time.Time) {
	setConditions(stack, now, s.ready)
	status, _ := stack.Object["status"].(map[string]any)
	for k, v := range s.fields() {
		if v == nil {
			delete(status, k)
		} else {
			status[k] = v
		}
	}
}

// readinessFields are the status fields the readiness controller owns,
// beside the Ready condition.
var readinessFields = []string{"endpoint", "ingressURLs", "available", "applications"}

// keepReadiness makes a status the library is about to write (to) say what
// the stack as it is (from) says of its readiness: the readiness fields and
// the Ready condition are from's, whatever the library read at the start of
// its reconcile, and so is observedGeneration unless this write records a
// newer one. A write that records a new generation also makes Ready False
// until the readiness controller has seen that generation's Deployments:
// only it says True, and only of what it has seen.
func keepReadiness(to, from *unstructured.Unstructured, now time.Time) {
	toStatus, ok := to.Object["status"].(map[string]any)
	if !ok {
		return
	}
	fromStatus, _ := from.Object["status"].(map[string]any)
	for _, k := range readinessFields {
		if v, ok := fromStatus[k]; ok {
			toStatus[k] = runtime.DeepCopyJSONValue(v)
		} else {
			delete(toStatus, k)
		}
	}
	before, _, _ := unstructured.NestedInt64(from.Object, "status", "observedGeneration")
	after, observed, _ := unstructured.NestedInt64(to.Object, "status", "observedGeneration")
	// A write that records a generation older than the stack says was
	// observed (a reconcile that read the stack before another writer's
	// status write landed) keeps the newer one: observedGeneration never
	// goes back.
	if !observed || after < before {
		if v, ok := fromStatus["observedGeneration"]; ok {
			toStatus["observedGeneration"] = v
		}
		after = before
	}
	var conds []any
	existing, _ := toStatus["conditions"].([]any)
	for _, e := range existing {
		if m, ok := e.(map[string]any); !ok || m["type"] != conditionReady {
			conds = append(conds, e)
		}
	}
	fromConds, _ := fromStatus["conditions"].([]any)
	for _, e := range fromConds {
		if m, ok := e.(map[string]any); ok && m["type"] == conditionReady {
			conds = append(conds, runtime.DeepCopyJSONValue(m))
		}
	}
	toStatus["conditions"] = conds
	if observed && after != before {
		if c, ok := conditionOf(to, conditionReady); !ok || c.Status != "False" {
			setConditions(to, now, condition{Type: conditionReady, Status: "False", Reason: reasonProgressing,
				Message: appliedMessage(after)})
		}
	}
}

// assess computes what the stack's status should say. pods returns the
// findings of a Deployment that has not been available for podReadDelay.
func assess(stack *unstructured.Unstructured, view *releaseView, deployments map[string]*appsv1.Deployment, now time.Time,
	pods func(*appsv1.Deployment) []podFinding) readinessStatus {
	var s readinessStatus
	// The release first: a failing one is the news, whatever still runs.
	failed := releaseProblem(stack)
	if view == nil {
		if failed != nil {
			s.ready = *failed
		} else {
			s.ready = notReady(reasonInstalling, "the release is being installed")
		}
		return s
	}

	s.endpoint = view.endpoint
	s.ingressURLs = view.ingressURLs
	problems := s.assessWorkloads(view, deployments, now, pods)
	s.ready = readyCondition(stack, view, failed, problems, s.available)
	return s
}

// notReady is a Ready condition False, its message cut to what an event
// carries.
func notReady(reason, msg string) condition {
	if len(msg) > maxEventMessage {
		msg = msg[:maxEventMessage] + "…"
	}
	return condition{Type: conditionReady, Status: "False", Reason: reason, Message: msg}
}

// releaseProblem is the Ready condition of a stack whose release is
// failing (retrying, irreconcilable or failed), nil if it is not.
func releaseProblem(stack *unstructured.Unstructured) *condition {
	if c, ok := conditionOf(stack, conditionRetrying); ok && c.Status == "True" {
		cc := notReady(reasonReleaseFailed, c.Message)
		return &cc
	}
	for _, t := range []string{"Irreconcilable", "ReleaseFailed"} {
		if c, ok := conditionOf(stack, t); ok && c.Status == "True" {
			cc := notReady(reasonReleaseFailed, c.Message)
			return &cc
		}
	}
	return nil
}

// rolloutProblem is what holds back one Deployment; the lowest rank is
// the reason the stack reports.
type rolloutProblem struct {
	rank    int
	reason  string
	message string
}

// assessWorkloads fills in the replica counts of the release's
// Deployments (available, applications) and when to look again, and
// returns what holds back those that are not ready.
func (s *readinessStatus) assessWorkloads(view *releaseView, deployments map[string]*appsv1.Deployment, now time.Time,
	pods func(*appsv1.Deployment) []podFinding) []rolloutProblem {
	var desiredAll, availableAll int64
	var problems []rolloutProblem
	for _, w := range view.workloads {
		d := deployments[w.name]
		n := replicasOf(d)
		desiredAll += n.desired
		availableAll += min(n.available, n.desired)
		if w.application != "" {
			s.applications = append(s.applications, applicationStatus(w, n))
		}
		p, recheck, held := deploymentProblem(w, d, n, now, pods)
		if recheck > 0 && (s.recheck == 0 || recheck < s.recheck) {
			s.recheck = recheck
		}
		if held {
			problems = append(problems, p)
		}
	}
	s.available = fmt.Sprintf("%d/%d", availableAll, desiredAll)
	return problems
}

// replicaCounts are a Deployment's replica counts; all zero for one that does
// not exist yet.
type replicaCounts struct {
	desired, ready, updated, available int64
}

func replicasOf(d *appsv1.Deployment) replicaCounts {
	var n replicaCounts
	if d != nil {
		n.desired = 1
		if d.Spec.Replicas != nil {
			n.desired = int64(*d.Spec.Replicas)
		}
		n.ready, n.updated, n.available = int64(d.Status.ReadyReplicas), int64(d.Status.UpdatedReplicas), int64(d.Status.AvailableReplicas)
	}
	return n
}

// applicationStatus is an application's entry in status.applications.
func applicationStatus(w workload, n replicaCounts) map[string]any {
	app := map[string]any{"name": w.application, "desiredReplicas": n.desired, "readyReplicas": n.ready,
		"updatedReplicas": n.updated, "availableReplicas": n.available}
	if w.gpus > 0 {
		app["gpusPerReplica"] = w.gpus
	}
	if w.gpuProduct != "" {
		app["gpuProduct"] = w.gpuProduct
	}
	return app
}

// deploymentProblem says what holds back the Deployment of w, if anything
// does (held). recheck > 0 is how soon its pods are worth reading, for a
// rollout that has not been idle for podReadDelay yet.
func deploymentProblem(w workload, d *appsv1.Deployment, n replicaCounts, now time.Time,
	pods func(*appsv1.Deployment) []podFinding) (p rolloutProblem, recheck time.Duration, held bool) {
	if d == nil {
		return rolloutProblem{rank: 5, reason: reasonProgressing, message: fmt.Sprintf("Deployment %s does not exist yet", w.name)}, 0, true
	}
	if deploymentReady(d, n.desired) {
		return rolloutProblem{}, 0, false
	}
	where := fmt.Sprintf("Deployment %s: %d/%d available, %d/%d updated", d.Name, n.available, n.desired, n.updated, n.desired)
	if c := deploymentCondition(d, appsv1.DeploymentReplicaFailure); c != nil && c.Status == corev1.ConditionTrue {
		return rolloutProblem{rank: 1, reason: reasonReplicaFailure, message: fmt.Sprintf("%s: %s", where, c.Message)}, 0, true
	}
	findings, stalled, recheck := rolloutFindings(d, now, pods)
	switch {
	case stalled:
		msg := where + ": the rollout made no progress within its deadline"
		if len(findings) > 0 {
			msg += "; " + findings[0].message
		}
		return rolloutProblem{rank: 0, reason: reasonRolloutStalled, message: msg}, recheck, true
	case len(findings) > 0:
		rank, ok := findingRank[findings[0].reason]
		if !ok {
			rank = len(findingRank)
		}
		return rolloutProblem{rank: 1 + rank, reason: findings[0].reason, message: where + "; " + findings[0].message}, recheck, true
	default:
		return rolloutProblem{rank: 10, reason: reasonProgressing, message: where}, recheck, true
	}
}

// rolloutFindings reads what holds the pods of a rollout that has stalled
// or made no progress for podReadDelay; of a younger one it reads nothing
// and says when it will be old enough (recheck).
//
// Nor does it read the pods of a rollout that has none of its spec yet:
// the Deployment controller has not acted on the spec, or its ReplicaSet
// has created no pod. Such a LIST would find nothing (or only the old
// spec's pods) and, in a burst of new stacks on a busy control plane,
// would be one more request per Deployment while the controller-manager
// catches up. A ReplicaSet that cannot create pods says why in the
// Deployment's ReplicaFailure condition, and the Deployment's next status
// (a watch event) brings the next look.
func rolloutFindings(d *appsv1.Deployment, now time.Time,
	pods func(*appsv1.Deployment) []podFinding) (findings []podFinding, stalled bool, recheck time.Duration) {
	progressing := deploymentCondition(d, appsv1.DeploymentProgressing)
	stalled = progressing != nil && progressing.Status == corev1.ConditionFalse && progressing.Reason == "ProgressDeadlineExceeded"
	if d.Status.ObservedGeneration < d.Generation || d.Status.Replicas == 0 {
		return nil, stalled, 0
	}
	since := d.CreationTimestamp.Time
	if progressing != nil && progressing.LastUpdateTime.After(since) {
		since = progressing.LastUpdateTime.Time
	}
	if idle := now.Sub(since); idle < podReadDelay && !stalled {
		return nil, false, podReadDelay - idle
	}
	return pods(d), stalled, 0
}

// readyCondition weighs it all: a failing release, then a spec not
// released yet, then the Deployments' problems, most telling first.
func readyCondition(stack *unstructured.Unstructured, view *releaseView, failed *condition, problems []rolloutProblem, available string) condition {
	switch {
	case failed != nil:
		return notReady(failed.Reason, fmt.Sprintf("%s (%s replicas of the previous release available)", failed.Message, available))
	case observedBehind(stack):
		return notReady(reasonProgressing, fmt.Sprintf("generation %d of the spec is being applied", stack.GetGeneration()))
	case len(problems) > 0:
		sort.SliceStable(problems, func(i, j int) bool { return problems[i].rank < problems[j].rank })
		msgs := make([]string, len(problems))
		for i, p := range problems {
			msgs[i] = p.message
		}
		return notReady(problems[0].reason, strings.Join(msgs, "; "))
	default:
		return condition{Type: conditionReady, Status: "True", Reason: reasonAvailable,
			Message: fmt.Sprintf("all %d Deployments are available with every replica updated (%s)", len(view.workloads), available)}
	}
}

// observedBehind tells whether the deployed release is of an older spec
// than the stack's.
func observedBehind(stack *unstructured.Unstructured) bool {
	observed, found, _ := unstructured.NestedInt64(stack.Object, "status", "observedGeneration")
	if !found {
		// Released by an operator that did not record it: until its next
		// release, the deployed one is taken to be of the current spec.
		return false
	}
	return observed != stack.GetGeneration()
}

// deploymentReady: the Deployment controller has seen the latest spec, every
// replica runs it and is available, and no old replica is left.
func deploymentReady(d *appsv1.Deployment, desired int64) bool {
	if d.Status.ObservedGeneration < d.Generation {
		return false
	}
	if int64(d.Status.UpdatedReplicas) < desired || int64(d.Status.AvailableReplicas) < desired ||
		d.Status.Replicas > d.Status.UpdatedReplicas {
		return false
	}
	c := deploymentCondition(d, appsv1.DeploymentAvailable)
	return c == nil && desired == 0 || c != nil && c.Status == corev1.ConditionTrue
}

func deploymentCondition(d *appsv1.Deployment, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == t {
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

// readinessSelector keeps the Deployment cache to Helm's objects (the
// cache's default); it is here so the cache options and the readiness
// agree.
var readinessSelector = labels.SelectorFromSet(labels.Set{"app.kubernetes.io/managed-by": "Helm"})
