package controller_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/titanml/inference-stack-operator/operator/internal/controller"
)

// releaseProblems describes what is wrong with stack's Helm release: a
// revision left pending, not exactly one deployed revision, or a latest
// revision that is not the deployed one. Empty means healthy.
func (e *env) releaseProblems(ctx context.Context, stack string) string {
	var secrets corev1.SecretList
	if err := e.cl.List(ctx, &secrets, client.InNamespace(ns), client.MatchingLabels{"owner": "helm", "name": stack}); err != nil {
		return err.Error()
	}
	deployed, latest, latestStatus := 0, 0, ""
	var problems []string
	for _, s := range secrets.Items {
		status := s.Labels["status"]
		v, _ := strconv.Atoi(s.Labels["version"])
		if strings.HasPrefix(status, "pending") {
			problems = append(problems, fmt.Sprintf("revision %d is %s", v, status))
		}
		if status == "deployed" {
			deployed++
		}
		if v > latest {
			latest, latestStatus = v, status
		}
	}
	if deployed != 1 {
		problems = append(problems, fmt.Sprintf("%d deployed revisions", deployed))
	}
	if latestStatus != "deployed" {
		problems = append(problems, fmt.Sprintf("latest revision %d is %q", latest, latestStatus))
	}
	return strings.Join(problems, ", ")
}

// pendingReleases counts release revisions left pending in the namespace.
func (e *env) pendingReleases(ctx context.Context) int {
	var secrets corev1.SecretList
	if err := e.cl.List(ctx, &secrets, client.InNamespace(ns), client.MatchingLabels{"owner": "helm"}); err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, s := range secrets.Items {
		if strings.HasPrefix(s.Labels["status"], "pending") {
			n++
		}
	}
	return n
}

// stackUIDs lists the stacks by name.
func (e *env) stackUIDs(ctx context.Context) map[string]types.UID {
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("models.takeoff.co/v1alpha1")
	list.SetKind("InferenceStackList")
	if err := e.cl.List(ctx, list, client.InNamespace(ns)); err != nil {
		e.t.Fatal(err)
	}
	out := map[string]types.UID{}
	for _, s := range list.Items {
		out[s.GetName()] = s.GetUID()
	}
	return out
}

// orphans lists the Helm-managed objects whose controlling owner is not a
// stack that exists.
func (e *env) orphans(ctx context.Context) []string {
	stacks := map[types.UID]bool{}
	for _, uid := range e.stackUIDs(ctx) {
		stacks[uid] = true
	}
	var out []string
	for _, list := range []client.ObjectList{&appsv1.DeploymentList{}, &corev1.ServiceList{}, &corev1.ConfigMapList{}, &corev1.ServiceAccountList{}} {
		if err := e.cl.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/managed-by": "Helm"}); err != nil {
			e.t.Fatal(err)
		}
		items, err := apimeta.ExtractList(list)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, item := range items {
			o := item.(client.Object)
			owned := false
			for _, ref := range o.GetOwnerReferences() {
				if ref.Controller != nil && *ref.Controller && stacks[ref.UID] {
					owned = true
				}
			}
			if !owned {
				out = append(out, fmt.Sprintf("%T %s", o, o.GetName()))
			}
		}
	}
	return out
}

// deployedCount counts the stacks with Deployed=True, with one LIST.
func (e *env) deployedCount(ctx context.Context) (int, error) {
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("models.takeoff.co/v1alpha1")
	list.SetKind("InferenceStackList")
	if err := e.cl.List(ctx, list, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	n := 0
	for i := range list.Items {
		if s, _, _ := condition(&list.Items[i], "Deployed"); s == "True" {
			n++
		}
	}
	return n, nil
}

// checkBurstOutcome asserts what must hold after any crash, kill or
// failover: every stack of names Deployed, with a healthy release, no
// revision pending, no object without its stack, and no stack lost.
func (e *env) checkBurstOutcome(names []string, uids map[string]types.UID, timeout time.Duration) {
	e.t.Helper()
	e.eventually("every stack Deployed", timeout, func(ctx context.Context) (bool, string) {
		n, err := e.deployedCount(ctx)
		if err != nil {
			return false, err.Error()
		}
		return n >= len(names), fmt.Sprintf("%d of %d Deployed", n, len(names))
	})
	ctx := e.t.Context()
	for _, name := range names {
		if p := e.releaseProblems(ctx, name); p != "" {
			e.t.Errorf("stack %s: %s", name, p)
		}
	}
	if n := e.pendingReleases(ctx); n != 0 {
		e.t.Errorf("%d release revisions left pending", n)
	}
	if o := e.orphans(ctx); len(o) != 0 {
		e.t.Errorf("%d objects without their stack: %v", len(o), o)
	}
	now := e.stackUIDs(ctx)
	for _, name := range names {
		if now[name] != uids[name] {
			e.t.Errorf("stack %s was lost (UID %s, now %q)", name, uids[name], now[name])
		}
	}
}

// burst creates n stacks at once and returns their names and UIDs.
func (e *env) burst(prefix string, n int) ([]string, map[string]types.UID) {
	names := make([]string, n)
	uids := map[string]types.UID{}
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
		uids[names[i]] = e.apply(names[i], "v0", `{applications: {a: {}}}`).GetUID()
	}
	return names, uids
}

