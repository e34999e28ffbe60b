package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/titanml/inference-stack-operator/e2e/harness/samples"
)

// waitReady waits for the stack's Ready condition to say status with
// reason, for the stack's current generation.
func (e *env) waitReady(name, status, reason string, timeout time.Duration) *unstructured.Unstructured {
	e.t.Helper()
	var u *unstructured.Unstructured
	e.eventually(fmt.Sprintf("%s Ready=%s/%s", name, status, reason), timeout, func(ctx context.Context) (bool, string) {
		u = e.getStack(name)
		s, r, m := condition(u, "Ready")
		observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		return s == status && r == reason && (status != "True" || observed == u.GetGeneration()),
			fmt.Sprintf("Ready=%s %s %q (generation %d, observed %d)", s, r, m, u.GetGeneration(), observed)
	})
	return u
}

// podsOf returns the live pods of a Deployment by UID.
func (e *env) podsOf(ctx context.Context, deployment string) (map[types.UID]corev1.Pod, error) {
	d := &appsv1.Deployment{}
	if err := e.cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: deployment}, d); err != nil {
		return nil, err
	}
	var pods corev1.PodList
	if err := e.cl.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
		return nil, err
	}
	out := map[types.UID]corev1.Pod{}
	for _, p := range pods.Items {
		out[p.UID] = p
	}
	return out, nil
}

var attemptRE = regexp.MustCompile(`attempt (\d+) at generation`)

