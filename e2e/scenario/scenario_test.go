package scenario_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/poll"
	"github.com/titanml/inference-stack-operator/e2e/harness/samples"
	"github.com/titanml/inference-stack-operator/e2e/scenario"
)

func init() {
	// operator-registry logs at info level through logrus for every bundle
	// the in-process image build reads; keep the test log to the
	// scenario's own lines, as isctl and the demo do.
	logrus.SetLevel(logrus.WarnLevel)
}

// TestOLMLocal runs the product's flow under OLM v1 end to end on the selected
// provider (INFERENCE_STACK_E2E_CLUSTER: local, the default; kind; or auto,
// kind when a Docker engine answers):
//
//  1. build and push the images at 0.1.0 (released in a copy of the source,
//     as `make release` does); install the catalog chart: ClusterCatalog
//     Serving=True with the pinned digest;
//  2. ClusterExtension (stable-v0) Installed=True, the bundle Deployment
//     pins the operator image by digest, the operator runs;
//  3. the documented example stack: Deployed=True, reader on the RTX 3060 node and
//     Running, gateway on a node without GPU;
//  4. a stack selecting an absent GPU stays Pending and says why;
//  5. a stack labelled operatorVersion: v1 is never touched;
//  6. 0.2.0, with the next minor version of the chart, built and pushed
//     with a catalog holding 0.1.0 and 0.2.0; the ClusterCatalog pointed at
//     it: the extension upgrades by itself, the new operator upgrades every
//     release to the new chart, the stacks' Deployments and pods keep their
//     UIDs, and it reconciles changes;
//  7. teardown in the documented order leaves nothing stuck.
//
// On failure it prints conditions, events and component logs.
func TestOLMLocal(t *testing.T) {
	run, why := scenario.SelectProvider(os.Getenv("INFERENCE_STACK_E2E_CLUSTER"), "local")
	if !run {
		t.Skipf("skipped: %s", why)
	}
	t.Logf("local provider: %s", why)
	runScenario(t, "local")
}

// TestOLMKind is the same scenario on kind. It runs when a Docker engine
// answers (INFERENCE_STACK_E2E_CLUSTER unset or auto), or on request
// (kind, both).
func TestOLMKind(t *testing.T) {
	run, why := scenario.SelectProvider(os.Getenv("INFERENCE_STACK_E2E_CLUSTER"), "kind")
	if !run {
		t.Skipf("skipped: %s", why)
	}
	t.Logf("kind provider: %s", why)
	runScenario(t, "kind")
}

