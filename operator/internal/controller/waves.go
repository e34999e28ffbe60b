package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"
)

// Upgrade waves. A new operator release can change what a stack renders
// although the user changed nothing: a new default image (the chart's
// appVersion), a new default setting. Applied as the stacks happen to be
// reconciled, that restarts every model server of the fleet within a minute
// of the new operator starting. Such upgrades go in waves instead: at most
// the wave size of stacks at a time (DefaultUpgradeWave, a quarter of the
// operator's stacks); a stack waiting for its turn keeps its release and its
// pods, and says so in its OperatorUpgrade condition; the next stacks go
// only when every stack of the wave has rolled out (each changed
// Deployment at its new generation, all replicas updated and available).
// A stack of the wave that does not roll out holds the rest, as a canary
// would: a bad release stops at its first wave (a Deployment that was not
// rolled out before the turn, for want of room say, is not waited for).
//
// What passes at once: a change of the stack's own spec (the user asked for
// it; the stack's generation is past status.observedGeneration), an
// upgrade that replaces no pod (labels, Services, a
// progressDeadlineSeconds), a first install, a release that is not
// deployed (a failed one rolls forward). Stacks that pin what changed (an
// image tag) render the same and never move.
//
// The stacks of one namespace take at most half the places (rounded up)
// while another namespace's stack waits, so one tenant cannot hold the
// fleet. A paused Deployment is not waited for (it rolls when its owner
// resumes it), and no Deployment is waited for once its controller says
// it made no progress for its progress deadline, a minute past that
// deadline from when the upgrade was written, nor past maxTurn at all. A
// turn that misses one ends, so that one stack (a tenant's crash
// loop, a quota) cannot hold every upgrade, and says so where the
// operator's admins look: a Warning Event on the stack, the metric
// inference_stack_upgrade_turns_missed_deadline_total and an error log.
//
// The turns live in the leader's memory: a new leader (or a restart) in the
// middle of a wave admits a new wave while the last one may still roll, so
// at most twice the wave size roll then.
type upgradeWaves struct {
	// stacks counts the operator's stacks (the wave is a share of them);
	// cache reads their Deployments.
	stacks func(context.Context) (int, error)
	cache  client.Reader
	// live reads past the cache: what an upgrade that just returned did.
	live client.Reader
	size intstr.IntOrString
	wake chan event.GenericEvent
	gvk  schema.GroupVersionKind
	// recorder says on a stack that its turn missed its deadline.
	recorder record.EventRecorder

	mu      sync.Mutex
	rolling map[types.NamespacedName]*waveEntry
	// held lists the stacks waiting for a turn, first come first served
	// but for the places of a namespace (see perNamespace).
	held []types.NamespacedName
	// limit is the wave size last computed.
	limit int
}

// DefaultUpgradeWave is the share of the stacks an operator-caused upgrade
// may roll at a time.
const DefaultUpgradeWave = "25%"

const (
	// waveRecheck is how often a waiting stack is looked at again besides
	// being woken when its turn comes.
	waveRecheck = 2 * time.Minute
	// keptPlaceTTL bounds how long a place handed to a waiting stack stays
	// kept if that stack's reconcile never takes it (its dry run fails).
	keptPlaceTTL = time.Minute
	// turnMargin is added to the Deployments' progress deadline to make a
	// turn's: the Deployment controller's own report of a stalled rollout
	// comes after its deadline.
	turnMargin = time.Minute
	// defaultProgressDeadline is the Deployment's when its spec sets none.
	defaultProgressDeadline = 600 * time.Second
	// maxTurn bounds a turn whatever its Deployments say: a progress
	// deadline is the tenant's to set, and a rollout that keeps making
	// progress (a slow one, or one its owner keeps scaling) never misses
	// it.
	maxTurn = 30 * time.Minute
)

var turnsMissedDeadline = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "inference_stack_upgrade_turns_missed_deadline_total",
	Help: "Turns in an upgrade wave that ended because the stack's upgrade had not rolled out within its deadline; each is a failed canary worth a look.",
})

func init() {
	metrics.Registry.MustRegister(turnsMissedDeadline)
}

