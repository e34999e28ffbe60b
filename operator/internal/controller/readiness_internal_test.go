package controller

import (
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

func TestParseRelease(t *testing.T) {
	manifest := renderManifest(t, "s", "team", `
applications:
  zeta:
    nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
    readerConfig: {modelName: m, device: cuda, tensorParallel: 2}
  alpha:
    readerConfig: {modelName: m, device: cpu}
    affinity:
      nodeAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
            - matchExpressions: [{key: nvidia.com/gpu.product, operator: In, values: [B, A]}]
gateway:
  ingress:
    enabled: true
    hosts: [{host: takeoff.example.com}, {host: plain.example.com, paths: [{path: /v1}]}]
    tls: [{secretName: t, hosts: [takeoff.example.com]}]
`)
	v, err := parseRelease(manifest, "team")
	if err != nil {
		t.Fatal(err)
	}
	var got []workload
	got = append(got, v.workloads...)
	want := []workload{
		{name: "s-inference-stack-gateway"},
		{name: "s-inference-stack-alpha", application: "alpha", gpuProduct: "A,B"},
		{name: "s-inference-stack-zeta", application: "zeta", gpus: 2, gpuProduct: "NVIDIA-H100-80GB-HBM3"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("workloads\n got %+v\nwant %+v", got, want)
	}
	if !strings.HasPrefix(v.endpoint, "http://s-inference-stack-gateway.team.svc:") {
		t.Errorf("endpoint = %q", v.endpoint)
	}
	if w := []string{"http://plain.example.com/v1", "https://takeoff.example.com/"}; !reflect.DeepEqual(v.ingressURLs, w) {
		t.Errorf("ingressURLs = %q, want %q", v.ingressURLs, w)
	}
}

func TestPodFindings(t *testing.T) {
	gpuPod := corev1.PodSpec{
		NodeSelector: map[string]string{gpuProductKey: "X"},
		Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{gpuResource: resource.MustParse("1")}}}},
	}
	unschedulable := func(name, msg string, spec corev1.PodSpec) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec, Status: corev1.PodStatus{
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Reason: corev1.PodReasonUnschedulable, Message: msg}}}}
	}
	waiting := func(name, reason string, restarts int32) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{
			ContainerStatuses: []corev1.ContainerStatus{{Name: "c", RestartCount: restarts,
				State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "because"}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error"}},
			}}}}
	}
	for _, c := range []struct {
		name string
		pods []corev1.Pod
		want []string // reasons, in order
	}{
		{"too few GPUs", []corev1.Pod{unschedulable("p", "0/4 nodes are available: 1 Insufficient nvidia.com/gpu.", corev1.PodSpec{})}, []string{reasonInsufficientGPU}},
		{"no node with the product", []corev1.Pod{unschedulable("p", "0/4 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.", gpuPod)}, []string{reasonInsufficientGPU}},
		{"no node for a CPU pod", []corev1.Pod{unschedulable("p", "0/4 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.", corev1.PodSpec{})}, []string{reasonUnschedulable}},
		{"most telling first", []corev1.Pod{waiting("a", "CrashLoopBackOff", 4), waiting("b", "ErrImagePull", 0), waiting("c", "CreateContainerConfigError", 0),
			unschedulable("d", "0/1 nodes are available: 1 Insufficient cpu.", corev1.PodSpec{})},
			[]string{reasonUnschedulable, reasonImagePullBackOff, reasonCrashLoopBackOff, "CreateContainerConfigError"}},
		{"creating is no finding", []corev1.Pod{waiting("a", "ContainerCreating", 0)}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := podFindings(c.pods)
			var reasons []string
			for _, f := range got {
				reasons = append(reasons, f.reason)
			}
			if !reflect.DeepEqual(reasons, c.want) {
				t.Errorf("reasons %v, want %v (%+v)", reasons, c.want, got)
			}
			for _, f := range got {
				if f.reason == reasonCrashLoopBackOff && !strings.Contains(f.message, "last exit code 3, Error)") {
					t.Errorf("crash loop message: %s", f.message)
				}
			}
		})
	}
}

