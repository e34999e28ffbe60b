// Package controller wires helm-operator-plugins' Helm reconciler for the
// InferenceStack kind into a controller-runtime manager, with the major
// isolation and user-facing events this operator adds on top of it.
package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	helmclient "github.com/operator-framework/helm-operator-plugins/pkg/client"
	"github.com/operator-framework/helm-operator-plugins/pkg/reconciler"
	"github.com/operator-framework/helm-operator-plugins/pkg/values"
	"github.com/operator-framework/helm-operator-plugins/pkg/watches"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Options tune every watch; zero values keep what watches.yaml says.
type Options struct {
	// MaxConcurrentReconciles overrides the watches' concurrency when > 0.
	MaxConcurrentReconciles int
	// ReconcilePeriod overrides the watches' resync period when non-nil.
	ReconcilePeriod *time.Duration
	// MaxReleaseHistory bounds the Helm release Secrets kept per stack.
	MaxReleaseHistory int
	// Version is the operator's version, shown in the stacks' conditions.
	Version string
	// Namespaces restricts the operator to these namespaces (comma
	// separated); empty means all.
	Namespaces string
	// ResyncPeriod is the safety net under the watches: every cached stack
	// is reconciled again this often, so a tampered release Secret or a
	// missed event is repaired eventually. Default DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// UnclaimedGrace is how long a stack labelled for a major may go
	// unclaimed before the operator reports that no operator of that major
	// is reconciling it. Default DefaultUnclaimedGrace.
	UnclaimedGrace time.Duration
	// MajorLease names the leader-election Lease of a major's operator.
	// With it, another major's claim on a stack is void once that Lease
	// has not been renewed for ClaimGrace (its operator is gone), and this
	// operator removes the claim and the finalizer; without it, claims
	// never end.
	MajorLease func(major string) string
	// ForeignPendingGrace is how long a release revision left pending by a
	// writer other than an operator (the helm CLI) is waited for before it
	// is marked failed. Default DefaultForeignPendingGrace.
	ForeignPendingGrace time.Duration
	// UpgradeWave is how many stacks (a number, or a percentage of the
	// operator's stacks) an upgrade the operator's own chart causes may
	// roll at a time. Default DefaultUpgradeWave.
	UpgradeWave string
	// ClaimGrace is how long another major's operator may be gone before
	// its claims are void. Default DefaultClaimGrace.
	ClaimGrace time.Duration
}

const (
	// DefaultResyncPeriod is long: drift is repaired through watches within
	// moments; the resync only catches what no event announces.
	DefaultResyncPeriod = 6 * time.Hour
	// DefaultUnclaimedGrace leaves an installed operator of the stack's
	// major time to claim it, even behind a burst of new stacks.
	DefaultUnclaimedGrace = time.Minute
	// DefaultClaimGrace outlasts an operator's restart or upgrade (a new
	// pod pulling its image on a busy node) by a wide margin: voiding the
	// claims of a live operator costs a write per stack twice over.
	DefaultClaimGrace = 5 * time.Minute
	// waitForDeletionTimeout bounds how long a reconcile waits for an
	// uninstalled stack to disappear from the cache, which it polls (see
	// reconcileState.readsCache): long enough for the cache to see a stack
	// that nothing else holds go, short enough that stacks another
	// finalizer keeps (foreground deletion, another controller's) do not
	// take the workers: the library's default of 30 s, eight such stacks,
	// and no other stack installed meanwhile.
	waitForDeletionTimeout = 2 * time.Second
	// defaultReleaseHistory bounds the Helm release Secrets kept per stack.
	defaultReleaseHistory = 5
)

func (o Options) resyncPeriod() *time.Duration {
	p := o.ResyncPeriod
	if p <= 0 {
		p = DefaultResyncPeriod
	}
	return &p
}

func (o Options) unclaimedGrace() time.Duration {
	if o.UnclaimedGrace <= 0 {
		return DefaultUnclaimedGrace
	}
	return o.UnclaimedGrace
}

func (o Options) foreignPendingGrace() time.Duration {
	if o.ForeignPendingGrace <= 0 {
		return DefaultForeignPendingGrace
	}
	return o.ForeignPendingGrace
}