func TestReadiness(t *testing.T) {
	e := startEnv(t, operatorBuild{})
	const stack, reader, gateway = "serving", "serving-inference-stack-hello-world", "serving-inference-stack-gateway"
	ctx := t.Context()

	// A spec the API server rejects (a request above its limit), left
	// failing while the other cases run: its attempts are counted at the
	// end against the time it had.
	const broken = "rejected"
	e.apply(broken, "v0", `{applications: {a: {resources: {limits: {cpu: "1"}, requests: {cpu: "2"}}}}}`)
	brokenSince := time.Now()
	e.waitReady(broken, "False", "ReleaseFailed", 90*time.Second)
	brokenGateway := e.deployment(broken + "-inference-stack-gateway")
	brokenPods, err := e.podsOf(ctx, broken+"-inference-stack-gateway")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("a stack says it serves, where, and on which GPU", func(t *testing.T) {
		e.t = t
		e.apply(stack, "v0", samples.ExampleSpec)
		u := e.waitReady(stack, "True", "Available", 2*time.Minute)
		status := u.Object["status"].(map[string]any)
		svc := &corev1.Service{}
		if err := e.cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: gateway}, svc); err != nil {
			t.Fatal(err)
		}
		var port int32
		for _, p := range svc.Spec.Ports {
			if p.Name == "http" {
				port = p.Port
			}
		}
		if want := fmt.Sprintf("http://%s.%s.svc:%d", gateway, ns, port); status["endpoint"] != want {
			t.Errorf("endpoint = %v, want %s", status["endpoint"], want)
		}
		if status["available"] != "2/2" {
			t.Errorf("available = %v, want 2/2", status["available"])
		}
		apps, _ := status["applications"].([]any)
		if len(apps) != 1 {
			t.Fatalf("applications = %v", apps)
		}
		app := apps[0].(map[string]any)
		for k, want := range map[string]any{"name": "hello-world", "desiredReplicas": int64(1), "readyReplicas": int64(1),
			"updatedReplicas": int64(1), "availableReplicas": int64(1), "gpusPerReplica": int64(1), "gpuProduct": "NVIDIA-GeForce-RTX-3060"} {
			if app[k] != want {
				t.Errorf("applications[0].%s = %v (%T), want %v", k, app[k], app[k], want)
			}
		}

		// What `kubectl get` shows: the printer columns, as a Table.
		table := e.table(ctx)
		row := table[stack]
		for col, want := range map[string]string{"Ready": "True", "Available": "2/2", "Reason": "Available",
			"Endpoint": fmt.Sprintf("http://%s.%s.svc:%d", gateway, ns, port)} {
			if row[col] != want {
				t.Errorf("kubectl get column %s = %q, want %q (row %v)", col, row[col], want, row)
			}
		}
		// kubectl wait works on the condition.
		out, err := exec.CommandContext(ctx, e.cluster.Binaries().Kubectl, "--kubeconfig", e.cluster.Kubeconfig(), "-n", ns,
			"wait", "--for=condition=Ready", "--timeout=30s", "inferencestack/"+stack).CombinedOutput()
		if err != nil {
			t.Errorf("kubectl wait: %v: %s", err, out)
		}
	})

	t.Run("a readerConfig change on a full 1-GPU node completes and the old pod is gone", func(t *testing.T) {
		e.t = t
		before, err := e.podsOf(ctx, reader)
		if err != nil {
			t.Fatal(err)
		}
		if len(before) != 1 {
			t.Fatalf("reader pods before the change: %d", len(before))
		}
		e.update(stack, func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "unsloth/Llama-3.2-3B-Instruct", "spec", "applications", "hello-world", "readerConfig", "modelName")
		})
		// Ready turns False at once: kubectl wait after an edit waits for
		// the edit.
		e.eventually("Ready=False after the edit", 30*time.Second, func(ctx context.Context) (bool, string) {
			s, r, m := condition(e.getStack(stack), "Ready")
			return s == "False" || e.getStackObserved(stack), fmt.Sprintf("Ready=%s %s %s", s, r, m)
		})
		e.waitReady(stack, "True", "Available", 2*time.Minute)
		after, err := e.podsOf(ctx, reader)
		if err != nil {
			t.Fatal(err)
		}
		for uid, p := range after {
			if _, old := before[uid]; old {
				t.Errorf("the old reader pod %s is still there", p.Name)
			}
			if p.Spec.NodeName != "gpu-rtx3060" || p.Status.Phase != corev1.PodRunning {
				t.Errorf("new reader pod %s on %q, %s", p.Name, p.Spec.NodeName, p.Status.Phase)
			}
		}
		if len(after) != 1 {
			t.Errorf("reader pods after the rollout: %d, want 1", len(after))
		}
	})

	t.Run("a GPU no node has says InsufficientGPU with the scheduler's message", func(t *testing.T) {
		e.t = t
		e.apply("no-gpu", "v0", `
applications:
  big:
    nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}
    readerConfig: {modelName: m, device: cuda}
`)
		u := e.waitReady("no-gpu", "False", "InsufficientGPU", 2*time.Minute)
		_, _, msg := condition(u, "Ready")
		if !strings.Contains(msg, "nodes are available") || !strings.Contains(msg, "no-gpu-inference-stack-big") {
			t.Errorf("Ready message does not carry the scheduler's message: %s", msg)
		}
		if got, _, _ := unstructured.NestedString(u.Object, "status", "available"); got != "1/2" {
			t.Errorf("available = %q, want 1/2", got)
		}
		t.Logf("Ready=False InsufficientGPU: %s", msg)
		e.deleteAndWait("no-gpu")
	})

	t.Run("a rollout that cannot progress says RolloutStalled", func(t *testing.T) {
		e.t = t
		e.update(stack, func(u *unstructured.Unstructured) {
			// Two GPUs per reader on a node with one; the deadline is short
			// so the Deployment controller gives up quickly.
			_ = unstructured.SetNestedField(u.Object, int64(2), "spec", "applications", "hello-world", "readerConfig", "tensorParallel")
			_ = unstructured.SetNestedField(u.Object, int64(10), "spec", "applications", "hello-world", "progressDeadlineSeconds")
		})
		e.waitReady(stack, "False", "RolloutStalled", 2*time.Minute)
		// The pods are read again once the Deployment has stalled: the
		// message says what holds it.
		var u *unstructured.Unstructured
		e.eventually("RolloutStalled naming the missing GPU", time.Minute, func(ctx context.Context) (bool, string) {
			u = e.getStack(stack)
			s, r, msg := condition(u, "Ready")
			return r == "RolloutStalled" && strings.Contains(msg, "Insufficient nvidia.com/gpu"), fmt.Sprintf("Ready=%s %s %s", s, r, msg)
		})
		_, _, msg := condition(u, "Ready")
		t.Logf("a reader asking for more GPUs than its node has: %s", msg)
		if got, _, _ := unstructured.NestedString(u.Object, "status", "available"); got != "1/2" {
			t.Errorf("available = %q, want 1/2", got)
		}
	})
	t.Run("a rejected spec backs off, keeps what it created and becomes Ready once fixed", func(t *testing.T) {
		e.t = t
		// 5 s doubling: attempts at 0, 5, 15, 35, 75 and 155 s, so the
		// sixth comes after at least 155 s (less what the first took).
		attempts := func(u *unstructured.Unstructured) (int, string) {
			_, _, msg := condition(u, "Retrying")
			m := attemptRE.FindStringSubmatch(msg)
			if m == nil {
				return 0, msg
			}
			n, _ := strconv.Atoi(m[1])
			return n, msg
		}
		var u *unstructured.Unstructured
		e.eventually("the sixth attempt", 4*time.Minute, func(ctx context.Context) (bool, string) {
			u = e.getStack(broken)
			n, msg := attempts(u)
			return n >= 6, msg
		})
		elapsed := time.Since(brokenSince)
		n, msg := attempts(u)
		t.Logf("%d attempts in %s: %s", n, elapsed.Round(time.Second), msg)
		if n != 6 || elapsed < 150*time.Second {
			t.Errorf("%d attempts in %s, want the sixth after 150 s", n, elapsed.Round(time.Second))
		}
		_, _, ready := condition(u, "Ready")
		if !strings.Contains(ready, "must be less than or equal to cpu limit") || !strings.Contains(ready, "next attempt at") {
			t.Errorf("Ready message does not say the API server's reason and the next attempt: %s", ready)
		}
		// Nothing the failed install created was deleted: no uninstall, no
		// pod created and deleted.
		if d := e.deployment(broken + "-inference-stack-gateway"); d.UID != brokenGateway.UID {
			t.Errorf("the gateway Deployment was replaced (uid %s -> %s)", brokenGateway.UID, d.UID)
		}
		pods, err := e.podsOf(ctx, broken+"-inference-stack-gateway")
		if err != nil {
			t.Fatal(err)
		}
		if len(pods) != len(brokenPods) {
			t.Errorf("gateway pods %d, were %d", len(pods), len(brokenPods))
		}
		for uid := range brokenPods {
			if _, ok := pods[uid]; !ok {
				t.Errorf("gateway pod %s was deleted", uid)
			}
		}
		for _, ev := range e.events(broken) {
			if strings.Contains(ev.Reason, "Uninstall") || strings.Contains(ev.Reason, "Rollback") {
				t.Errorf("event %s: %s", ev.Reason, ev.Message)
			}
		}
		e.update(broken, func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "1", "spec", "applications", "a", "resources", "requests", "cpu")
		})
		e.waitReady(broken, "True", "Available", 2*time.Minute)
		if _, _, msg := condition(e.getStack(broken), "Retrying"); !strings.Contains(msg, "succeeded") {
			t.Errorf("Retrying after the fix: %s", msg)
		}
	})

}

func (e *env) getStackObserved(name string) bool {
	u := e.getStack(name)
	observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	return observed == u.GetGeneration()
}

// table returns the stacks as `kubectl get` shows them: column name to
// cell, by stack name.
func (e *env) table(ctx context.Context) map[string]map[string]string {
	e.t.Helper()
	cfg := rest.CopyConfig(e.cluster.RESTConfig())
	cfg.GroupVersion = &schema.GroupVersion{Group: "models.takeoff.co", Version: "v1alpha1"}
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	var table metav1.Table
	body, err := rc.Get().Namespace(ns).Resource("inferencestacks").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := json.Unmarshal(body, &table); err != nil {
		e.t.Fatal(err)
	}
	out := map[string]map[string]string{}
	for _, row := range table.Rows {
		cells := map[string]string{}
		for i, c := range table.ColumnDefinitions {
			if i < len(row.Cells) {
				cells[c.Name] = fmt.Sprint(row.Cells[i])
			}
		}
		out[cells["Name"]] = cells
	}
	return out
}