type waveEntry struct {
	// generations are the changed Deployments' generations before the
	// upgrade; upgraded is set once the upgrade was written. A place kept
	// for a woken stack has no generations yet, since keptAt.
	generations map[string]int64
	upgraded    bool
	keptAt      time.Time
	// deadlines are the waited Deployments' progress deadlines; the turn
	// stops waiting for one its deadline plus turnMargin after
	// upgradedAt, when the upgrade was written.
	deadlines  map[string]time.Duration
	upgradedAt time.Time
}

func newUpgradeWaves(mgr ctrl.Manager, gvk schema.GroupVersionKind, size string, recorder record.EventRecorder) (*upgradeWaves, error) {
	v, err := parseWave(size)
	if err != nil {
		return nil, err
	}
	c := mgr.GetCache()
	return &upgradeWaves{
		stacks: func(ctx context.Context) (int, error) {
			l := &unstructured.UnstructuredList{}
			l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
			if err := c.List(ctx, l, client.UnsafeDisableDeepCopy); err != nil {
				return 0, fmt.Errorf("counting the stacks: %w", err)
			}
			return len(l.Items), nil
		},
		cache:    c,
		live:     mgr.GetAPIReader(),
		size:     v,
		wake:     make(chan event.GenericEvent, 1024),
		gvk:      gvk,
		recorder: recorder,
		rolling:  map[types.NamespacedName]*waveEntry{},
	}, nil
}

func parseWave(s string) (intstr.IntOrString, error) {
	if s == "" {
		s = DefaultUpgradeWave
	}
	v := intstr.Parse(s)
	if _, err := intstr.GetScaledValueFromIntOrPercent(&v, 100, false); err != nil || (v.Type == intstr.Int && v.IntVal < 1) {
		return v, fmt.Errorf("upgrade wave %q: want a number of stacks (>= 1) or a percentage of them", s)
	}
	return v, nil
}

// waveSize is the wave size for total stacks: at least one.
func (w *upgradeWaves) waveSize(total int) int {
	n, _ := intstr.GetScaledValueFromIntOrPercent(&w.size, total, false)
	return max(n, 1)
}

// perNamespace is how many of a wave's limit places the stacks of one
// namespace may hold while another namespace's stack waits: half, rounded
// up, so one tenant cannot take every place.
func perNamespace(limit int) int {
	return max((limit+1)/2, 1)
}

// crowded tells whether namespace holds its share of the places while a
// stack of another namespace waits; w.mu must be held.
func (w *upgradeWaves) crowded(namespace string) bool {
	n := 0
	for k := range w.rolling {
		if k.Namespace == namespace {
			n++
		}
	}
	return n >= perNamespace(w.limit) && slices.ContainsFunc(w.held, func(k types.NamespacedName) bool { return k.Namespace != namespace })
}

// admit asks for key's turn to roll the Deployments named (the ones whose
// pod template the upgrade changes). It reports whether the stack may
// upgrade now and, if not, why.
func (w *upgradeWaves) admit(ctx context.Context, key types.NamespacedName, deployments []string) (bool, string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.rolling[key]; ok {
		if e.generations == nil { // a place kept for it by endTurn
			w.rolling[key] = w.entry(ctx, key, deployments)
		}
		return true, "", nil
	}
	for k, e := range w.rolling {
		if e.generations == nil && !e.upgraded && time.Since(e.keptAt) > keptPlaceTTL {
			delete(w.rolling, k)
		}
	}
	total, err := w.stacks(ctx)
	if err != nil {
		return false, "", err
	}
	w.limit = w.waveSize(total)
	if len(w.rolling) >= w.limit || w.crowded(key.Namespace) {
		if !slices.Contains(w.held, key) {
			w.held = append(w.held, key)
		}
		// Neither the stacks rolling (other tenants' names) nor counts
		// that change as they do: the message stays the same while the
		// stack waits, so waiting costs no status write.
		return false, fmt.Sprintf("the operator's new chart changes this stack's pods; upgrades the operator causes roll a few stacks at a time (--upgrade-wave %s), the next when those have rolled out: this one waits with its current release and pods",
			w.size.String()), nil
	}
	w.held = slices.DeleteFunc(w.held, func(k types.NamespacedName) bool { return k == key })
	w.rolling[key] = w.entry(ctx, key, deployments)
	return true, "", nil
}