func runScenario(t *testing.T, provider string) {
	begin := time.Now()
	ctx := testContext(t)
	var env *scenario.Env
	var err error
	switch provider {
	case "kind":
		env, err = scenario.StartKind(ctx, scenario.KindOptions{Log: t.Output()})
	default:
		if err := scenario.CheckLocal("v1"); err != nil {
			t.Skipf("skipped: %v", err)
		}
		env, err = scenario.StartLocal(ctx, scenario.LocalOptions{Log: t.Output(), WarmVersion: "0.1.0"})
	}
	if err != nil {
		t.Fatal(err)
	}
	s := newScenario(t, env)
	t.Logf("environment ready in %s", time.Since(begin).Round(100*time.Millisecond))
	if provider == "local" {
		// Where this machine can run a real node, the operator must run
		// there: falling back to the host-process runner would hide
		// everything the container runtime checks.
		if err := localcluster.CheckRealNode(); err == nil && env.RealNode == "" {
			t.Fatalf("this machine can run a real node, but the local environment has none (%s)", env.RealNodeSkipped)
		} else if env.RealNode == "" {
			t.Logf("no real node (%s): the operator runs as a host process, the runtime checks are skipped", env.RealNodeSkipped)
		}
	}
	if env.RealNode != "" {
		// OLM itself runs from images on the real node, deployed from its
		// release manifest.
		pods, err := s.CS.CoreV1().Pods("olmv1-system").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var running []string
		for _, p := range pods.Items {
			if p.Spec.NodeName != env.RealNode || p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 || !p.Status.ContainerStatuses[0].Ready {
				t.Fatalf("OLM pod %s: node %q phase %s; want Ready on %s", p.Name, p.Spec.NodeName, p.Status.Phase, env.RealNode)
			}
			running = append(running, p.Name+" ("+p.Spec.Containers[0].Image+")")
		}
		if len(running) != 2 {
			t.Fatalf("want catalogd's and operator-controller's pods in olmv1-system, got %v", running)
		}
		t.Logf("OLM as pods on %s: %s", env.RealNode, strings.Join(running, ", "))
	}
	realRuntime := func(t *testing.T) {
		t.Helper()
		if env.RealNode == "" {
			t.Skip("skipped: the operator's pods only run for real on the local provider's real node")
		}
	}

	var v1, v2 *scenario.Images
	var uidsBefore map[string]string
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"1 catalog 0.1.0 serving", func(t *testing.T) {
			v1, err = env.Builder.Release(ctx, "0.1.0")
			if err != nil {
				t.Fatal(err)
			}
			s.Mark("images 0.1.0 pushed")
			t.Logf("0.1.0: operator %s\n  bundle %s\n  catalog %s", v1.Operator, v1.Bundle, v1.Catalog)
			if err := s.InstallCatalog(ctx, v1.Catalog); err != nil {
				t.Fatal(err)
			}
		}},
		{"2 extension installed, operator running", func(t *testing.T) {
			if err := s.WaitInstalled(ctx, "0.1.0", v1.Operator); err != nil {
				t.Fatal(err)
			}
		}},
		{"3 example stack on the RTX 3060", func(t *testing.T) {
			pls := applyExampleStack(t, ctx, s)
			var reader, gateway *scenario.Placement
			for i, p := range pls {
				switch {
				case strings.HasSuffix(p.Deployment, "-hello-world"):
					reader = &pls[i]
				case strings.HasSuffix(p.Deployment, "-gateway"):
					gateway = &pls[i]
				}
			}
			if reader == nil || gateway == nil {
				t.Fatalf("want a reader and a gateway pod, got %+v", pls)
			}
			if reader.Node != env.GPUNodes[localcluster.ProductRTX3060] || reader.Phase != string(corev1.PodRunning) {
				t.Errorf("reader pod %s: node %q phase %s, want Running on %s", reader.Pod, reader.Node, reader.Phase, env.GPUNodes[localcluster.ProductRTX3060])
			}
			if gateway.Phase != string(corev1.PodRunning) || gateway.Product != "" {
				t.Errorf("gateway pod %s: node %q (GPU %q) phase %s, want Running on a node without GPU", gateway.Pod, gateway.Node, gateway.Product, gateway.Phase)
			}
		}},
		{"3a operator pod: probes, uid 65532, read-only root, image by digest", func(t *testing.T) {
			realRuntime(t)
			if err := s.CheckOperatorRuntime(ctx, v1.Operator); err != nil {
				t.Fatal(err)
			}
			if err := s.SampleOperatorMemory(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"3b metrics: 401 without token, 403 without the role, 200 with it", func(t *testing.T) {
			realRuntime(t)
			if err := s.CheckMetrics(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"3c leader pod deleted: the lease changes hands, reconciling goes on", func(t *testing.T) {
			realRuntime(t)
			took, err := s.Handover(ctx, v1.Operator)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("leader pod deleted → lease held by another Ready replica in %s", took.Round(10*time.Millisecond))
			if _, err := s.Apply(ctx, samples.H100); err != nil {
				t.Fatal(err)
			}
			if err := s.WaitDeployed(ctx, "default", "big-models"); err != nil {
				t.Fatalf("the new leader did not reconcile a new stack: %v", err)
			}
			if _, err := s.WaitPlaced(ctx, "default", "big-models", 2); err != nil {
				t.Fatal(err)
			}
		}},
		{"4 absent GPU stays Pending and says why", func(t *testing.T) {
			if _, err := s.Apply(ctx, samples.AbsentGPU); err != nil {
				t.Fatal(err)
			}
			if err := s.WaitDeployed(ctx, "default", "no-such-gpu"); err != nil {
				t.Fatal(err)
			}
			pls, err := s.WaitPlaced(ctx, "default", "no-such-gpu", 2)
			if err != nil {
				t.Fatal(err)
			}
			var reader *scenario.Placement
			for i := range pls {
				if strings.HasSuffix(pls[i].Deployment, "-waiting") {
					reader = &pls[i]
				}
			}
			if reader == nil {
				t.Fatalf("no reader pod: %+v", pls)
			}
			if reader.Phase != string(corev1.PodPending) || reader.Node != "" || !strings.Contains(reader.Why, "node affinity/selector") {
				t.Fatalf("reader %s: phase %s node %q why %q; want Pending, unscheduled, explained by the node selector", reader.Pod, reader.Phase, reader.Node, reader.Why)
			}
			// The user sees why in the pod's events.
			evs, err := s.CS.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + reader.Pod})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(evs.Items, func(e corev1.Event) bool {
				return e.Reason == "FailedScheduling" && strings.Contains(e.Message, "node affinity/selector")
			}) {
				t.Errorf("no FailedScheduling event explaining the node selector for %s: %+v", reader.Pod, evs.Items)
			}
			t.Logf("%s stays Pending: %s", reader.Pod, reader.Why)
			// The stack itself says so.
			u, err := s.WaitReady(ctx, "default", "no-such-gpu", "False", "InsufficientGPU")
			if err != nil {
				t.Fatal(err)
			}
			if _, _, msg := scenario.Condition(u, "Ready"); !strings.Contains(msg, reader.Pod) || !strings.Contains(msg, "node affinity/selector") {
				t.Errorf("Ready does not name the pod and the scheduler's reason: %s", msg)
			}
		}},
		{"4a an image the registry does not have: ImagePullBackOff on the real node", func(t *testing.T) {
			realRuntime(t)
			doc := fmt.Sprintf(`
apiVersion: models.takeoff.co/v1alpha1
kind: InferenceStack
metadata: {name: missing-image, namespace: default, labels: {operatorVersion: v0}}
spec:
  gateway:
    image: {repository: %[1]q, tag: missing}
  applications:
    cpu:
      image: {repository: %[1]q, tag: missing}
      readerConfig: {modelName: m, device: cpu}
`, env.Builder.Registry+"/no-such-image")
			if _, err := s.Apply(ctx, doc); err != nil {
				t.Fatal(err)
			}
			u, err := s.WaitReady(ctx, "default", "missing-image", "False", "ImagePullBackOff")
			if err != nil {
				t.Fatal(err)
			}
			_, _, msg := scenario.Condition(u, "Ready")
			t.Logf("missing-image: %s", msg)
			if !strings.Contains(msg, "no-such-image:missing") {
				t.Errorf("Ready does not name the image: %s", msg)
			}
			if err := s.DeleteStack(ctx, "default", "missing-image"); err != nil {
				t.Fatal(err)
			}
		}},
		{"5 other major untouched", func(t *testing.T) {
			if err := s.Untouched(ctx, "default", "for-another-major"); err != nil {
				t.Fatal(err)
			}
		}},
		{"6 upgrade to 0.2.0 through the catalog", func(t *testing.T) {
			oldPID := 0
			if s.Runner != nil {
				oldPID = s.Runner.PID()
			}
			if err := s.SampleOperatorMemory(ctx); err != nil {
				t.Fatal(err)
			}
			v2, uidsBefore = upgradeThroughCatalog(t, ctx, s, v1)
			if s.Runner != nil && s.Runner.PID() == oldPID {
				t.Errorf("the operator process (pid %d) was not replaced", oldPID)
			}
			if env.RealNode != "" {
				if err := s.CheckOperatorRuntime(ctx, v2.Operator); err != nil {
					t.Fatal(err)
				}
			}
			// The new operator reconciles: a change to the example stack
			// reaches its Deployment.
			patch := []byte(`{"spec":{"applications":{"hello-world":{"replicaCount":2}}}}`)
			if _, err := s.Dyn.Resource(scenario.GVRInferenceStack).Namespace("default").Patch(ctx, "my-inference-stack", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			err = poll.Until(ctx, time.Minute, "the replica count to reach the Deployment", poll.Check(func() (bool, string) {
				d, err := s.CS.AppsV1().Deployments("default").Get(ctx, "my-inference-stack-hello-world", metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				return d.Spec.Replicas != nil && *d.Spec.Replicas == 2 && string(d.UID) == uidsBefore[d.Name], fmt.Sprintf("replicas %v uid %s", *d.Spec.Replicas, d.UID)
			}))
			if err != nil {
				t.Fatalf("the 0.2.0 operator did not reconcile a change: %v", err)
			}
			if err := s.Untouched(ctx, "default", "for-another-major"); err != nil {
				t.Fatal(err)
			}
		}},
		{"6a operator memory stayed under its limit", func(t *testing.T) {
			realRuntime(t)
			if err := s.SampleOperatorMemory(ctx); err != nil {
				t.Fatal(err)
			}
			for _, m := range s.Memory {
				t.Logf("operator pod %s: memory %d MiB, peak %d MiB, limit %d MiB", m.Pod, m.Usage>>20, m.Peak>>20, m.Limit>>20)
			}
			if err := s.CheckMemory(); err != nil {
				t.Fatal(err)
			}
		}},
		{"7 teardown in the documented order", func(t *testing.T) {
			if err := s.Teardown(ctx); err != nil {
				t.Fatal(err)
			}
			if s.Runner != nil {
				err := poll.Until(ctx, 30*time.Second, "the operator to exit", poll.Check(func() (bool, string) { return s.Runner.PID() == 0, "operator still running" }))
				if err != nil {
					t.Errorf("the operator kept running after its Deployment was deleted: %v", err)
				}
			}
		}},
	}
	for _, st := range steps {
		if !t.Run(st.name, st.run) {
			return
		}
	}

	// Numbers (reported, not asserted).
	t.Logf("ClusterExtension created (helm install) → GPU pod Running: %s (includes OLM install, operator start and the stack's reconcile)",
		s.Since("helm install", "GPU pod Running").Round(10*time.Millisecond))
	t.Logf("catalog upgrade → extension at 0.2.0: %s", s.Since("helm upgrade catalog", "installed 0.2.0").Round(10*time.Millisecond))
	if env.RealNode != "" {
		t.Logf("ClusterExtension created (helm install) → operator pod Ready on %s: %s", env.RealNode, s.Since("helm install", "operator pod ready 0.1.0").Round(10*time.Millisecond))
		t.Logf("operator image pull by digest from the loopback registry: 0.1.0 %s, 0.2.0 %s", s.PullTimes["0.1.0"], s.PullTimes["0.2.0"])
	}
	t.Logf("whole e2e on %s: %s", provider, time.Since(begin).Round(100*time.Millisecond))
}

// testContext is t's context, ending 30 s before the test's deadline so
// that the cleanup can still tear the environment down.
func testContext(t *testing.T) context.Context {
	d, ok := t.Deadline()
	if !ok {
		return t.Context()
	}
	ctx, cancel := context.WithDeadline(t.Context(), d.Add(-30*time.Second))
	t.Cleanup(cancel)
	return ctx
}

// newScenario prepares the scenario on env; the cleanup prints what
// explains a failure, then stops env.
func newScenario(t *testing.T, env *scenario.Env) *scenario.Scenario {
	t.Helper()
	s, err := scenario.New(env, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			s.Diagnose(t.Output())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := env.Stop(ctx); err != nil {
			t.Errorf("stopping the environment: %v", err)
		}
	})
	s.Mark("environment ready")
	return s
}

// upgradeThroughCatalog releases 0.2.0 with the chart's next minor version
// (as most releases ship one; it must not restart a single model server),
// points the catalog at it and waits until OLM installs it. Then the
// operator pods of 0.1.0 are gone, the new operator has upgraded every
// release to the new chart while the stacks' Deployments and pods kept
// their UIDs, and the other major's stack is untouched. It returns 0.2.0's
// images and the Deployments' UIDs before the upgrade.
func upgradeThroughCatalog(t *testing.T, ctx context.Context, s *scenario.Scenario, v1 *scenario.Images) (*scenario.Images, map[string]string) {
	t.Helper()
	deps, err := s.DeploymentUIDs(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	podsBefore, err := s.PodUIDs(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	oldPods, err := s.OperatorPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var chart string
	if err := s.Env.Builder.Change(ctx, "the chart's next minor version", func(src string) (err error) {
		chart, err = scenario.BumpChartMinor(src)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	v2, err := s.Env.Builder.BuildAndPush(ctx, "0.2.0")
	if err != nil {
		t.Fatal(err)
	}
	s.Mark("images 0.2.0 pushed")
	versions, err := scenario.CatalogBundles(s.Env.Builder.OutDir("0.2.0"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(versions, []string{"0.1.0", "0.2.0"}) {
		t.Fatalf("the 0.2.0 catalog holds bundles %v, want [0.1.0 0.2.0]", versions)
	}
	if v2.Operator == v1.Operator || v2.Catalog == v1.Catalog {
		t.Fatalf("0.2.0 did not produce new images: %+v vs %+v", v2, v1)
	}
	if err := s.UpgradeCatalog(ctx, v2.Catalog); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitInstalled(ctx, "0.2.0", v2.Operator); err != nil {
		t.Fatal(err)
	}
	t.Logf("upgraded: catalog pointed at 0.2.0 → operator installed at 0.2.0 in %s", s.Since("helm upgrade catalog", "installed 0.2.0").Round(10*time.Millisecond))
	if s.Env.RealNode != "" {
		newPods, err := s.OperatorPods(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range oldPods {
			if slices.ContainsFunc(newPods, func(p corev1.Pod) bool { return p.UID == o.UID }) {
				t.Errorf("operator pod %s of 0.1.0 still runs after the upgrade", o.Name)
			}
		}
	}
	upgradeKeptWorkloads(t, ctx, s, chart, deps, podsBefore)
	if err := s.Untouched(ctx, "default", "for-another-major"); err != nil {
		t.Fatal(err)
	}
	return v2, deps
}

// applyExampleStack applies the other major's stack, then the example
// stack, waits until the example is Deployed and its two pods are placed,
// and prints where they run. The other-major stack goes in first, so that
// "never touched" covers everything the operator does from then on.
func applyExampleStack(t *testing.T, ctx context.Context, s *scenario.Scenario) []scenario.Placement {
	t.Helper()
	for _, doc := range []string{samples.OtherMajor, samples.Example} {
		if _, err := s.Apply(ctx, doc); err != nil {
			t.Fatal(err)
		}
	}
	s.Mark("example stack applied")
	if err := s.WaitDeployed(ctx, "default", "my-inference-stack"); err != nil {
		t.Fatal(err)
	}
	pls, err := s.WaitPlaced(ctx, "default", "my-inference-stack", 2)
	if err != nil {
		t.Fatal(err)
	}
	s.Mark("GPU pod Running")
	scenario.PrintPlacements(t.Output(), pls)
	u, err := s.WaitReady(ctx, "default", "my-inference-stack", "True", "Available")
	if err != nil {
		t.Fatal(err)
	}
	if endpoint, _, _ := unstructured.NestedString(u.Object, "status", "endpoint"); endpoint != "http://my-inference-stack-gateway.default.svc:80" {
		t.Errorf("endpoint %q", endpoint)
	}
	stacks, err := s.Stacks(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	scenario.PrintStacks(t.Output(), stacks)
	return pls
}

// upgradeKeptWorkloads waits until the new operator has upgraded every
// release whose Deployments deps lists to chart (their helm.sh/chart label),
// then fails t unless those Deployments and the namespace's pods (pods, from
// PodUIDs) kept their UIDs.
func upgradeKeptWorkloads(t *testing.T, ctx context.Context, s *scenario.Scenario, chart string, deps, pods map[string]string) {
	t.Helper()
	err := poll.Until(ctx, 2*time.Minute, "the upgraded chart on every Deployment", poll.Check(func() (bool, string) {
		list, err := s.CS.AppsV1().Deployments("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, d := range list.Items {
			if _, ours := deps[d.Name]; ours && d.Labels["helm.sh/chart"] != "inference-stack-"+chart {
				return false, fmt.Sprintf("Deployment %s is labelled %s", d.Name, d.Labels["helm.sh/chart"])
			}
		}
		return true, ""
	}))
	if err != nil {
		t.Fatalf("the new operator did not upgrade the releases to chart %s: %v", chart, err)
	}
	depsAfter, err := s.DeploymentUIDs(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	for name, uid := range deps {
		if depsAfter[name] != uid {
			t.Errorf("Deployment %s: UID %s before the upgrade, %q after (recreated or deleted)", name, uid, depsAfter[name])
		}
	}
	podsAfter, err := s.PodUIDs(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(pods, podsAfter) {
		t.Errorf("the upgrade (chart %s) replaced pods: before %v, after %v", chart, pods, podsAfter)
	}
	t.Logf("chart %s: %d pods kept their UIDs", chart, len(podsAfter))
}
