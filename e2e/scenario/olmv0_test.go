package scenario_test

import (
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/olmv0local"
	"github.com/titanml/inference-stack-operator/e2e/scenario"
)

// TestOLMv0Local runs the product's flow under OLM v0 (olm-operator and
// catalog-operator v0.38.0, built from the Go module and deployed as pods
// from OLM's own chart) on the local cluster's real node:
//
//  1. 0.1.0 released and pushed; the catalog chart with olm: v0: OLM runs
//     the project's catalog image as its catalog pod (opm serve, probed by
//     grpc_health_probe) and connects to it;
//  2. the Subscription on stable-v0 installs CSV 0.1.0 (InstallPlan, bundle
//     unpacked by OLM's Job, CSV Succeeded), the operator's pods are Ready
//     on the real node from the operator image pinned by digest;
//  3. the documented example stack is reconciled: reader Running on the
//     RTX 3060 node, gateway Running on the real node; a stack of another
//     major is never touched;
//  4. 0.2.0 (with the chart's next minor version) through a catalog update:
//     OLM replaces the catalog pod, upgrades the Subscription to CSV 0.2.0
//     and the operator; the new operator upgrades the release while the
//     stack's Deployments and pods keep their UIDs;
//  5. teardown in the documented order leaves nothing of OLM's objects.
//
// INFERENCE_STACK_E2E_OLM_V0=off skips it (it costs another cluster start);
// it also runs only where INFERENCE_STACK_E2E_CLUSTER selects the local
// provider.
func TestOLMv0Local(t *testing.T) {
	if os.Getenv("INFERENCE_STACK_E2E_OLM_V0") == "off" {
		t.Skip("skipped: INFERENCE_STACK_E2E_OLM_V0=off")
	}
	if run, why := scenario.SelectProvider(os.Getenv("INFERENCE_STACK_E2E_CLUSTER"), "local"); !run {
		t.Skipf("skipped: %s", why)
	}
	if err := scenario.CheckLocal("v0"); err != nil {
		t.Skipf("skipped: %v", err)
	}
	begin := time.Now()
	ctx := testContext(t)
	env, err := scenario.StartLocal(ctx, scenario.LocalOptions{OLM: "v0", Log: t.Output(), WarmVersion: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	s := newScenario(t, env)
	t.Logf("environment ready in %s (OLM %s image %s)", time.Since(begin).Round(100*time.Millisecond), olmv0local.Version, env.OLMv0.Image)
	pods, err := s.CS.CoreV1().Pods(olmv0local.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != env.RealNode || p.Status.Phase != corev1.PodRunning {
			t.Fatalf("OLM pod %s: node %q phase %s; want Running on %s", p.Name, p.Spec.NodeName, p.Status.Phase, env.RealNode)
		}
	}

	var v1 *scenario.Images
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"1 catalog 0.1.0 served by OLM v0", func(t *testing.T) {
			if v1, err = env.Builder.Release(ctx, "0.1.0"); err != nil {
				t.Fatal(err)
			}
			s.Mark("images 0.1.0 pushed")
			t.Logf("0.1.0: operator %s\n  bundle %s\n  catalog %s", v1.Operator, v1.Bundle, v1.Catalog)
			if err := s.InstallCatalog(ctx, v1.Catalog); err != nil {
				t.Fatal(err)
			}
			// The catalog pod is the project's catalog image, run by OLM under
			// its restricted settings.
			pods, err := s.CS.CoreV1().Pods(olmv0local.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "olm.catalogSource=" + inferencestack.CatalogName})
			if err != nil || len(pods.Items) != 1 {
				t.Fatalf("catalog pods: %v %v", err, pods)
			}
			p := pods.Items[0]
			sc := p.Spec.SecurityContext
			if p.Spec.NodeName != env.RealNode || sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile == nil {
				t.Errorf("catalog pod %s: node %q security context %+v; want the real node, non-root, a seccomp profile", p.Name, p.Spec.NodeName, sc)
			}
			t.Logf("catalog pod %s Ready on %s (exec probe grpc_health_probe), image %s", p.Name, p.Spec.NodeName, p.Spec.Containers[0].Image)
		}},
		{"2 subscription stable-v0 → CSV 0.1.0 Succeeded, operator on the real node", func(t *testing.T) {
			if err := s.WaitInstalled(ctx, "0.1.0", v1.Operator); err != nil {
				t.Fatal(err)
			}
			plans, err := s.Dyn.Resource(scenario.GVRInstallPlan).Namespace(inferencestack.Namespace(s.Major)).List(ctx, metav1.ListOptions{})
			if err != nil || len(plans.Items) == 0 {
				t.Fatalf("no InstallPlan: %v", err)
			}
			t.Logf("installed through InstallPlan %s; Subscription → operator pods Ready: %s", plans.Items[0].GetName(), s.Since("helm install", "operator pod ready 0.1.0").Round(10*time.Millisecond))
		}},
		{"3 example stack on the RTX 3060", func(t *testing.T) {
			pls := applyExampleStack(t, ctx, s)
			for _, p := range pls {
				switch {
				case strings.HasSuffix(p.Deployment, "-hello-world"):
					if p.Node != env.GPUNodes[localcluster.ProductRTX3060] || p.Phase != string(corev1.PodRunning) {
						t.Errorf("reader pod %s: node %q phase %s, want Running on the RTX 3060 node", p.Pod, p.Node, p.Phase)
					}
				case strings.HasSuffix(p.Deployment, "-gateway"):
					if p.Node != env.RealNode || p.Phase != string(corev1.PodRunning) {
						t.Errorf("gateway pod %s: node %q phase %s, want Running on the real node", p.Pod, p.Node, p.Phase)
					}
				}
			}
		}},
		{"4 upgrade to 0.2.0 through the catalog", func(t *testing.T) {
			upgradeThroughCatalog(t, ctx, s, v1)
		}},
		{"5 teardown in the documented order", func(t *testing.T) {
			if err := s.Teardown(ctx); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, st := range steps {
		if !t.Run(st.name, st.run) {
			return
		}
	}
	t.Logf("helm install (OLM v0) → operator pod Ready on %s: %s; → GPU pod Running: %s", env.RealNode,
		s.Since("helm install", "operator pod ready 0.1.0").Round(10*time.Millisecond), s.Since("helm install", "GPU pod Running").Round(10*time.Millisecond))
	t.Logf("whole OLM v0 e2e: %s", time.Since(begin).Round(100*time.Millisecond))
}
