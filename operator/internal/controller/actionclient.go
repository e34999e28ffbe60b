package controller

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	helmclient "github.com/operator-framework/helm-operator-plugins/pkg/client"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/titanml/inference-stack-operator/operator/helmrecord"
)

// newActionClientGetter is the library's Helm action client getter, wrapped so
// that
//   - every release revision this operator writes carries its major as a
//     Helm release label (so it caches only its own releases, and a revision
//     left pending names the operator that left it);
//   - a revision left pending by an operator that is gone is recovered
//     before the library trips over it, one some other writer left only
//     after a grace period (see recoverPending);
//   - failures reach the user as Events on the stack (the library only sets
//     status conditions) and successful changes are recorded too.
//   - Helm's repeated reads are trimmed (see helmcost.go) and the values are
//     validated with the chart's schema compiled once;
//   - every render is checked against Pod Security at the level of the
//     stack's namespace before Helm writes anything (see podsecurity.go);
//   - a stored release record the operator could not have written is
//     refused before Helm acts on it, and no hook ever runs (see
//     trustedreleases.go);
//   - an upgrade the operator's own chart causes waits for the stack's
//     turn in an upgrade wave (see waves.go).
//
// The library gets one action client per reconcile; each is bound to the
// state of the reconcile in flight for its stack (rs), where it records
// failures and the conditions it wants on the stack.
func newActionClientGetter(mgr ctrl.Manager, recorder record.EventRecorder, major string, valuesCheck *valuesSchema, foreignGrace time.Duration, waves *upgradeWaves, rs *reconciles,
	helmManaged func(schema.GroupVersionKind) bool, settle *settledCheck, keys *helmrecord.Keys, written *writtenGenerations) (helmclient.ActionClientGetter, error) {
	acg, err := helmclient.NewActionConfigGetter(helmRESTConfig(mgr), mgr.GetRESTMapper(), helmclient.StorageDriverMapper(releaseStorage(keys)))
	if err != nil {
		return nil, fmt.Errorf("creating Helm action config getter: %w", err)
	}
	releaseLabels := map[string]string{ReconciledByLabel: major}
	pendingSince := &firstSight{seen: map[string]sighting{}}
	names := newReleaseNames(mgr.GetCache())
	// Helm's client-side OpenAPI validation fetches the cluster's OpenAPI
	// documents on every install, upgrade and dry run; for a chart whose
	// output is tested against the typed Kubernetes objects (strict decoding
	// in the chart tests) that is API load for nothing. The API server still
	// validates every object it is sent.
	inner, err := helmclient.NewActionClientGetter(acg,
		// A failed install keeps what it created and a failed upgrade is
		// retried forward (see backoff.go): the library's default would
		// uninstall a failed install at once (whose deleted release
		// Secret re-queued the stack without backoff: install, uninstall,
		// install...) and roll a failed upgrade back with Force, which
		// replaces objects and restarts pods.
		helmclient.WithFailureRollbacks(false),
		// The chart has no hooks; a stored record's hooks are refused by
		// trustedReleases, and none ever runs.
		helmclient.AppendUninstallOptions(func(u *action.Uninstall) error {
			u.DisableHooks = true
			return nil
		}),
		podSecurityRenderers(mgr.GetCache()),
		helmclient.AppendInstallOptions(func(i *action.Install) error {
			i.DisableHooks = true
			i.DisableOpenAPIValidation = true
			i.Labels = releaseLabels
			return nil
		}),
		helmclient.AppendUpgradeOptions(func(u *action.Upgrade) error {
			u.DisableHooks = true
			u.DisableOpenAPIValidation = true
			u.Labels = releaseLabels
			return nil
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("creating Helm action client getter: %w", err)
	}
	return helmclient.ActionClientGetterFunc(func(ctx context.Context, obj client.Object) (helmclient.ActionInterface, error) {
		st := rs.of(client.ObjectKeyFromObject(obj))
		ac, err := inner.ActionClientFor(ctx, obj)
		if err == nil {
			ac.Config().Capabilities, err = settle.caps.get()
		}
		if err != nil {
			recorder.Eventf(obj, corev1.EventTypeWarning, "ClientError", "cannot create a Helm client: %v", err)
			return nil, err
		}
		cfg := ac.Config()
		// What the renders read besides the spec, as they will read it:
		// the digest of this reconcile says what its release was rendered
		// from (a change after this point only makes the digest stale).
		if facts, err := settle.render.facts(ctx, cfg.Capabilities, mgr.GetCache(), obj.GetNamespace()); err == nil {
			st.renderedWith(facts)
		}
		kc, ok := cfg.KubeClient.(*kube.Client)
		if !ok {
			return nil, fmt.Errorf("helm's Kubernetes client is a %T, which the operator cannot hold to the stack", cfg.KubeClient)
		}
		scope := &stackScope{namespace: obj.GetNamespace(), release: obj.GetName(), uid: obj.GetUID(), refused: func(err error) {
			ctrl.LoggerFrom(ctx).Info("kept Helm from acting outside the stack", "why", err.Error())
			recorder.Event(obj, corev1.EventTypeWarning, "OutsideTheStack", truncate(err.Error()))
		}}
		installing := &atomic.Bool{}
		cfg.KubeClient = cachedKubeClient{Client: kc, scope: scope, objects: mgr.GetCache(), cached: helmManaged, installing: installing, seen: st.objects(), written: written}
		cfg.Releases.Driver = newHistoryOnce(newTrustedReleases(leanRecords{cfg.Releases.Driver}, obj.GetName(), obj.GetNamespace()),
			names, obj.GetName(), obj.GetNamespace())
		return &eventingActionClient{ActionInterface: ac, obj: obj, recorder: recorder, major: major, state: st, schema: valuesCheck, installing: installing,
			namespaces: mgr.GetCache(), releaseSecrets: mgr.GetCache(), pendingSince: pendingSince, foreignGrace: foreignGrace, waves: waves}, nil
	}), nil
}

// helmRESTConfig is the manager's client configuration for Helm, with the
// manager's own transport (TLS, credentials, and the wrapping that counts,
// logs or fences requests, all already in it) under every client Helm
// makes. cli-runtime makes a REST client for every object of every render
// and Helm's storage one per reconcile; each built its transport anew from
// the configuration, which re-read the CA, certificate and key files (and
// a service account's token file) only to find the cached connection pool
// of the same transport: about 4% of the operator's CPU in a burst.
func helmRESTConfig(mgr ctrl.Manager) *rest.Config {
	cfg := rest.AnonymousClientConfig(mgr.GetConfig())
	// A custom transport carries its own TLS settings; client-go refuses
	// both.
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	cfg.Transport = mgr.GetHTTPClient().Transport
	return cfg
}

// newCapabilities reads the cluster's capabilities through cfg, each
// reading good for capabilitiesTTL.
func newCapabilities(cfg *rest.Config) (*capabilities, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating discovery client: %w", err)
	}
	return &capabilities{discovery: dc, ttl: capabilitiesTTL}, nil
}

// capabilitiesTTL bounds how long a newly installed API (say KEDA's) takes
// to reach the chart's .Capabilities.
const capabilitiesTTL = time.Minute

// capabilities caches what Helm calls the cluster's capabilities (server
// version and API versions). Without it every install, upgrade and dry run
// invalidates discovery and re-reads /version and every API group, which was
// most of the old operator's per-reconcile API load.
type capabilities struct {
	discovery discovery.DiscoveryInterface
	ttl       time.Duration

	mu      sync.Mutex
	caps    *chartutil.Capabilities
	fetched time.Time
}

func (c *capabilities) get() (*chartutil.Capabilities, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.caps != nil && time.Since(c.fetched) < c.ttl {
		return c.caps, nil
	}
	v, err := c.discovery.ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("reading the server version: %w", err)
	}
	apis, err := action.GetVersionSet(c.discovery)
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		// A broken aggregated API leaves the others usable, as in Helm.
		return nil, fmt.Errorf("reading the server's API versions: %w", err)
	}
	c.caps = &chartutil.Capabilities{
		APIVersions: apis,
		KubeVersion: chartutil.KubeVersion{Version: v.GitVersion, Major: v.Major, Minor: v.Minor},
		HelmVersion: chartutil.DefaultCapabilities.HelmVersion,
	}
	c.fetched = time.Now()
	return c.caps, nil
}

