package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// rolloutWatch follows every Deployment of the namespace from a watch and
// keeps the largest number of stacks that had a Deployment rolling out (a
// generation after the one it had when the watch began, not yet fully
// updated and available) at the same moment.
type rolloutWatch struct {
	mu      sync.Mutex
	initial map[string]int64
	rolling map[string]map[string]bool // stack → its Deployments rolling
	rolled  map[string]bool            // Deployments past their initial generation and done
	most    int
	mostAt  []string
}

func watchRollouts(t *testing.T, e *env) *rolloutWatch {
	var list appsv1.DeploymentList
	if err := e.cl.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	w := &rolloutWatch{initial: map[string]int64{}, rolling: map[string]map[string]bool{}, rolled: map[string]bool{}}
	for _, d := range list.Items {
		w.initial[d.Name] = d.Generation
	}
	cs := kubernetes.NewForConfigOrDie(e.cluster.RESTConfig())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	watcher, err := cs.AppsV1().Deployments(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer watcher.Stop()
		for ev := range watcher.ResultChan() {
			if d, ok := ev.Object.(*appsv1.Deployment); ok {
				w.observe(d)
			}
		}
	}()
	return w
}

func (w *rolloutWatch) observe(d *appsv1.Deployment) {
	w.mu.Lock()
	defer w.mu.Unlock()
	owner := metav1.GetControllerOf(d)
	if owner == nil || d.Generation <= w.initial[d.Name] {
		return
	}
	want := *d.Spec.Replicas
	done := d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want &&
		d.Status.AvailableReplicas == want && d.Status.Replicas == want
	if w.rolling[owner.Name] == nil {
		w.rolling[owner.Name] = map[string]bool{}
	}
	if done {
		delete(w.rolling[owner.Name], d.Name)
		w.rolled[d.Name] = true
	} else {
		w.rolling[owner.Name][d.Name] = true
	}
	var now []string
	for stack, ds := range w.rolling {
		if len(ds) > 0 {
			now = append(now, stack)
		}
	}
	if len(now) > w.most {
		w.most, w.mostAt = len(now), now
	}
}

func (w *rolloutWatch) state() (most int, mostAt []string, rolled map[string]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rolled = map[string]bool{}
	for k := range w.rolled {
		rolled[k] = true
	}
	return w.most, w.mostAt, rolled
}

// TestUpgradeWaves replaces the operator with a build whose chart has a new
// appVersion and a new default reader setting, so the pods of every stack
// that does not pin them change although no user changed a stack: the stacks must roll in waves
// of at most a quarter of them, each wave only once the previous one has
// rolled out, and the stacks that pin their images must not move.
func TestUpgradeWaves(t *testing.T) {
	e := startEnv(t, operatorBuild{})
	const fleet = 24
	// Small readers: the fleet fits the CPU node, so every stack rolls out
	// and the waves, not the room, set the pace.
	const small = `{applications: {a: {resources: {requests: {cpu: 10m, memory: 64Mi}}}}}`
	var names []string
	for i := range fleet {
		names = append(names, fmt.Sprintf("wave-%02d", i))
		e.apply(names[i], "v0", small)
	}
	e.apply("pinned", "v0", `{gateway: {image: {tag: "0.22.0-cpu"}}, applicationTemplate: {image: {tag: "0.22.0-gpu"}},
		applications: {a: {readerConfig: {consumerGroup: primary}, resources: {requests: {cpu: 10m, memory: 64Mi}}}}}`)
	for _, n := range append(names, "pinned") {
		e.waitDeployed(n)
	}
	pinned := map[string]map[string]bool{}
	for _, d := range []string{"pinned-inference-stack-gateway", "pinned-inference-stack-a"} {
		uids := e.podUIDs(d)
		pinned[d] = map[string]bool{}
		for uid := range uids {
			pinned[d][string(uid)] = true
		}
	}
	for _, n := range names {
		e.podUIDs(n + "-inference-stack-a")
		e.podUIDs(n + "-inference-stack-gateway")
	}
	watch := watchRollouts(t, e)

	// The next operator release: its chart's appVersion (the default
	// images) and a default setting change.
	start := nextRelease(t, e, func(c *chart.Chart) {
		template := c.Values["applicationTemplate"].(map[string]any)
		template["readerConfig"].(map[string]any)["consumerGroup"] = "secondary"
	})
	const limit = (fleet + 1) / 4 // a quarter of the 25 stacks, rounded down
	waited := 0
	e.eventually("every unpinned stack rolled to the new default image", 5*time.Minute, func(ctx context.Context) (bool, string) {
		_, _, rolled := watch.state()
		var left []string
		for _, n := range names {
			for _, d := range []string{n + "-inference-stack-a", n + "-inference-stack-gateway"} {
				if !rolled[d] {
					left = append(left, d)
				}
			}
		}
		// A stack waiting for its turn says so.
		if waited == 0 {
			for _, n := range names {
				if s, r, _ := condition(e.getStack(n), "OperatorUpgrade"); s == "True" && r == "WaitingForWave" {
					waited++
				}
			}
		}
		return len(left) == 0, fmt.Sprintf("%d Deployments not rolled out: %s", len(left), strings.Join(left[:min(4, len(left))], ", "))
	})
	most, mostAt, _ := watch.state()
	t.Logf("%d stacks rolled in %s; at most %d rolling at once (%v); %d seen waiting for a wave", fleet, time.Since(start).Round(time.Second), most, mostAt, waited)
	if most > limit {
		t.Errorf("%d stacks were rolling at the same moment (%v), more than the wave of %d", most, mostAt, limit)
	}
	if waited == 0 {
		t.Errorf("no stack said it was waiting for its wave")
	}
	for _, n := range names {
		if s, r, m := condition(e.getStack(n), "OperatorUpgrade"); s != "False" || r != "TurnInWave" {
			t.Errorf("%s: OperatorUpgrade=%s (%s: %s), want False (TurnInWave)", n, s, r, m)
		}
	}
	for d, before := range pinned {
		for uid := range e.podUIDs(d) {
			if !before[string(uid)] {
				t.Errorf("%s: a pinned stack's pod was replaced (new pod %s)", d, uid)
			}
		}
	}
}