func TestAssess(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	manifest := renderManifest(t, "s", "team", `{applications: {a: {readerConfig: {modelName: m, device: cuda}}}}`)
	view, err := parseRelease(manifest, "team")
	if err != nil {
		t.Fatal(err)
	}
	stack := func(generation, observed int64, conds ...condition) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "models.takeoff.co/v1alpha1", "kind": "InferenceStack",
			"metadata": map[string]any{"generation": generation},
			"status":   map[string]any{"observedGeneration": observed}}}
		setConditions(u, now, conds...)
		return u
	}
	deployment := func(name string, desired, available, updated int32, progressed time.Time, conds ...appsv1.DeploymentCondition) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 2, CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
			Spec: appsv1.DeploymentSpec{Replicas: &desired},
			Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: max(updated, available), UpdatedReplicas: updated,
				ReadyReplicas: available, AvailableReplicas: available}}
		avail := corev1.ConditionFalse
		if available >= desired {
			avail = corev1.ConditionTrue
		}
		d.Status.Conditions = append([]appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: avail},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "ReplicaSetUpdated", LastUpdateTime: metav1.NewTime(progressed)},
		}, conds...)
		return d
	}
	gw, app := view.workloads[0].name, view.workloads[1].name
	healthy := func() map[string]*appsv1.Deployment {
		return map[string]*appsv1.Deployment{gw: deployment(gw, 1, 1, 1, now.Add(-time.Hour)), app: deployment(app, 1, 1, 1, now.Add(-time.Hour))}
	}
	noPods := func(t *testing.T) func(*appsv1.Deployment) []podFinding {
		return func(d *appsv1.Deployment) []podFinding {
			t.Errorf("pods of %s read", d.Name)
			return nil
		}
	}

	t.Run("all available", func(t *testing.T) {
		s := assess(stack(2, 2), view, healthy(), now, noPods(t))
		if s.ready.Status != "True" || s.ready.Reason != reasonAvailable || s.available != "2/2" || s.endpoint == "" {
			t.Errorf("%+v", s)
		}
		if len(s.applications) != 1 || s.applications[0].(map[string]any)["gpusPerReplica"] != int64(1) {
			t.Errorf("applications %v", s.applications)
		}
	})
	t.Run("a new generation not yet applied", func(t *testing.T) {
		s := assess(stack(3, 2), view, healthy(), now, noPods(t))
		if s.ready.Status != "False" || s.ready.Reason != reasonProgressing || !strings.Contains(s.ready.Message, "generation 3") {
			t.Errorf("%+v", s.ready)
		}
	})
	t.Run("a failing release is the news", func(t *testing.T) {
		s := assess(stack(3, 2, condition{Type: conditionRetrying, Status: "True", Reason: reasonFailed, Message: "attempt 2 failed"}), view, healthy(), now, noPods(t))
		if s.ready.Reason != reasonReleaseFailed || !strings.Contains(s.ready.Message, "attempt 2 failed (2/2 replicas of the previous release available)") {
			t.Errorf("%+v", s.ready)
		}
	})
	t.Run("no release yet", func(t *testing.T) {
		s := assess(stack(1, 0), nil, nil, now, noPods(t))
		if s.ready.Reason != reasonInstalling || s.available != "" {
			t.Errorf("%+v", s)
		}
	})
	t.Run("a young rollout reads no pods and says when to look", func(t *testing.T) {
		ds := healthy()
		ds[app] = deployment(app, 1, 0, 1, now.Add(-4*time.Second))
		s := assess(stack(2, 2), view, ds, now, noPods(t))
		if s.ready.Reason != reasonProgressing || s.recheck != podReadDelay-4*time.Second || s.available != "1/2" {
			t.Errorf("%+v", s)
		}
	})
	t.Run("an old one names what holds it", func(t *testing.T) {
		ds := healthy()
		ds[app] = deployment(app, 1, 0, 1, now.Add(-time.Minute))
		read := 0
		s := assess(stack(2, 2), view, ds, now, func(*appsv1.Deployment) []podFinding {
			read++
			return []podFinding{{reason: reasonInsufficientGPU, message: "pod p cannot be scheduled: 0/4 nodes"}}
		})
		if read != 1 || s.ready.Reason != reasonInsufficientGPU || !strings.Contains(s.ready.Message, "0/1 available") {
			t.Errorf("%d reads, %+v", read, s.ready)
		}
	})
	t.Run("an old one with no pod of its spec yet reads none", func(t *testing.T) {
		ds := healthy()
		ds[app] = deployment(app, 1, 0, 0, now.Add(-time.Minute)) // the ReplicaSet has created no pod
		ds[gw] = deployment(gw, 1, 1, 1, now.Add(-time.Minute))
		ds[gw].Generation = 3 // the Deployment controller has not seen this spec
		s := assess(stack(2, 2), view, ds, now, noPods(t))
		if s.ready.Reason != reasonProgressing || s.recheck != 0 || !strings.Contains(s.ready.Message, "0/1 available, 0/1 updated") {
			t.Errorf("%+v", s)
		}
	})
	t.Run("a stalled rollout", func(t *testing.T) {
		ds := healthy()
		ds[app] = deployment(app, 2, 1, 1, now.Add(-time.Minute), appsv1.DeploymentCondition{})
		ds[app].Status.Conditions[1] = appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}
		s := assess(stack(2, 2), view, ds, now, func(*appsv1.Deployment) []podFinding {
			return []podFinding{{reason: reasonInsufficientGPU, message: "Insufficient nvidia.com/gpu"}}
		})
		if s.ready.Reason != reasonRolloutStalled || !strings.Contains(s.ready.Message, "Insufficient nvidia.com/gpu") {
			t.Errorf("%+v", s.ready)
		}
	})
	t.Run("old replicas left are not ready", func(t *testing.T) {
		ds := healthy()
		ds[app].Status.Replicas = 2
		if s := assess(stack(2, 2), view, ds, now, func(*appsv1.Deployment) []podFinding { return nil }); s.ready.Status != "False" {
			t.Errorf("%+v", s.ready)
		}
	})
	t.Run("a missing Deployment", func(t *testing.T) {
		ds := healthy()
		ds[gw] = nil
		s := assess(stack(2, 2), view, ds, now, noPods(t))
		if s.ready.Reason != reasonProgressing || !strings.Contains(s.ready.Message, "does not exist") || s.available != "1/1" {
			t.Errorf("%+v", s)
		}
	})
	t.Run("what it says is what it wrote", func(t *testing.T) {
		s := assess(stack(2, 2), view, healthy(), now, noPods(t))
		u := stack(2, 2)
		if s.same(u) {
			t.Fatal("an empty status says the same")
		}
		s.apply(u, now)
		if !s.same(u) {
			t.Errorf("after apply, not the same: %v", u.Object["status"])
		}
		// Through JSON, as the cache gives it back.
		b, _ := u.MarshalJSON()
		back := &unstructured.Unstructured{}
		if err := back.UnmarshalJSON(b); err != nil {
			t.Fatal(err)
		}
		if !s.same(back) {
			t.Errorf("after a JSON round trip, not the same: %v", back.Object["status"])
		}
	})
}