type eventingActionClient struct {
	helmclient.ActionInterface
	obj      client.Object
	recorder record.EventRecorder
	major    string
	state    *reconcileState
	schema   *valuesSchema
	// installing tells the Kubernetes client an install runs (see
	// cachedKubeClient).
	installing *atomic.Bool
	// namespaces reads the cached labels of namespaces: their Pod
	// Security level.
	namespaces client.Reader
	// releaseSecrets reads the cached metadata of release Secrets: who
	// wrote a pending revision.
	releaseSecrets client.Reader
	foreignGrace   time.Duration
	// pendingSince remembers when each pending revision was first seen.
	pendingSince *firstSight
	waves        *upgradeWaves
	// current is the release the library's first Get returned.
	current *release.Release
}

// checkValues refuses values that cannot make a release: too large to
// render (rendersize.go), or outside the chart's schema.
func (c *eventingActionClient) checkValues(vals map[string]any) error {
	if err := checkValuesSize(vals); err != nil {
		return err
	}
	return c.schema.validate(vals)
}

// maxEventMessage keeps a Helm error (which can quote whole manifests) within
// what an Event message may hold.
const maxEventMessage = 1024

func (c *eventingActionClient) warn(reason, format string, args ...any) {
	c.recorder.Event(c.obj, corev1.EventTypeWarning, reason, truncate(fmt.Sprintf(format, args...)))
}