// TestWaveTurnsEnd: in a fleet of four (a wave of one), a stack whose
// Deployment its owner paused is not waited for, and one whose upgrade
// never rolls out (the new release's pods schedule nowhere: a failed
// canary) holds the waves only until its turn's deadline, its progress
// deadline plus a minute; then the other stacks roll, and the operator
// says so on the stack and in its metrics.
func TestWaveTurnsEnd(t *testing.T) {
	e := startEnv(t, operatorBuild{})
	const small = `resources: {requests: {cpu: 10m, memory: 64Mi}}`
	stacks := map[string]string{
		"paused": `{applications: {a: {` + small + `}}}`,
		"stuck":  `{applications: {a: {progressDeadlineSeconds: 5, ` + small + `}}}`,
		"next-1": `{applications: {a: {` + small + `}}}`,
		"next-2": `{applications: {a: {` + small + `}}}`,
	}
	for name, spec := range stacks {
		e.apply(name, "v0", spec)
	}
	for name := range stacks {
		e.waitDeployed(name)
		e.podUIDs(name + "-inference-stack-a")
		e.podUIDs(name + "-inference-stack-gateway")
	}
	// Its owner pauses one Deployment: it would never roll.
	paused := e.deployment("paused-inference-stack-a")
	if err := e.cl.Patch(t.Context(), paused, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":true}}`))); err != nil {
		t.Fatal(err)
	}
	pausedPods := e.podUIDs("paused-inference-stack-a")
	watch := watchRollouts(t, e)
	missedBefore := turnsMissed(t)

	start := nextRelease(t, e, func(c *chart.Chart) {
		// A release that breaks one stack's pods: they schedule nowhere.
		const at = "      {{- with $app.nodeSelector }}"
		for _, tpl := range c.Templates {
			if tpl.Name == "templates/application-deployment.yaml" {
				if !bytes.Contains(tpl.Data, []byte(at)) {
					t.Fatalf("the chart's application template has no %q", at)
				}
				tpl.Data = bytes.Replace(tpl.Data, []byte(at), []byte("      {{- if eq $.Release.Name \"stuck\" }}\n      nodeSelector: {nowhere: \"true\"}\n      {{- end }}\n"+at), 1)
			}
		}
	})
	want := []string{"next-1-inference-stack-a", "next-1-inference-stack-gateway", "next-2-inference-stack-a", "next-2-inference-stack-gateway",
		"paused-inference-stack-gateway", "stuck-inference-stack-gateway"}
	e.eventually("the other stacks rolled", 4*time.Minute, func(ctx context.Context) (bool, string) {
		_, _, rolled := watch.state()
		var left []string
		for _, d := range want {
			if !rolled[d] {
				left = append(left, d)
			}
		}
		return len(left) == 0, fmt.Sprintf("not rolled out: %v", left)
	})
	t.Logf("the other stacks rolled %s after the new operator started", time.Since(start).Round(time.Second))
	// Its deadline is 65 s after its upgrade, which may have come last.
	e.eventually("the stuck stack's turn said it missed its deadline", 2*time.Minute, func(ctx context.Context) (bool, string) {
		ev, ok := hasEvent(e.events("stuck"), "UpgradeTurnMissedDeadline")
		return ok && strings.Contains(ev.Message, "stuck-inference-stack-a") && !strings.Contains(ev.Message, "next-"), ev.Message
	})
	if missed := turnsMissed(t) - missedBefore; missed != 1 {
		t.Errorf("inference_stack_upgrade_turns_missed_deadline_total rose by %v, want 1", missed)
	}
	if d := e.deployment("paused-inference-stack-a"); !d.Spec.Paused {
		t.Errorf("the paused Deployment was resumed")
	}
	for uid := range pausedPods {
		pods := &corev1.PodList{}
		if err := e.cl.List(t.Context(), pods, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, p := range pods.Items {
			found = found || p.UID == uid
		}
		if !found {
			t.Errorf("the paused Deployment's pod %s was replaced", uid)
		}
	}
}

// nextRelease replaces e's operator with the next release of it: its
// chart's version and appVersion (the default images) new, and change
// applied to the chart. It returns when the new operator started.
func nextRelease(t *testing.T, e *env, change func(*chart.Chart)) time.Time {
	t.Helper()
	e.stopOperator()
	start := time.Now()
	e.stopOperator = startOperator(t, e.opCfg, e.log, operatorBuild{chart: func(c *chart.Chart) {
		c.Metadata.Version = "9.0.0"
		c.Metadata.AppVersion = "0.22.1"
		change(c)
	}})
	return start
}

// turnsMissed reads inference_stack_upgrade_turns_missed_deadline_total
// of the operators running in this process.
func turnsMissed(t *testing.T) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, f := range families {
		if f.GetName() == "inference_stack_upgrade_turns_missed_deadline_total" {
			for _, m := range f.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