func (o Options) claimGrace() time.Duration {
	if o.ClaimGrace <= 0 {
		return DefaultClaimGrace
	}
	return o.ClaimGrace
}

func (o Options) namespaces() map[string]cache.Config {
	if o.Namespaces == "" {
		return nil
	}
	out := map[string]cache.Config{}
	for _, ns := range strings.Split(o.Namespaces, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			out[ns] = cache.Config{}
		}
	}
	return out
}

// The InferenceStack RBAC this operator needs; controller-gen turns these
// markers into operator/rbac/role.yaml, the one source of the bundle's
// permissions.
//
// +kubebuilder:rbac:groups=models.takeoff.co,resources=inferencestacks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=models.takeoff.co,resources=inferencestacks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=models.takeoff.co,resources=inferencestacks/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=list
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
//
// What the inference-stack chart renders (and Helm reads back to diff):
//
// +kubebuilder:rbac:groups="",resources=configmaps;services;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ingresses,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=keda.sh,resources=scaledobjects,verbs=get;list;watch;create;update;patch;delete

// Setup registers, per watch, the stacks' controller (helm-operator-plugins'
// reconciler behind this operator's claim, recovery and watches) and the
// hand-off controller that lets go of stacks relabelled away from this
// major.
func Setup(mgr ctrl.Manager, ws []watches.Watch, opts Options) error {
	co, err := CacheOptions(ws, opts)
	if err != nil {
		return err
	}
	helmManaged, err := helmManagedKinds(co, mgr.GetScheme())
	if err != nil {
		return err
	}
	if err := indexReleaseSecrets(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	for _, w := range ws {
		if err := setupWatch(mgr, w, opts, helmManaged); err != nil {
			return fmt.Errorf("watch %s: %w", w.Kind, err)
		}
	}
	return nil
}

// setupWatch wires the controller itself rather than through the library's
// SetupWithManager, which would fix the watches and their predicates: the
// operator watches its stacks, their release Secrets and the objects of
// their releases with predicates that ignore its own writes and what other
// controllers write (TestLibraryDefaults pins the library defaults taken
// over here).
func setupWatch(mgr ctrl.Manager, w watches.Watch, opts Options, helmManaged func(schema.GroupVersionKind) bool) error {
	major, err := newMajorSelector(w.Selector)
	if err != nil {
		return err
	}
	gvk := w.GroupVersionKind
	primary := registerKind(mgr, gvk)

	recorder := mgr.GetEventRecorderFor(fmt.Sprintf("%s-operator", w.Kind))
	chrt, schemaCheck, err := lean(w.Chart)
	if err != nil {
		return err
	}
	waves, err := newUpgradeWaves(mgr, gvk, opts.UpgradeWave, recorder)
	if err != nil {
		return err
	}
	rs := newReconciles()
	caps, err := newCapabilities(mgr.GetConfig())
	if err != nil {
		return err
	}
	render, err := newRenderInputs(opts.Version, chrt, w.OverrideValues)
	if err != nil {
		return err
	}
	settled := &settledCheck{render: render, caps: caps, cache: mgr.GetCache()}
	keys, err := newReleaseKeys(mgr, gvk, major.Major, opts)
	if err != nil {
		return err
	}
	written := newWrittenGenerations()
	acg, err := newActionClientGetter(mgr, recorder, major.Major, schemaCheck, opts.foreignPendingGrace(), waves, rs, helmManaged, settled, keys, written)
	if err != nil {
		return err
	}

	period, concurrency, history := opts.reconcilePeriod(w), opts.concurrency(w), opts.releaseHistory()
	cl := newSelectorClient(mgr.GetClient(), mgr.GetCache(), mgr.GetAPIReader(), gvk, major.own(), rs)
	backoff := newFailureBackoff()
	deps := &dependentWatches{owner: primary, cache: mgr.GetCache(), scheme: mgr.GetScheme(), mapper: mgr.GetRESTMapper(),
		watched: map[schema.GroupVersionKind]bool{}, backoff: backoff, reconciles: rs}
	inner, err := newHelmReconciler(w, chrt, period, history, recorder, acg, cl, deps)
	if err != nil {
		return err
	}
	r := &stackReconciler{inner: inner, client: cl, apiReader: mgr.GetAPIReader(), gvk: gvk, major: major,
		version: opts.Version, recorder: recorder, backoff: backoff, settled: settled, period: period}
	if watchesDependents(w) {
		r.deps = deps
	}
	c, err := controller.New(fmt.Sprintf("%s-controller", strings.ToLower(w.Kind)), mgr,
		controller.Options{Reconciler: r, MaxConcurrentReconciles: concurrency})
	if err != nil {
		return fmt.Errorf("creating controller: %w", err)
	}
	deps.controller = c

	if err := c.Watch(source.Kind(mgr.GetCache(), primary,
		&handler.TypedEnqueueRequestForObject[*unstructured.Unstructured]{},
		stackChanged(major))); err != nil {
		return fmt.Errorf("watching %s: %w", w.Kind, err)
	}
	// A stack whose turn in an upgrade wave has come.
	if err := c.Watch(source.Channel(waves.wake, &handler.EnqueueRequestForObject{})); err != nil {
		return fmt.Errorf("watching upgrade waves: %w", err)
	}
	// A deleted release Secret of the deployed revision is reinstated at
	// once; other tampering with one is caught by the resync. Helm's own
	// pruning of old revisions (after every upgrade, a failed one
	// included) is no drift: it must not end a failing stack's backoff.
	if err := c.Watch(source.Kind(mgr.GetCache(), releaseSecret(),
		drift(backoff, handler.TypedEnqueueRequestForOwner[*metav1.PartialObjectMetadata](mgr.GetScheme(), mgr.GetRESTMapper(), primary, handler.OnlyControllerOwner())),
		deployedReleaseDeleted(major.Major))); err != nil {
		return fmt.Errorf("watching release Secrets: %w", err)
	}
	if err := setupReadiness(mgr, gvk, waves, written); err != nil {
		return fmt.Errorf("setting up readiness: %w", err)
	}
	if err := setupHandoff(mgr, gvk, major, recorder, opts); err != nil {
		return fmt.Errorf("setting up hand-off: %w", err)
	}
	ctrl.Log.WithName("setup").Info("reconciling", "kind", w.Kind, "selector", major.own().String(),
		"maxConcurrentReconciles", concurrency, "reconcilePeriod", period.String())
	return nil
}

// newHelmReconciler builds the library's reconciler of the watch's kind,
// on this operator's client and action clients; its post hook adds the
// release's objects to the watches unless the watch opts out.
func newHelmReconciler(w watches.Watch, chrt *chart.Chart, period time.Duration, history int, recorder record.EventRecorder,
	acg helmclient.ActionClientGetter, cl client.Client, deps *dependentWatches) (reconcile.Reconciler, error) {
	ropts := []reconciler.Option{
		reconciler.WithChart(*chrt),
		reconciler.WithGroupVersionKind(w.GroupVersionKind),
		reconciler.WithOverrideValues(w.OverrideValues),
		reconciler.WithReconcilePeriod(period),
		reconciler.WithMaxReleaseHistory(history),
		reconciler.WithWaitForDeletionTimeout(waitForDeletionTimeout),
		reconciler.WithEventRecorder(recorder),
		reconciler.WithActionClientGetter(acg),
		reconciler.WithClient(cl),
		reconciler.WithValueTranslator(specValues),
		reconciler.WithValueMapper(values.MapperFunc(func(v chartutil.Values) chartutil.Values { return v })),
		reconciler.WithLog(ctrl.Log.WithName("helm").WithName(w.Kind)),
	}
	if watchesDependents(w) {
		ropts = append(ropts, reconciler.WithPostHook(deps))
	}
	inner, err := reconciler.New(ropts...)
	if err != nil {
		return nil, fmt.Errorf("creating reconciler: %w", err)
	}
	return inner, nil
}

// watchesDependents tells whether the watch has the release's objects
// watched (the default).
func watchesDependents(w watches.Watch) bool {
	return w.WatchDependentResources == nil || *w.WatchDependentResources
}

// registerKind makes the manager's scheme know the watched kind as
// unstructured objects, and returns an empty one of it to watch.
func registerKind(mgr ctrl.Manager, gvk schema.GroupVersionKind) *unstructured.Unstructured {
	primary := &unstructured.Unstructured{}
	primary.SetGroupVersionKind(gvk)
	mgr.GetScheme().AddKnownTypeWithName(gvk, &unstructured.Unstructured{})
	metav1.AddToGroupVersion(mgr.GetScheme(), gvk.GroupVersion())
	return primary
}

// reconcilePeriod is the watch's periodic resync unless the options
// override it.
func (o Options) reconcilePeriod(w watches.Watch) time.Duration {
	if o.ReconcilePeriod != nil {
		return *o.ReconcilePeriod
	}
	return w.ReconcilePeriod.Duration
}

// concurrency is the options', the watch's, or one stack at a time.
func (o Options) concurrency(w watches.Watch) int {
	concurrency := 1
	if w.MaxConcurrentReconciles != nil {
		concurrency = *w.MaxConcurrentReconciles
	}
	if o.MaxConcurrentReconciles > 0 {
		concurrency = o.MaxConcurrentReconciles
	}
	return concurrency
}

// releaseHistory is the options' bound on release Secrets, or
// defaultReleaseHistory.
func (o Options) releaseHistory() int {
	if o.MaxReleaseHistory <= 0 {
		return defaultReleaseHistory
	}
	return o.MaxReleaseHistory
}

// deployedReleaseDeleted lets through only the deletion of a deployed
// revision's release Secret that this major wrote.
func deployedReleaseDeleted(major string) predicate.TypedFuncs[*metav1.PartialObjectMetadata] {
	return predicate.TypedFuncs[*metav1.PartialObjectMetadata]{
		CreateFunc: func(event.TypedCreateEvent[*metav1.PartialObjectMetadata]) bool { return false },
		UpdateFunc: func(event.TypedUpdateEvent[*metav1.PartialObjectMetadata]) bool { return false },
		DeleteFunc: func(e event.TypedDeleteEvent[*metav1.PartialObjectMetadata]) bool {
			l := e.Object.GetLabels()
			return l["status"] == "deployed" && l[ReconciledByLabel] == major
		},
		GenericFunc: func(event.TypedGenericEvent[*metav1.PartialObjectMetadata]) bool { return false },
	}
}

// specValues makes a stack's spec the chart's values (the library's default
// translator).
var specValues = values.TranslatorFunc(func(_ context.Context, u *unstructured.Unstructured) (chartutil.Values, error) {
	spec, ok := u.Object["spec"].(map[string]any)
	if !ok {
		return nil, errors.New("the stack has no spec object")
	}
	return spec, nil
})

// stackChanged lets through the stack events that can change what the
// release should be: creations, deletions, spec (generation), label and
// annotation changes, the start of a deletion, and resyncs. It drops the
// operator's own writes — status, and adding its finalizer and claim label
// — which would otherwise cost each stack another reconcile with a full
// dry-run render. The removal of its claim or finalizer by someone else (a
// PUT or kubectl replace that rewrites the labels) passes: the stack is
// claimed again at once.
func stackChanged(major majorSelector) predicate.TypedFuncs[*unstructured.Unstructured] {
	withoutClaim := func(u *unstructured.Unstructured) map[string]string {
		l := maps.Clone(u.GetLabels())
		if l[ReconciledByLabel] == major.Major {
			delete(l, ReconciledByLabel)
		}
		return l
	}
	return predicate.TypedFuncs[*unstructured.Unstructured]{
		UpdateFunc: func(e event.TypedUpdateEvent[*unstructured.Unstructured]) bool {
			o, n := e.ObjectOld, e.ObjectNew
			return o.GetResourceVersion() == n.GetResourceVersion() || // resync
				o.GetGeneration() != n.GetGeneration() ||
				(claimedBy(o, major.Major) && !claimedBy(n, major.Major)) ||
				(controllerutil.ContainsFinalizer(o, uninstallFinalizer) && !controllerutil.ContainsFinalizer(n, uninstallFinalizer)) ||
				(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) ||
				!maps.Equal(withoutClaim(o), withoutClaim(n)) ||
				!maps.Equal(o.GetAnnotations(), n.GetAnnotations())
		},
	}
}

// releaseSecret is the metadata-only view of Helm's release Secrets the
// operator caches: labels and owner references, never the payload.
func releaseSecret() *metav1.PartialObjectMetadata {
	s := &metav1.PartialObjectMetadata{}
	s.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return s
}

// SetClientLimits sets the client-side rate limit of every client the
// operator builds from cfg (its own and Helm's). qps <= 0 turns client-side
// limiting off, as controller-runtime does by default: the API server's
// priority and fairness protects it, and client-go's fallback of 5 requests
// per second would make a burst of stacks wait on the operator itself.
func SetClientLimits(cfg *rest.Config, qps float64, burst int) {
	if qps <= 0 {
		cfg.QPS, cfg.Burst = -1, 0
		return
	}
	cfg.QPS = float32(qps)
	cfg.Burst = max(burst, int(qps))
}

// helmManagedKinds tells, from the cache options, the kinds whose cache
// holds every object labelled app.kubernetes.io/managed-by=Helm in the
// watched namespaces: every kind but those CacheOptions selects otherwise
// (the stacks, the release Secrets). Helm's reads of such objects can be
// answered from the cache when it holds none (see cachedKubeClient).
func helmManagedKinds(co cache.Options, scheme *runtime.Scheme) (func(schema.GroupVersionKind) bool, error) {
	narrower := map[schema.GroupVersionKind]bool{}
	for obj, by := range co.ByObject {
		gvk, err := apiutil.GVKForObject(obj, scheme)
		if err != nil {
			return nil, fmt.Errorf("reading the kind of a cached object: %w", err)
		}
		if by.Label != nil && by.Label.String() != co.DefaultLabelSelector.String() && !by.Label.Empty() || by.Namespaces != nil {
			narrower[gvk] = true
		}
	}
	return func(gvk schema.GroupVersionKind) bool { return !narrower[gvk] }, nil
}

// CacheOptions restricts what the operator caches, which is most of its
// memory: only the stacks of its own major (so a foreign stack is
// invisible, not merely ignored), only the metadata of its own major's Helm
// release Secrets (other teams' releases and every payload stay out), and
// only Helm-managed objects of the kinds it watches as dependents.
func CacheOptions(ws []watches.Watch, opts Options) (cache.Options, error) {
	co := cache.Options{
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{"app.kubernetes.io/managed-by": "Helm"}),
		DefaultNamespaces:    opts.namespaces(),
		SyncPeriod:           opts.resyncPeriod(),
		// Managed fields are often the larger part of an object, and
		// nothing the operator does reads them; of the metadata-only
		// views of Helm-labelled objects, only what is read
		// (slimcache.go).
		DefaultTransform: slimMetadataOnly,
		ByObject:         map[client.Object]cache.ByObject{},
	}
	for _, w := range ws {
		major, err := newMajorSelector(w.Selector)
		if err != nil {
			return co, fmt.Errorf("watch %s: %w", w.Kind, err)
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(w.GroupVersionKind)
		co.ByObject[u] = cache.ByObject{Label: major.own()}
		// The metadata of every Helm release in the watched namespaces,
		// whoever wrote it: a release name the cache has never seen has no
		// history to list (releaseNames), and a revision written on top of
		// this operator's (by the helm CLI, or another major) shows.
		co.ByObject[releaseSecret()] = cache.ByObject{
			Label:     labels.SelectorFromSet(labels.Set{"owner": "helm"}),
			Transform: slimMetadata,
		}
	}
	// Every namespace's labels: the Pod Security level of its stacks.
	// Namespaces are the platform's, not a tenant's: their labels are
	// kept as they are.
	co.ByObject[namespaceMetadata()] = cache.ByObject{Label: labels.Everything(), Transform: cache.TransformStripManagedFields()}
	// The stacks' Deployments, without their pod templates: their status
	// is the stacks' readiness.
	co.ByObject[&appsv1.Deployment{}] = cache.ByObject{Label: readinessSelector, Transform: slimDeployment}
	return co, nil
}