// truncate keeps msg within maxEventMessage.
func truncate(msg string) string {
	if len(msg) > maxEventMessage {
		return msg[:maxEventMessage] + "…"
	}
	return msg
}

func (c *eventingActionClient) Install(name, namespace string, chrt *chart.Chart, vals map[string]any, opts ...helmclient.InstallOption) (*release.Release, error) {
	if err := c.checkValues(vals); err != nil {
		c.state.failed(err)
		c.warn(failureReason(err, "InstallFailed"), "installing the chart failed: %v", err)
		return nil, err
	}
	c.installing.Store(true)
	rel, err := c.ActionInterface.Install(name, namespace, chrt, vals, opts...)
	c.installing.Store(false)
	if err != nil {
		c.state.failed(err)
		c.warn(failureReason(err, "InstallFailed"), "installing the chart failed: %v", err)
		return rel, err
	}
	// No event: an install follows the user's create, and the status says
	// it (Deployed, then Ready). Events mark failures and what the
	// operator does to a stack already running, such as an upgrade; one
	// per install would be a write per stack in a burst of thousands.
	c.state.verified(rel)
	return rel, nil
}

func (c *eventingActionClient) Upgrade(name, namespace string, chrt *chart.Chart, vals map[string]any, opts ...helmclient.UpgradeOption) (*release.Release, error) {
	if err := c.checkValues(vals); err != nil {
		c.state.failed(err)
		c.warn(failureReason(err, "UpgradeFailed"), "rendering or upgrading the chart failed: %v", err)
		return nil, err
	}
	rel, err := c.ActionInterface.Upgrade(name, namespace, chrt, vals, opts...)
	if err != nil {
		c.state.failed(err)
		c.warn(failureReason(err, "UpgradeFailed"), "rendering or upgrading the chart failed: %v", err)
		return rel, err
	}
	// The library also calls Upgrade as a server-side dry run on every
	// reconcile to detect changes; only real upgrades are news.
	if rel.Info != nil && rel.Info.Status == release.StatusDeployed {
		c.state.verified(rel)
		c.recorder.Eventf(c.obj, corev1.EventTypeNormal, "Upgraded", "release %s upgraded (revision %d)", rel.Name, rel.Version)
		if c.waves != nil {
			c.waves.upgraded(context.Background(), client.ObjectKeyFromObject(c.obj))
		}
		return rel, nil
	}
	if isDryRun(opts) {
		return c.pace(rel)
	}
	return rel, nil
}

// pace holds back an upgrade the operator's own chart causes (see
// waves.go): when the stack's turn has not come, the dry run reports the
// deployed release, so the library finds nothing to upgrade and the
// stack keeps its pods.
func (c *eventingActionClient) pace(next *release.Release) (*release.Release, error) {
	cur, key := c.current, client.ObjectKeyFromObject(c.obj)
	if c.waves == nil {
		return next, nil
	}
	if cur == nil || cur.Info == nil || cur.Info.Status != release.StatusDeployed || next.Manifest == cur.Manifest {
		c.notHeld(key, reasonUpgradeNotNeeded, "the operator's chart no longer changes the deployed release, or no release is deployed: nothing waits for a wave")
		return next, nil
	}
	if userChanged(c.obj) {
		c.notHeld(key, reasonUpgradeWithSpec, "the operator's new chart was applied with the stack's own change, without waiting for a wave")
		return next, nil
	}
	changed, err := changedPodTemplates(cur.Manifest, next.Manifest)
	if err != nil || len(changed) == 0 {
		c.notHeld(key, reasonUpgradeNotNeeded, "the operator's new chart changes no pod template of the stack: applied without waiting for a wave")
		return next, nil
	}
	ok, why, err := c.waves.admit(context.Background(), key, changed)
	if err != nil {
		return nil, fmt.Errorf("pacing the upgrade: %w", err)
	}
	if !ok {
		// The deployed release is not what this build renders: no digest
		// may say it was verified as such.
		c.state.held()
		c.state.ensure(condition{Type: conditionOperatorUpgrade, Status: "True", Reason: reasonUpgradeQueued, Message: why})
		// Woken when a place frees; looked at again meanwhile in case
		// the place handed to another stack went unused.
		c.state.lookAgain(waveRecheck)
		return cur, nil
	}
	c.state.ensure(condition{Type: conditionOperatorUpgrade, Status: "False", Reason: reasonUpgradeTurn,
		Message: fmt.Sprintf("its turn in the operator's upgrade waves came: rolling what the new chart changes (%s)", strings.Join(changed, ", "))})
	return next, nil
}