// countEventsOf counts the events of stack with reason.
func (e *env) countEventsOf(stack, reason string) int {
	n := 0
	for _, ev := range e.events(stack) {
		if ev.Reason == reason {
			n += max(int(ev.Count), 1)
		}
	}
	return n
}

// countEvents counts the stacks' events with reason.
func (e *env) countEvents(reason string) int {
	var list corev1.EventList
	if err := e.cl.List(e.t.Context(), &list, client.InNamespace(ns)); err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, ev := range list.Items {
		if ev.Reason == reason && ev.InvolvedObject.Kind == "InferenceStack" {
			n += max(int(ev.Count), 1)
		}
	}
	return n
}

// TestCrashRecovery kills the operator exactly between Helm's write of a
// pending revision and its final write, for an install and an upgrade,
// and stops it with SIGTERM in the middle of a burst.
func TestCrashRecovery(t *testing.T) {
	e := newEnv(t)
	proxy := startAPIProxy(t, e.cluster.RESTConfig())
	op := newOperatorProcess(t, "operator-v0", "v0", writeKubeconfig(t, proxy.url))
	killAt := func(stack, status string) chan struct{} {
		killed := make(chan struct{})
		proxy.arm(releaseWrite(stack, status), func() {
			op.Kill(syscall.SIGKILL)
			close(killed)
		})
		return killed
	}
	waitKilled := func(killed chan struct{}, what string) {
		select {
		case <-killed:
		case <-time.After(2 * time.Minute):
			t.Fatalf("the operator never wrote %s", what)
		}
	}
	latest := func(stack string) string {
		var secrets corev1.SecretList
		if err := e.cl.List(t.Context(), &secrets, client.InNamespace(ns), client.MatchingLabels{"owner": "helm", "name": stack}); err != nil {
			t.Fatal(err)
		}
		best, status := 0, ""
		for _, s := range secrets.Items {
			if v, _ := strconv.Atoi(s.Labels["version"]); v > best {
				best, status = v, s.Labels["status"]
			}
		}
		return fmt.Sprintf("%d:%s", best, status)
	}
	const stack = "interrupted"

	t.Run("killed after the pending-install write", func(t *testing.T) {
		e.t = t
		killed := killAt(stack, "pending-install")
		op.start()
		e.apply(stack, "v0", `{applications: {a: {readerConfig: {modelName: org/one}}}}`)
		waitKilled(killed, "a pending-install revision")
		if got := latest(stack); got != "1:pending-install" {
			t.Fatalf("after the kill the release is %s, want 1:pending-install", got)
		}
		op.start()
		e.waitDeployed(stack)
		e.waitCondition(stack, "Recovered", "True", "PendingReleaseMarkedFailed")
		if _, ok := hasEvent(e.events(stack), "RecoveredPendingRelease"); !ok {
			t.Error("no RecoveredPendingRelease event")
		}
		if p := e.releaseProblems(t.Context(), stack); p != "" {
			t.Error(p)
		}
	})

	t.Run("killed after the pending-upgrade write", func(t *testing.T) {
		e.t = t
		gatewayPods := e.podUIDs(stack + "-inference-stack-gateway")
		before := latest(stack)
		killed := killAt(stack, "pending-upgrade")
		e.update(stack, func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "org/two", "spec", "applications", "a", "readerConfig", "modelName")
		})
		waitKilled(killed, "a pending-upgrade revision")
		if got := latest(stack); !strings.HasSuffix(got, ":pending-upgrade") {
			t.Fatalf("after the kill the release is %s (was %s), want a pending-upgrade revision", got, before)
		}
		op.start()
		e.eventually("upgrade rolled forward", 90*time.Second, func(ctx context.Context) (bool, string) {
			cm := &corev1.ConfigMap{}
			if err := e.cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: stack + "-inference-stack-a"}, cm); err != nil {
				return false, err.Error()
			}
			p := e.releaseProblems(ctx, stack)
			return p == "" && strings.Contains(cm.Data["config.yaml"], "org/two"), "release: " + p
		})
		e.samePods(stack+"-inference-stack-gateway", gatewayPods)
	})

	t.Run("SIGTERM lets in-flight releases finish", func(t *testing.T) {
		e.t = t
		names, _ := e.burst("term", 40)
		e.eventually("the burst under way", 60*time.Second, func(ctx context.Context) (bool, string) {
			n, err := e.deployedCount(ctx)
			return err == nil && n >= 5, fmt.Sprintf("%d Deployed", n)
		})
		took := op.Kill(syscall.SIGTERM)
		t.Logf("operator exited %s after SIGTERM", took.Round(time.Millisecond))
		if n := e.pendingReleases(t.Context()); n != 0 {
			t.Errorf("SIGTERM left %d release revisions pending", n)
		}
		op.start()
		e.eventually("burst Deployed", 3*time.Minute, func(ctx context.Context) (bool, string) {
			n, err := e.deployedCount(ctx)
			return err == nil && n >= len(names)+1, fmt.Sprintf("%d Deployed", n)
		})
	})
}