func TestKeepReadiness(t *testing.T) {
	now := time.Now()
	from := func() *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
			"endpoint": "http://x", "available": "1/1", "observedGeneration": int64(4),
			"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "Available"},
				map[string]any{"type": "Deployed", "status": "True"}},
		}}}
	}
	// What the library writes: its conditions and release, and the Ready
	// condition and readiness fields as they were when its reconcile
	// started.
	library := func() *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
			"conditions": []any{map[string]any{"type": "Deployed", "status": "False"},
				map[string]any{"type": "Ready", "status": "False", "reason": "Progressing"}},
			"deployedRelease": map[string]any{"name": "x"},
			"available":       "0/1",
		}}}
	}
	to := library()
	keepReadiness(to, from(), now)
	st := to.Object["status"].(map[string]any)
	if st["endpoint"] != "http://x" || st["available"] != "1/1" || st["observedGeneration"] != int64(4) {
		t.Errorf("fields not the stack's: %v", st)
	}
	if c, ok := conditionOf(to, "Ready"); !ok || c.Status != "True" {
		t.Errorf("Ready not the stack's: %v", st["conditions"])
	}
	if c, _ := conditionOf(to, "Deployed"); c.Status != "False" {
		t.Errorf("the library's Deployed was overwritten: %v", st["conditions"])
	}

	// A write that records a new generation: Ready is False until the
	// readiness controller has seen it.
	to = library()
	_ = unstructured.SetNestedField(to.Object, int64(5), "status", "observedGeneration")
	keepReadiness(to, from(), now)
	if got, _, _ := unstructured.NestedInt64(to.Object, "status", "observedGeneration"); got != 5 {
		t.Errorf("observedGeneration = %d, want the write's 5", got)
	}
	if c, _ := conditionOf(to, "Ready"); c.Status != "False" || c.Reason != reasonProgressing {
		t.Errorf("Ready after a new generation was applied: %+v", c)
	}

	// A write of an older generation than the stack's status says was
	// observed leaves observedGeneration and Ready as they are.
	to = library()
	_ = unstructured.SetNestedField(to.Object, int64(3), "status", "observedGeneration")
	keepReadiness(to, from(), now)
	if got, _, _ := unstructured.NestedInt64(to.Object, "status", "observedGeneration"); got != 4 {
		t.Errorf("observedGeneration = %d, want the stack's 4: it went back", got)
	}
	if c, _ := conditionOf(to, "Ready"); c.Status != "True" {
		t.Errorf("Ready after an older generation was written: %+v", c)
	}
}