// notHeld records that no upgrade of the stack waits for a wave, and
// clears an OperatorUpgrade=True the stack carries from when one did (the
// operator rolled back or hot-fixed, the stack's own change applied the
// new chart, the release is no longer deployed): a stack left saying it
// waits would say so for good, and be reconciled in full on every
// restart.
func (c *eventingActionClient) notHeld(key client.ObjectKey, reason, message string) {
	c.waves.notNeeded(key)
	u, ok := c.obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	if w, ok := conditionOf(u, conditionOperatorUpgrade); ok && w.Status == "True" {
		c.state.ensure(condition{Type: conditionOperatorUpgrade, Status: "False", Reason: reason, Message: message})
	}
}

// userChanged tells whether the stack's spec changed since its deployed
// release was applied: status.observedGeneration is the generation that
// release renders. A stack without one (written by an older operator)
// counts as changed, so nothing of the user's is ever held.
func userChanged(obj client.Object) bool {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return true
	}
	observed, found, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	return !found || observed != u.GetGeneration()
}

// isDryRun tells whether the library's upgrade options ask for a dry run.
func isDryRun(opts []helmclient.UpgradeOption) bool {
	u := &action.Upgrade{}
	for _, o := range opts {
		if err := o(u); err != nil {
			return false
		}
	}
	return u.DryRun
}

// Reconcile repairs drift: the library re-creates or patches every object of
// the release from the stored manifest.
func (c *eventingActionClient) Reconcile(rel *release.Release) error {
	// The stored manifest is re-applied as it is, not rendered: what it
	// runs is held to Pod Security as a render is, since whoever may edit
	// the namespace may write the record (stackscope.go holds where it
	// acts).
	if err := checkPodSecurity(c.namespaces, rel.Namespace, []byte(rel.Manifest)); err != nil {
		err = fmt.Errorf("not repairing the objects of release %s revision %d from its record: %w", rel.Name, rel.Version, err)
		c.state.failed(err)
		c.warn(failureReason(err, "ReconcileFailed"), "%v", err)
		return err
	}
	owned, err := withOwnershipMetadata(rel)
	if err != nil {
		return err
	}
	if err := c.ActionInterface.Reconcile(owned); err != nil {
		c.state.failed(err)
		c.warn("ReconcileFailed", "repairing the release's objects failed: %v", err)
		return err
	}
	c.state.verified(rel)
	return nil
}

func (c *eventingActionClient) Uninstall(name string, opts ...helmclient.UninstallOption) (*release.UninstallReleaseResponse, error) {
	resp, err := c.ActionInterface.Uninstall(name, opts...)
	if err != nil {
		c.warn("UninstallFailed", "uninstalling the release failed: %v", err)
	}
	return resp, err
}

// Get is the library's first read of a release in every reconcile; a
// revision left pending is recovered there, before the library would fail
// with Helm's "another operation is in progress".
func (c *eventingActionClient) Get(name string, opts ...helmclient.GetOption) (*release.Release, error) {
	rel, err := c.ActionInterface.Get(name, opts...)
	if err == nil && len(opts) == 0 {
		c.current = rel
	}
	if err != nil || len(opts) > 0 || rel.Info == nil || !rel.Info.Status.IsPending() {
		return rel, err
	}
	return c.recoverPending(rel)
}

// firstSight remembers when this process first saw each of a set of
// things (pending revisions), forgetting what it has not been asked about
// for a day.
type firstSight struct {
	mu   sync.Mutex
	seen map[string]sighting
}

type sighting struct{ first, last time.Time }