// TestKillsDuringBurst SIGKILLs the operator ten times at random points of
// a 200-stack burst, restarting it each time.
func TestKillsDuringBurst(t *testing.T) {
	const stacks, kills = 200, 10
	e := newEnv(t)
	op := newOperatorProcess(t, "operator-v0", "v0", e.cluster.Kubeconfig())
	seed := uint64(time.Now().UnixNano())
	t.Logf("kill points seeded with %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	op.start()
	start := time.Now()
	names, uids := e.burst("burst", stacks)
	for i := range kills {
		// A kill point: somewhere between the cache sync of the restarted
		// operator and well into its work.
		<-time.After(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
		op.Kill(syscall.SIGKILL)
		n, _ := e.deployedCount(t.Context())
		t.Logf("kill %d at %s: %d of %d Deployed, %d revisions pending", i+1, time.Since(start).Round(time.Millisecond), n, stacks, e.pendingReleases(t.Context()))
		op.start()
	}
	e.checkBurstOutcome(names, uids, 5*time.Minute)
	now, lost := e.stackUIDs(t.Context()), 0
	for _, name := range names {
		if now[name] != uids[name] {
			lost++
		}
	}
	t.Logf("kills survived %d, recoveries %d, release revisions pending %d, stacks lost %d of %d, all Deployed %s after the first create",
		kills, e.countEvents("RecoveredPendingRelease"), e.pendingReleases(t.Context()), lost, stacks, time.Since(start).Round(time.Second))
}

// TestLeaderFailover runs two replicas with leader election and kills the
// leader in the middle of a burst: the other takes over and finishes it.
func TestLeaderFailover(t *testing.T) {
	e := newEnv(t)
	args := []string{"--leader-elect", "--leader-election-namespace=" + ns,
		"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms"}
	replicas := []*operatorProcess{
		newOperatorProcess(t, "replica-a", "v0", e.cluster.Kubeconfig(), args...),
		newOperatorProcess(t, "replica-b", "v0", e.cluster.Kubeconfig(), args...),
	}
	const acquired = "Successfully acquired lease"
	replicas[0].start()
	e.eventually("replica-a leads", 60*time.Second, func(context.Context) (bool, string) {
		return replicas[0].LogContains(acquired), "no lease yet"
	})
	replicas[1].start()
	names, uids := e.burst("failover", 100)
	e.eventually("the burst under way", 2*time.Minute, func(ctx context.Context) (bool, string) {
		n, err := e.deployedCount(ctx)
		return err == nil && n >= 10, fmt.Sprintf("%d Deployed", n)
	})
	replicas[0].Kill(syscall.SIGKILL)
	n, _ := e.deployedCount(t.Context())
	t.Logf("killed the leader with %d of %d Deployed, %d revisions pending", n, len(names), e.pendingReleases(t.Context()))
	e.eventually("replica-b leads", 60*time.Second, func(context.Context) (bool, string) {
		return replicas[1].LogContains(acquired), "no lease yet"
	})
	e.checkBurstOutcome(names, uids, 5*time.Minute)
}

// TestLeaderFence stalls the leader in the middle of a burst (SIGSTOP, as a
// long GC pause or CPU starvation would) until the other replica has taken
// over, then lets it run again. The stalled leader resumes inside its Helm
// operations, still believing it leads until its renew loop notices; the
// fence must keep every one of its writes from reaching the API server.
// (Blocking only its lease renewals would not show this: the leader then
// stops at its renew deadline, before the lease expires for the others.)
// Its requests pass through a proxy that records them.
func TestLeaderFence(t *testing.T) {
	e := newEnv(t)
	args := []string{"--leader-elect", "--leader-election-namespace=" + ns,
		"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms"}
	proxy := startAPIProxy(t, e.cluster.RESTConfig())
	a := newOperatorProcess(t, "replica-a", "v0", writeKubeconfig(t, proxy.url), args...)
	b := newOperatorProcess(t, "replica-b", "v0", e.cluster.Kubeconfig(), args...)
	const acquired = "Successfully acquired lease"
	a.start()
	e.eventually("replica-a leads", 60*time.Second, func(context.Context) (bool, string) {
		return a.LogContains(acquired), "no lease yet"
	})
	b.start()
	names, uids := e.burst("fence", 100)
	e.eventually("the burst under way", 2*time.Minute, func(ctx context.Context) (bool, string) {
		n, err := e.deployedCount(ctx)
		return err == nil && n >= 10, fmt.Sprintf("%d Deployed", n)
	})
	if err := a.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	n, _ := e.deployedCount(t.Context())
	t.Logf("stalled the leader with %d of %d Deployed", n, len(names))
	e.eventually("replica-b leads", 60*time.Second, func(context.Context) (bool, string) {
		return b.LogContains(acquired), "no lease yet"
	})
	lease := &coordinationv1.Lease{}
	if err := e.cl.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "inference-stack-operator-v0.models.takeoff.co"}, lease); err != nil {
		t.Fatal(err)
	}
	handover := lease.Spec.AcquireTime.Time
	if err := a.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	e.eventually("the stalled leader exits", 60*time.Second, func(context.Context) (bool, string) {
		return !a.Running(), "still running"
	})
	var late []string
	for _, w := range proxy.writesSince(handover) {
		// The elector's own requests (its events, a renewal the API server
		// refuses because the lease moved on) are not the fence's business.
		if !strings.HasSuffix(w.path, "/events") && !strings.Contains(w.path, "/leases/") {
			late = append(late, fmt.Sprintf("%s %s %s after the hand-over", w.method, w.path, w.at.Sub(handover).Round(time.Millisecond)))
		}
	}
	if len(late) > 0 {
		t.Errorf("the old leader wrote %d times after replica-b took over:\n%s", len(late), strings.Join(late, "\n"))
	}
	t.Logf("writes the fence refused in the old leader: %d", strings.Count(a.Tail(100000), "fenced: refusing"))
	e.checkBurstOutcome(names, uids, 5*time.Minute)
}