// entry records the Deployments the turn waits for: the changed ones that
// are rolled out now. One that is not (pods pending for want of room, a
// crash loop) cannot come back "Ready again" and would hold the fleet for a
// fault the upgrade did not cause, so it is upgraded without being waited
// for; nor is a paused one, which does not roll.
func (w *upgradeWaves) entry(ctx context.Context, key types.NamespacedName, deployments []string) *waveEntry {
	e := &waveEntry{generations: map[string]int64{}, deadlines: map[string]time.Duration{}}
	for _, name := range deployments {
		d := &appsv1.Deployment{}
		if err := w.cache.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: name}, d); err == nil && !d.Spec.Paused && rolledOutSince(d, d.Generation-1) {
			e.generations[name] = d.Generation
			e.deadlines[name] = min(progressDeadline(d)+turnMargin, maxTurn)
		}
	}
	return e
}

// stalled tells whether d's controller says the rollout of a generation
// after before made no progress within its deadline: a slow rollout that
// progresses is no failed canary.
func stalled(d *appsv1.Deployment, before int64) bool {
	if d.Status.ObservedGeneration <= before {
		return false
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing {
			return c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded"
		}
	}
	return false
}

// progressDeadline is how long d's rollout may make no progress.
func progressDeadline(d *appsv1.Deployment) time.Duration {
	if d.Spec.ProgressDeadlineSeconds == nil {
		return defaultProgressDeadline
	}
	return time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second
}

// upgraded records that key's upgrade was written. Its Deployments may
// have rolled out already (their last events can come before the release
// record's write returns), so their state is checked now too; later events
// check again.
func (w *upgradeWaves) upgraded(ctx context.Context, key types.NamespacedName) {
	w.mu.Lock()
	e, ok := w.rolling[key]
	if !ok {
		w.mu.Unlock()
		return
	}
	if !e.upgraded {
		// The turn's clock starts once: later upgrades within the turn (the
		// stack's own changes pass at once) do not push its deadlines out.
		e.upgraded = true
		e.upgradedAt = time.Now()
		// Nothing else may look at the turn when a deadline comes.
		for _, d := range e.deadlines {
			time.AfterFunc(d+time.Second, func() { w.check(context.Background(), key) })
		}
		time.AfterFunc(maxTurn+time.Second, func() { w.check(context.Background(), key) })
	}
	generations := maps.Clone(e.generations)
	w.mu.Unlock()
	// A change the API server finds equal to what it has (1000m for 1)
	// bumps no generation: nothing of that Deployment rolls. Read with a
	// deadline and without the lock, which every readiness reconcile
	// takes.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var unchanged []string
	for name, before := range generations {
		d := &appsv1.Deployment{}
		if err := w.live.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: name}, d); err == nil && d.Generation == before {
			unchanged = append(unchanged, name)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.rolling[key] != e {
		return // the turn ended meanwhile
	}
	for _, name := range unchanged {
		delete(e.generations, name)
	}
	w.checkLocked(ctx, key)
}

// notNeeded gives back a place kept for key that its reconcile found no
// use for (nothing left to roll).
func (w *upgradeWaves) notNeeded(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Nor does it wait any longer (a stale place in the queue would count
	// as another namespace waiting).
	w.held = slices.DeleteFunc(w.held, func(k types.NamespacedName) bool { return k == key })
	if e, ok := w.rolling[key]; ok && !e.upgraded {
		w.endTurn(key)
	}
}

// check ends key's turn once its upgrade has rolled out, and lets the next
// stacks go.
func (w *upgradeWaves) check(ctx context.Context, key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checkLocked(ctx, key)
}

func (w *upgradeWaves) checkLocked(ctx context.Context, key types.NamespacedName) {
	e, ok := w.rolling[key]
	if !ok || !e.upgraded {
		return
	}
	var missed []string
	for name, before := range e.generations {
		d := &appsv1.Deployment{}
		err := w.cache.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: name}, d)
		switch {
		case apierrors.IsNotFound(err):
			// Removed from the stack meanwhile: nothing to wait for.
		case err == nil && d.Spec.Paused:
			// Paused during the turn: it rolls when it is resumed.
		case err == nil && rolledOutSince(d, before):
		case time.Since(e.upgradedAt) >= maxTurn,
			time.Since(e.upgradedAt) >= e.deadlines[name] && err == nil && stalled(d, before):
			missed = append(missed, name)
		default:
			return
		}
	}
	if len(missed) > 0 {
		w.missedDeadline(ctx, key, e, missed)
	}
	w.endTurn(key)
}