// TestWriteDelay: in a burst of new stacks the readiness writes once per
// stack: nothing while the first release is being installed (the install's
// own write says Ready False), message-only changes held back while the
// rollout may still finish, changes of status or reason at once.
func TestWriteDelay(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	withReady := func(status, reason, msg string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
			"conditions": []any{map[string]any{"type": "Ready", "status": status, "reason": reason, "message": msg}}}}}
	}
	want := func(status, reason, msg string) readinessStatus {
		return readinessStatus{ready: condition{Type: conditionReady, Status: status, Reason: reason, Message: msg}}
	}

	m := &readinessMemo{}
	queued := &unstructured.Unstructured{Object: map[string]any{}}
	installing := want("False", reasonInstalling, "the release is being installed")
	for _, after := range []time.Duration{0, installingReport, 10 * time.Minute} {
		if d := m.writeDelay(queued, installing, false, t0.Add(after)); d != installingReport {
			t.Errorf("a new stack not claimed yet, %s after it was seen: wait %s, want %s and no write", after, d, installingReport)
		}
	}
	claimed := queued.DeepCopy()
	controllerutil.AddFinalizer(claimed, uninstallFinalizer)
	claimedAt := t0.Add(10 * time.Minute)
	if d := m.writeDelay(claimed, installing, false, claimedAt); d != installingReport {
		t.Errorf("a new stack being installed: wait %s, want %s from its claim", d, installingReport)
	}
	if d := m.writeDelay(claimed, installing, false, claimedAt.Add(installingReport)); d > 0 {
		t.Errorf("still installing %s after its claim: wait %s, want a write now", installingReport, d)
	}

	m = &readinessMemo{}
	applied := withReady("False", reasonProgressing, "generation 1 of the spec was applied; its Deployments are rolling out")
	rolling := want("False", reasonProgressing, "Deployment a: 0/1 available, 1/1 updated")
	if d := m.writeDelay(applied, rolling, false, t0); d != messageSettle {
		t.Errorf("only the message differs: wait %s, want %s", d, messageSettle)
	}
	if d := m.writeDelay(applied, rolling, false, t0.Add(4*time.Second)); d != messageSettle-4*time.Second {
		t.Errorf("only the message differs, 4s later: wait %s, want %s (from when it was first seen)", d, messageSettle-4*time.Second)
	}
	if d := m.writeDelay(applied, want("True", reasonAvailable, "all 2 Deployments are available"), false, t0.Add(5*time.Second)); d > 0 {
		t.Errorf("Ready: wait %s, want a write now", d)
	}
	if d := m.writeDelay(applied, want("False", reasonInsufficientGPU, "0/4 nodes are available"), false, t0.Add(6*time.Second)); d > 0 {
		t.Errorf("a new reason: wait %s, want a write now", d)
	}
	if d := m.writeDelay(applied, rolling, true, t0); d != 0 {
		t.Errorf("nothing to write: wait %s", d)
	}

	// Right after a write of its own, a reason change waits settle.
	m = &readinessMemo{lastWrite: t0}
	if d := m.writeDelay(withReady("False", reasonProgressing, "x"), want("False", reasonCrashLoopBackOff, "y"), false, t0.Add(time.Second)); d != settle-time.Second {
		t.Errorf("a reason change 1s after a write: wait %s, want %s", d, settle-time.Second)
	}
}