// TestHandoffAcrossMajors runs the v0 and v1 operators as separate
// processes and relabels stacks between them, with the losing operator
// running and with it stopped during the relabel; then deletes each stack.
// Workloads survive every relabel; no stack keeps a finalizer nobody
// removes.
func TestHandoffAcrossMajors(t *testing.T) {
	e := newEnv(t)
	// A stack no operator can reconcile, created before any operator runs.
	e.apply("unlabelled", "", `{applications: {a: {}}}`)
	ops := map[string]*operatorProcess{}
	for _, m := range []string{"v0", "v1"} {
		ops[m] = newOperatorProcess(t, "operator-"+m, m, e.cluster.Kubeconfig(),
			"--leader-elect", "--leader-election-namespace="+ns)
		ops[m].start()
	}
	e.waitCondition("unlabelled", "Managed", "False", "NoOperatorVersionLabel")

	type relabel struct{ from, to string }
	cases := []relabel{{"v0", "v1"}, {"v1", "v0"}, {"v0", ""}, {"v0", "v7"}}
	for _, stopped := range []bool{false, true} {
		mode := "running"
		if stopped {
			mode = "stopped"
		}
		t.Run("losing operator "+mode, func(t *testing.T) {
			e.t = t
			name := func(c relabel) string { return fmt.Sprintf("%s-%s-to-%s", mode, c.from, cmp(c.to, "none")) }
			pods := map[string]map[types.UID]bool{}
			for _, c := range cases {
				e.apply(name(c), c.from, `{applications: {a: {}}}`)
			}
			for _, c := range cases {
				e.waitDeployed(name(c))
				if got := e.getStack(name(c)).GetLabels()[controller.ReconciledByLabel]; got != c.from {
					t.Errorf("%s: claimed by %q, want %s", name(c), got, c.from)
				}
				pods[name(c)] = e.podUIDs(name(c) + "-inference-stack-a")
			}
			// Relabel, one losing major at a time when it is stopped.
			for _, loser := range []string{"v0", "v1"} {
				if stopped {
					ops[loser].Kill(syscall.SIGTERM)
				}
				for _, c := range cases {
					if c.from == loser {
						e.update(name(c), func(u *unstructured.Unstructured) {
							l := u.GetLabels()
							if c.to == "" {
								delete(l, "operatorVersion")
							} else {
								l["operatorVersion"] = c.to
							}
							u.SetLabels(l)
						})
					}
				}
				if stopped {
					ops[loser].start()
				}
			}
			for _, c := range cases {
				s := name(c)
				switch c.to {
				case "v0", "v1":
					e.eventually(s+" claimed by "+c.to, 90*time.Second, func(context.Context) (bool, string) {
						u := e.getStack(s)
						return u.GetLabels()[controller.ReconciledByLabel] == c.to && slices.Contains(u.GetFinalizers(), "uninstall-helm-release"),
							fmt.Sprintf("labels %v finalizers %v", u.GetLabels(), u.GetFinalizers())
					})
					e.waitDeployed(s)
					e.waitCondition(s, "Managed", "True", "Reconciling")
				default:
					reason := map[string]string{"": "NoOperatorVersionLabel", "v7": "NoOperatorClaimed"}[c.to]
					e.waitCondition(s, "Managed", "False", reason)
					e.waitCondition(s, "Deployed", "Unknown", "NotManaged")
					u := e.getStack(s)
					if len(u.GetFinalizers()) != 0 || u.GetLabels()[controller.ReconciledByLabel] != "" {
						t.Errorf("%s: finalizers %v labels %v", s, u.GetFinalizers(), u.GetLabels())
					}
				}
				e.samePods(s+"-inference-stack-a", pods[s])
			}
			for _, c := range cases {
				e.deleteAndWait(name(c))
			}
		})
	}

	t.Run("a stack re-created for the other major keeps its new owner's finalizer", func(t *testing.T) {
		e.t = t
		e.apply("reborn", "v0", `{applications: {a: {}}}`)
		e.waitDeployed("reborn")
		e.deleteAndWait("reborn")
		e.apply("reborn", "v1", `{applications: {a: {}}}`)
		e.waitDeployed("reborn")
		// A barrier: v0 has processed its queue past the deletion once a
		// stack created after it is deployed; v0 restarted re-lists.
		ops["v0"].Kill(syscall.SIGTERM)
		ops["v0"].start()
		e.apply("barrier", "v0", `{applications: {a: {}}}`)
		e.waitDeployed("barrier")
		u := e.getStack("reborn")
		if !slices.Contains(u.GetFinalizers(), "uninstall-helm-release") || u.GetLabels()[controller.ReconciledByLabel] != "v1" {
			t.Errorf("reborn: finalizers %v labels %v", u.GetFinalizers(), u.GetLabels())
		}
		e.deleteAndWait("reborn")
		e.deleteAndWait("barrier")
	})
}

func cmp(s, ifEmpty string) string {
	if s == "" {
		return ifEmpty
	}
	return s
}