// missedDeadline says that key's turn ends with the Deployments missed not
// rolled out within their deadlines; w.mu must be held.
func (w *upgradeWaves) missedDeadline(ctx context.Context, key types.NamespacedName, e *waveEntry, missed []string) {
	slices.Sort(missed)
	var longest time.Duration
	for _, name := range missed {
		longest = max(longest, e.deadlines[name])
	}
	turnsMissedDeadline.Inc()
	ctrl.LoggerFrom(ctx).Error(nil, "an operator-caused upgrade did not roll out within its turn's deadline; its turn ends and the next stacks roll",
		"stack", key.String(), "deadline", longest.String(), "deployments", missed)
	if w.recorder == nil {
		return
	}
	// From the cache: the Event needs the stack's UID to be found with it.
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(w.gvk)
	if err := w.cache.Get(ctx, key, u); err != nil {
		return
	}
	w.recorder.Eventf(u, corev1.EventTypeWarning, "UpgradeTurnMissedDeadline",
		"the operator's upgrade of this stack has not rolled out within %s (the progress deadline plus %s): Deployment(s) %s; its turn in the upgrade wave ends so that other stacks are not held",
		longest.String(), turnMargin.String(), strings.Join(missed, ", "))
}

// forget ends the turn of a deleted stack, or drops it from the queue.
func (w *upgradeWaves) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held = slices.DeleteFunc(w.held, func(k types.NamespacedName) bool { return k == key })
	if _, ok := w.rolling[key]; ok {
		w.endTurn(key)
	}
}

// endTurn frees key's place and gives it to the first stack waiting, which
// is reconciled at once; w.mu must be held.
func (w *upgradeWaves) endTurn(key types.NamespacedName) {
	delete(w.rolling, key)
	if len(w.held) == 0 {
		return
	}
	// The first waiting stack whose namespace has places left.
	i := max(slices.IndexFunc(w.held, func(k types.NamespacedName) bool { return !w.crowded(k.Namespace) }), 0)
	next := w.held[i]
	w.held = slices.Delete(w.held, i, i+1)
	// Its place is kept for it: the reconcile that follows finds it
	// admitted (the Deployments' generations are read then).
	w.rolling[next] = &waveEntry{keptAt: time.Now()}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(w.gvk)
	u.SetNamespace(next.Namespace)
	u.SetName(next.Name)
	select {
	case w.wake <- event.GenericEvent{Object: u}:
	default:
		// The channel is drained by the controller; a full one means a
		// burst of turns ending at once, each of which the resync or the
		// stack's next event picks up.
	}
}

// rolledOutSince reports whether d has applied a generation after before and
// has all its replicas updated and available.
func rolledOutSince(d *appsv1.Deployment, before int64) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	return d.Generation > before && d.Status.ObservedGeneration >= d.Generation &&
		d.Status.UpdatedReplicas == want && d.Status.AvailableReplicas == want && d.Status.Replicas == want
}

// changedPodTemplates lists the Deployments of next whose pod template
// differs from current's (a Deployment new in next counts: it starts pods).
func changedPodTemplates(current, next string) ([]string, error) {
	before, err := podTemplates(current)
	if err != nil {
		return nil, err
	}
	after, err := podTemplates(next)
	if err != nil {
		return nil, err
	}
	var out []string
	for name, t := range after {
		if before[name] != t {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// podTemplates maps each Deployment of a manifest to its pod template, as
// canonical JSON.
func podTemplates(manifest string) (map[string]string, error) {
	out := map[string]string{}
	for _, doc := range releaseutil.SplitManifests(manifest) {
		var d struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				Template any `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			return nil, fmt.Errorf("reading a release manifest: %w", err)
		}
		if d.Kind != "Deployment" {
			continue
		}
		b, err := json.Marshal(d.Spec.Template)
		if err != nil {
			return nil, err
		}
		out[d.Metadata.Name] = string(b)
	}
	return out, nil
}