// first returns when key was first seen, now if never.
func (f *firstSight) first(key string, now time.Time) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, s := range f.seen {
		if now.Sub(s.last) > 24*time.Hour {
			delete(f.seen, k)
		}
	}
	s, ok := f.seen[key]
	if !ok {
		s.first = now
	}
	s.last = now
	f.seen[key] = s
	return s.first
}

// handoffGrace is how long a revision that another major's operator left
// pending is presumed to be still in progress: it can only happen in the
// moment a stack is relabelled from one major to another.
const handoffGrace = time.Minute

// DefaultForeignPendingGrace is how long a revision some other writer (the
// helm CLI, the legacy operator) left pending is presumed to be still in
// progress: Helm's own --wait timeout is 5 minutes.
const DefaultForeignPendingGrace = 10 * time.Minute

// recoverPending marks a pending revision failed, so the reconcile rolls
// forward to the stack's desired state with an upgrade — at once only if
// the revision is provably this operator's own, otherwise after its
// writer's grace period (until then the stack backs off and says why).
//
// A pending revision of this operator's own, seen at the start of a
// reconcile, is stale: only the elected leader of a major runs Helm
// operations, a reconcile of one stack never overlaps another of the same
// stack, and a leader that lost its lease sends no write once the new one
// may have acquired it (operator/internal/fence). So the operator that wrote it crashed, was killed or lost
// its lease mid-operation. Nothing is uninstalled: the objects the
// interrupted operation created stay and the upgrade adopts them.
func (c *eventingActionClient) recoverPending(rel *release.Release) (*release.Release, error) {
	writer, who := c.pendingWriter(rel)
	grace := time.Duration(0)
	switch writer {
	case c.major:
	case "":
		grace = c.foreignGrace
	default:
		grace = handoffGrace
	}
	// The grace runs from when this process first saw the revision
	// pending, not from the time the record says it started: that is
	// the writer's clock, and anyone who may write the namespace's Secrets
	// may write it (a time in the past would skip the wait, one in the
	// future stretch it).
	first := c.pendingSince.first(fmt.Sprintf("%s/%s.v%d", rel.Namespace, rel.Name, rel.Version), time.Now())
	if since := time.Since(first); since < grace {
		err := fmt.Errorf("release %s revision %d has been %s since at least %s, written by %s; waiting for it to finish, or until %s before marking it failed",
			rel.Name, rel.Version, rel.Info.Status, first.UTC().Format(time.RFC3339), who,
			first.Add(grace).UTC().Format(time.RFC3339))
		c.state.failed(err)
		return nil, err
	}
	was := rel.Info.Status
	rel.SetStatus(release.StatusFailed, fmt.Sprintf("left %s by %s; marked failed by the %s operator to roll forward", was, who, c.major))
	if err := c.Config().Releases.Update(rel); err != nil {
		return nil, fmt.Errorf("marking the stale %s revision %d of release %s failed: %w", was, rel.Version, rel.Name, err)
	}
	msg := fmt.Sprintf("revision %d of release %s was left %s by %s (started %s); marked it failed and rolling forward to the stack's desired state; no workload was deleted",
		rel.Version, rel.Name, was, who, rel.Info.LastDeployed.UTC().Format(time.RFC3339))
	if grace > 0 {
		msg += fmt.Sprintf(" (waited %s for it to finish)", grace)
	}
	c.recorder.Event(c.obj, corev1.EventTypeWarning, "RecoveredPendingRelease", msg)
	c.state.ensure(condition{Type: conditionRecovered, Status: "True", Reason: reasonPendingReleaseFailed, Message: msg})
	return rel, nil
}

// pendingWriter tells which operator major wrote a pending revision, or ""
// if no operator provably did, with a description for the user. Helm's
// upgrade and rollback copy the previous revision's labels, so the writer
// label alone proves nothing: an operator's revision also carries the
// owner reference its storage puts on every release Secret it writes
// (the helm CLI's carries none), and no operator ever rolls back.
func (c *eventingActionClient) pendingWriter(rel *release.Release) (string, string) {
	foreign := "a writer other than an operator (such as the helm CLI, or the operator this one replaced)"
	if rel.Info.Status == release.StatusPendingRollback {
		return "", "a rollback, which no operator runs (such as helm rollback)"
	}
	writer := rel.Labels[ReconciledByLabel]
	if writer == "" {
		return "", foreign
	}
	s := releaseSecret()
	key := client.ObjectKey{Namespace: rel.Namespace, Name: fmt.Sprintf("sh.helm.release.v1.%s.v%d", rel.Name, rel.Version)}
	if writer == c.major {
		// A revision another major wrote is told apart by its label (a
		// relabelled stack).
		if err := c.releaseSecrets.Get(context.Background(), key, s); err != nil {
			return "", foreign
		}
		if ref := metav1.GetControllerOf(s); ref == nil || ref.UID != c.obj.GetUID() {
			return "", foreign + ", on top of a revision of the " + writer + " operator"
		}
		return writer, "the " + writer + " operator (this one), which stopped mid-operation"
	}
	return writer, "the " + writer + " operator, which reconciled the stack until it was relabelled"
}