// installed is a stack whose install's own status write, at t, says its
// generation 1 is rolling out; generation is its metadata's.
func installed(generation int64, t time.Time) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"generation": generation},
		"status": map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "False", "reason": reasonProgressing,
			"message": appliedMessage(1), "lastTransitionTime": t.UTC().Format(time.RFC3339)}}}}}
}

// rollingOut is what the readiness controller finds of a stack whose
// Deployment a has available of its replicas available.
func rollingOut(available string) readinessStatus {
	return readinessStatus{available: available, endpoint: "http://gw.ns.svc:80",
		ready: condition{Type: conditionReady, Status: "False", Reason: reasonProgressing, Message: "Deployment a: " + available + " available"}}
}

// TestQuietFor: a stack just installed says "rolling out" until a replica
// is available, something else happens or quietRollout has passed; once
// reported, every change is news.
func TestQuietFor(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	applied := installed(1, t0)
	reported := applied.DeepCopy()
	_ = unstructured.SetNestedField(reported.Object, "0/2", "status", "available")
	otherFalse := applied.DeepCopy()
	_ = unstructured.SetNestedSlice(otherFalse.Object, []any{map[string]any{"type": "Ready", "status": "False", "reason": reasonReleaseFailed,
		"message": "x", "lastTransitionTime": t0.Format(time.RFC3339)}}, "status", "conditions")
	noTime := applied.DeepCopy()
	_ = unstructured.SetNestedSlice(noTime.Object, []any{map[string]any{"type": "Ready", "status": "False", "reason": reasonProgressing,
		"message": appliedMessage(1)}}, "status", "conditions")
	for _, tc := range []struct {
		what  string
		stack *unstructured.Unstructured
		want  readinessStatus
		after time.Duration
		quiet time.Duration
	}{
		{"nothing available yet", applied, rollingOut("0/2"), 5 * time.Second, quietRollout - 5*time.Second},
		{"nothing available for quietRollout", applied, rollingOut("0/2"), quietRollout, 0},
		{"a replica available", applied, rollingOut("1/2"), 0, 0},
		{"reported before", reported, rollingOut("0/2"), 0, 0},
		{"a newer generation than the write names", installed(2, t0), rollingOut("0/2"), 0, 0},
		{"Ready", applied, readinessStatus{available: "0/0", ready: condition{Type: conditionReady, Status: "True", Reason: reasonAvailable}}, 0, 0},
		{"a problem", applied, readinessStatus{available: "0/2", ready: condition{Type: conditionReady, Status: "False", Reason: reasonImagePullBackOff}}, 0, 0},
		{"the stack says another reason", otherFalse, readinessStatus{available: "0/2", ready: condition{Type: conditionReady, Status: "False", Reason: reasonReleaseFailed, Message: "y"}}, 0, 0},
		{"no transition time", noTime, rollingOut("0/2"), 0, 0},
		{"no Ready condition", &unstructured.Unstructured{Object: map[string]any{}}, rollingOut("0/2"), 0, 0},
	} {
		if got := tc.want.quietFor(tc.stack, t0.Add(tc.after)); got != tc.quiet {
			t.Errorf("%s: quiet for %s, want %s", tc.what, got, tc.quiet)
		}
	}
}