// canonicalQuantities writes the resource quantities of a pod template in
// the form the API server returns them ("1" for 1, "1Gi" for 1024Mi), so
// that drift repair, which compares the manifest with the live object as
// JSON, sees no drift in a quantity the chart or the stack wrote another
// way: each such difference was a PATCH of every Deployment on every
// resync and restart, changing nothing.
func canonicalQuantities(obj map[string]any) {
	spec, _, _ := unstructured.NestedMap(obj, "spec", "template", "spec")
	if spec == nil {
		return
	}
	// Every assertion is checked: a stored manifest is a tenant's input
	// (a forged release record) and may hold anything where a container
	// or a volume should be.
	for _, field := range []string{"initContainers", "containers"} {
		containers, _ := spec[field].([]any)
		for _, c := range containers {
			container, _ := c.(map[string]any)
			resources, _ := container["resources"].(map[string]any)
			for _, kind := range []string{"limits", "requests"} {
				quantities, _ := resources[kind].(map[string]any)
				for name, v := range quantities {
					quantities[name] = canonicalQuantity(v)
				}
			}
		}
	}
	volumes, _ := spec["volumes"].([]any)
	for _, v := range volumes {
		volume, _ := v.(map[string]any)
		if emptyDir, ok := volume["emptyDir"].(map[string]any); ok && emptyDir["sizeLimit"] != nil {
			emptyDir["sizeLimit"] = canonicalQuantity(emptyDir["sizeLimit"])
		}
	}
	_ = unstructured.SetNestedMap(obj, spec, "spec", "template", "spec")
}

// canonicalQuantity is v as the API server writes it back, or v itself if
// it is no quantity (the API server will refuse it anyway).
func canonicalQuantity(v any) any {
	s := fmt.Sprint(v)
	if f, ok := v.(float64); ok {
		// A YAML number decodes to a float64, which fmt writes in
		// exponent form from 1e21 on, and %v from about 1e6 on for some
		// values (17179869184 is 1.7179869184e+10): written out, it
		// parses as the quantity the API server writes back.
		s = strconv.FormatFloat(f, 'f', -1, 64)
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return v
	}
	return q.String()
}

// withOwnershipMetadata returns a copy of rel whose manifest carries the
// metadata Helm puts on every object it installs or upgrades but does not
// store in the manifest: the managed-by label and the release name and
// namespace annotations. helm-operator-plugins' drift repair works from the
// stored manifest, so an object it re-created would otherwise lack Helm's
// ownership, and a later install (after a lost release record) or the helm
// CLI could not adopt it.
func withOwnershipMetadata(rel *release.Release) (*release.Release, error) {
	docs := releaseutil.SplitManifests(rel.Manifest)
	keys := make([]string, 0, len(docs))
	for k := range docs {
		keys = append(keys, k)
	}
	sort.Sort(releaseutil.BySplitManifestsOrder(keys))
	var out strings.Builder
	for _, k := range keys {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(docs[k]), &obj); err != nil {
			return nil, fmt.Errorf("reading the manifest of release %s: %w", rel.Name, err)
		}
		if obj == nil {
			continue
		}
		u := unstructured.Unstructured{Object: obj}
		labels := u.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels["app.kubernetes.io/managed-by"] = "Helm"
		u.SetLabels(labels)
		annotations := u.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations["meta.helm.sh/release-name"] = rel.Name
		annotations["meta.helm.sh/release-namespace"] = rel.Namespace
		u.SetAnnotations(annotations)
		canonicalQuantities(u.Object)
		doc, err := yaml.Marshal(u.Object)
		if err != nil {
			return nil, fmt.Errorf("writing the manifest of release %s: %w", rel.Name, err)
		}
		out.WriteString("---\n")
		out.Write(doc)
	}
	owned := *rel
	owned.Manifest = out.String()
	return &owned, nil
}