// TestNextLooks follows one stack just installed through the readiness
// controller's looks: nothing written while it has nothing to say, and the
// first news (a replica available, counts only) held back messageSettle
// from when it was first seen, not from an earlier quiet look.
func TestNextLooks(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	stack := installed(1, t0)
	m := &readinessMemo{}
	if write, _, recheck := m.next(stack, rollingOut("0/2"), t0.Add(2*time.Second)); write || recheck <= 0 || recheck > quietRollout {
		t.Errorf("nothing available 2s after the install: write %v, look again in %s; want no write and a look within %s", write, recheck, quietRollout)
	}
	if write, _, _ := m.next(stack, rollingOut("0/2"), t0.Add(6*time.Second)); write {
		t.Errorf("nothing available 6s after the install: a write")
	}
	news := t0.Add(9 * time.Second)
	if write, wait, _ := m.next(stack, rollingOut("1/2"), news); !write || wait != messageSettle {
		t.Errorf("a replica available: write %v after %s, want a write after %s", write, wait, messageSettle)
	}
	if write, wait, _ := m.next(stack, rollingOut("1/2"), news.Add(messageSettle)); !write || wait > 0 {
		t.Errorf("a replica available, %s later: write %v after %s, want a write now", messageSettle, write, wait)
	}

	// Still nothing available when the quiet ends: the counts are written
	// messageSettle later.
	m = &readinessMemo{}
	_, _, recheck := m.next(stack, rollingOut("0/2"), t0.Add(50*time.Second))
	if recheck != quietRollout-50*time.Second {
		t.Errorf("50s after the install: look again in %s, want when the quiet ends (%s)", recheck, quietRollout-50*time.Second)
	}
	if write, wait, _ := m.next(stack, rollingOut("0/2"), t0.Add(quietRollout)); !write || wait != messageSettle {
		t.Errorf("nothing available after %s: write %v after %s, want a write after %s", quietRollout, write, wait, messageSettle)
	}
	if write, _, _ := m.next(stack, rollingOut("0/2"), t0.Add(quietRollout+messageSettle)); !write {
		t.Errorf("nothing available after %s: no write", quietRollout+messageSettle)
	}
}

// A Deployment the cache holds at an older generation than the operator's
// write gave it is judged at the written one: not ready until its
// controller has observed it, however available the old one was.
func TestWrittenGenerations(t *testing.T) {
	w := newWrittenGenerations()
	rolledOut := func(uid types.UID, generation int64) *appsv1.Deployment {
		one := int32(1)
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "d", UID: uid, Generation: generation},
			Spec:       appsv1.DeploymentSpec{Replicas: &one},
			Status: appsv1.DeploymentStatus{ObservedGeneration: generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
				Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue}}},
		}
	}
	key := types.NamespacedName{Namespace: "ns", Name: "d"}
	if !deploymentReady(rolledOut("a", 2), 1) {
		t.Fatal("a rolled-out Deployment is not ready: the case is not the one under test")
	}
	w.note(key, "a", 3)
	w.note(key, "a", 2) // an older answer read later changes nothing
	if got := w.atLeast(rolledOut("a", 2)); got.Generation != 3 || deploymentReady(got, 1) {
		t.Errorf("the cache's generation 2 after a write of 3: judged at %d, ready %v", got.Generation, deploymentReady(got, 1))
	}
	if got := w.atLeast(rolledOut("a", 3)); got.Generation != 3 || !deploymentReady(got, 1) {
		t.Errorf("caught up: judged at %d, ready %v", got.Generation, deploymentReady(got, 1))
	}
	if got := w.atLeast(rolledOut("a", 2)); got.Generation != 2 {
		t.Errorf("what the cache caught up with is not forgotten: judged at %d", got.Generation)
	}
	w.note(key, "a", 5)
	if got := w.atLeast(rolledOut("b", 1)); got.Generation != 1 {
		t.Errorf("a Deployment created again is judged at its predecessor's generation %d", got.Generation)
	}
	w.note(key, "a", 5)
	w.forget(key)
	if got := w.atLeast(rolledOut("a", 2)); got.Generation != 2 {
		t.Errorf("a forgotten Deployment is judged at %d", got.Generation)
	}
}
