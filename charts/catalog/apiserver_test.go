package catalogchart

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/olmlocal"
	"github.com/titanml/inference-stack-operator/e2e/harness/olmv0local"
)

var (
	stackGVR = schema.GroupVersionResource{Group: "models.takeoff.co", Version: "v1alpha1", Resource: "inferencestacks"}
	crdGVR   = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	ceGVR    = schema.GroupVersionResource{Group: "olm.operatorframework.io", Version: "v1", Resource: "clusterextensions"}
)

// policiesOff switches every admission policy off, for a second release of
// the chart in a cluster whose first release installed them.
var policiesOff = map[string]any{
	"podSecurity":     map[string]any{"enabled": false},
	"operatorVersion": map[string]any{"enabled": false},
	"gatewayNames":    map[string]any{"enabled": false},
	"placement":       map[string]any{"enabled": false},
	"ingress":         map[string]any{"enabled": false},
}

// TestOnAPIServer runs the chart against a real kube-apiserver that has OLM
// v1's and OLM v0's CRDs (of the pinned releases; no OLM controller runs):
//   - every object rendered for several value sets of both modes, the ci/
//     values files among them, passes a server-side dry run (so OLM's CRD
//     schemas and CEL rules accept the ClusterCatalog and ClusterExtensions,
//     the CatalogSource, OperatorGroups and Subscriptions, and RBAC objects
//     are valid);
//   - a real helm install, the uninstall-order guard on helm upgrade, and
//     helm uninstall keeping the CRD.
func TestOnAPIServer(t *testing.T) {
	t.Parallel()
	c := localcluster.StartForTest(t, localcluster.Options{Nodes: []localcluster.Node{}, WithoutScheduler: true})
	ctx := t.Context()
	cfg := c.RESTConfig()
	if err := olmlocal.InstallCRDs(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := olmv0local.InstallCRDs(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	cs := kubernetes.NewForConfigOrDie(cfg)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(cfg)))

	valueSets := map[string]string{
		"defaults": "",
		"tag":      "catalog: {image: {digest: '', tag: '0.1.0'}, pollIntervalMinutes: 30, priority: -5}",
		"two majors": `
extensions:
  v0: {channel: stable, version: ">=0.1.0 <0.3.0", upgradeConstraintPolicy: SelfCertified}
  v1: {enabled: true, channel: fast, installer: {extraRules: [{apiGroups: [""], resources: [configmaps], verbs: [get]}]}}
`,
		"external catalog": "catalog: {create: false}\nextensions: {v0: {catalogSelector: {matchLabels: {team: ml}}}}",
		"v0: two majors, tag, manual approval, starting version, no installer": `
olm: v0
catalog: {image: {digest: '', tag: '0.1.0'}, pollIntervalMinutes: 30, priority: -5}
olmV0: {catalogSource: {namespace: openshift-marketplace, secrets: [pull-secret], securityContextConfig: legacy}, installPlanApproval: Manual}
extensions:
  v0: {version: 0.1.0}
  v1: {enabled: true, channel: fast, installPlanApproval: Automatic, installer: {create: false}}
`,
	}
	for name, values := range ciValues(t) {
		valueSets["ci/"+name] = values
	}
	// OLM v0's catalog namespaces: OLM's own (upstream) and OpenShift's.
	for _, ns := range []string{"olm", "openshift-marketplace"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("server-side dry run", func(t *testing.T) {
		for name, values := range valueSets {
			objs := render(t, values)
			// Namespaces first (for real, so that namespaced objects can be
			// dry-run into them), then everything else.
			for _, pass := range []bool{true, false} {
				for _, u := range objs {
					if (u.GetKind() == "Namespace") != pass {
						continue
					}
					if pass {
						if _, err := cs.CoreV1().Namespaces().Get(ctx, u.GetName(), metav1.GetOptions{}); err == nil {
							continue // accepted for an earlier value set
						}
					}
					m, err := mapper.RESTMapping(u.GroupVersionKind().GroupKind(), u.GroupVersionKind().Version)
					if err != nil {
						t.Fatalf("%s: %s: %v", name, key(u), err)
					}
					var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
					if m.Scope.Name() == meta.RESTScopeNameNamespace {
						ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
					}
					if _, err := ri.Create(ctx, u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
						t.Errorf("%s: the API server rejects %s: %v", name, key(u), err)
					}
					if pass {
						ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: u.GetName()}}
						if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
							t.Fatal(err)
						}
					}
				}
			}
		}
		// Leave no namespace behind for the real install below.
		nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range nss.Items {
			if strings.HasPrefix(ns.Name, inferencestack.PackageName+"-") {
				if err := cs.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				waitGone(t, ctx, dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}), ns.Name)
			}
		}
		// Objects OLM's CRDs must reject, so the dry run above means
		// something.
		for _, u := range render(t, "olm: v0") {
			if u.GetKind() != "CatalogSource" {
				continue
			}
			u = u.DeepCopy()
			_ = unstructured.SetNestedField(u.Object, "privileged", "spec", "grpcPodConfig", "securityContextConfig")
			gvr := schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1alpha1", Resource: "catalogsources"}
			_, err := dyn.Resource(gvr).Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil || !strings.Contains(err.Error(), "securityContextConfig") {
				t.Errorf("OLM v0's CatalogSource CRD did not reject an unknown securityContextConfig: %v", err)
			}
		}
		bad := render(t, "")
		for _, u := range bad {
			if u.GetKind() == "ClusterCatalog" {
				u = u.DeepCopy()
				_ = unstructured.SetNestedField(u.Object, int64(10), "spec", "source", "image", "pollIntervalMinutes")
				gvr := schema.GroupVersionResource{Group: "olm.operatorframework.io", Version: "v1", Resource: "clustercatalogs"}
				_, err := dyn.Resource(gvr).Create(ctx, u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				if err == nil || !strings.Contains(err.Error(), "pollIntervalMinutes") {
					t.Errorf("a digest with pollIntervalMinutes was not rejected as expected: %v", err)
				}
			}
		}
	})

	t.Run("install, guard, uninstall", func(t *testing.T) {
		rel := Release{Kubeconfig: c.Kubeconfig(), Namespace: "inference-stack-system", Log: t.Logf}
		r, err := rel.Install(map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("installed %s: %s", r.Name, r.Info.Status)
		// The chart created the CRD: wait until discovery serves it (as it
		// long has whenever a user upgrades).
		dc := discovery.NewDiscoveryClientForConfigOrDie(cfg)
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := dc.ServerResourcesForGroupVersion("models.takeoff.co/v1alpha1")
			return err == nil, nil
		}); err != nil {
			t.Fatalf("the InferenceStack CRD installed by the chart is not served: %v", err)
		}
		if _, err := dyn.Resource(ceGVR).Get(ctx, "inference-stack-operator-v0", metav1.GetOptions{}); err != nil {
			list, lerr := dyn.Resource(ceGVR).List(ctx, metav1.ListOptions{})
			t.Fatalf("%#v; list: %v %v", err, lerr, list)
		}
		var stack map[string]any
		_ = yaml.Unmarshal([]byte(`
apiVersion: models.takeoff.co/v1alpha1
kind: InferenceStack
metadata: {name: guarded, namespace: default, labels: {operatorVersion: v0}}
spec: {applications: {hello: {}}}
`), &stack)
		if _, err := dyn.Resource(stackGVR).Namespace("default").Create(ctx, &unstructured.Unstructured{Object: stack}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		disableV0 := map[string]any{"extensions": map[string]any{"v0": map[string]any{"enabled": false}}}
		_, err = rel.Upgrade(disableV0)
		if err == nil || !strings.Contains(err.Error(), "default/guarded") {
			t.Fatalf("upgrade removing the v0 extension while a v0 stack exists: got %v, want the guard's refusal naming default/guarded", err)
		}
		t.Logf("guard: %v", err)
		if _, err := dyn.Resource(ceGVR).Get(ctx, "inference-stack-operator-v0", metav1.GetOptions{}); err != nil {
			t.Fatalf("the refused upgrade removed the extension: %v", err)
		}
		// A stack of another major does not block.
		if err := dyn.Resource(stackGVR).Namespace("default").Delete(ctx, "guarded", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, ctx, dyn.Resource(stackGVR).Namespace("default"), "guarded")
		stack["metadata"].(map[string]any)["labels"] = map[string]any{"operatorVersion": "v1"}
		if _, err := dyn.Resource(stackGVR).Namespace("default").Create(ctx, &unstructured.Unstructured{Object: stack}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := rel.Upgrade(disableV0); err != nil {
			t.Fatalf("upgrade after the v0 stacks are gone: %v", err)
		}
		waitGone(t, ctx, dyn.Resource(ceGVR), "inference-stack-operator-v0")

		resp, err := rel.Uninstall()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("helm uninstall: %s", resp.Info)
		crd, err := dyn.Resource(crdGVR).Get(ctx, "inferencestacks.models.takeoff.co", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("helm uninstall deleted the CRD: %v", err)
		}
		if crd.GetDeletionTimestamp() != nil {
			t.Fatal("helm uninstall is deleting the CRD")
		}
		if _, err := dyn.Resource(stackGVR).Namespace("default").Get(ctx, "guarded", metav1.GetOptions{}); err != nil {
			t.Fatalf("the v1 stack did not survive helm uninstall: %v", err)
		}
		// Reinstalling adopts the kept CRD (once the old namespace is gone).
		waitGone(t, ctx, dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}), "inference-stack-operator-v0")
		if _, err := rel.Install(map[string]any{}); err != nil {
			t.Fatalf("reinstall over the kept CRD: %v", err)
		}
	})

	// The same guard under OLM v0: removing a major's Subscription (and
	// with it its namespace, which takes the CSV and the operator along)
	// is refused while stacks of that major exist. A second release, for a
	// major of its own (the CRD and v0's namespace belong to the first).
	t.Run("OLM v0: install, guard, uninstall", func(t *testing.T) {
		rel := Release{Kubeconfig: c.Kubeconfig(), Namespace: "inference-stack-system-olm-v0", Name: "catalog-olm-v0", Log: t.Logf}
		on := map[string]any{
			"olm": "v0",
			"crd": map[string]any{"install": false},
			// The admission policies and the tenant roles are
			// cluster-wide too: the first release's.
			"admissionPolicies": policiesOff,
			"tenantRBAC":        map[string]any{"enabled": false},
			"extensions": map[string]any{
				"v0": map[string]any{"enabled": false},
				"v5": map[string]any{"enabled": true},
			},
		}
		if _, err := rel.Install(on); err != nil {
			t.Fatal(err)
		}
		subGVR := schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1alpha1", Resource: "subscriptions"}
		ns := inferencestack.Namespace("v5")
		sub, err := dyn.Resource(subGVR).Namespace(ns).Get(ctx, inferencestack.ExtensionName("v5"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ch, _, _ := unstructured.NestedString(sub.Object, "spec", "channel"); ch != "stable-v5" {
			t.Errorf("Subscription channel %q", ch)
		}
		var stack map[string]any
		_ = yaml.Unmarshal([]byte(`
apiVersion: models.takeoff.co/v1alpha1
kind: InferenceStack
metadata: {name: guarded-v5, namespace: default, labels: {operatorVersion: v5}}
spec: {applications: {hello: {}}}
`), &stack)
		if _, err := dyn.Resource(stackGVR).Namespace("default").Create(ctx, &unstructured.Unstructured{Object: stack}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		off := map[string]any{"olm": "v0", "crd": map[string]any{"install": false}, "admissionPolicies": policiesOff, "tenantRBAC": map[string]any{"enabled": false}, "extensions": map[string]any{"v0": map[string]any{"enabled": false}}}
		_, err = rel.Upgrade(off)
		if err == nil || !strings.Contains(err.Error(), "Subscription") || !strings.Contains(err.Error(), "default/guarded-v5") {
			t.Fatalf("upgrade removing the v5 Subscription while a v5 stack exists: got %v, want the guard's refusal", err)
		}
		t.Logf("guard: %v", err)
		if err := dyn.Resource(stackGVR).Namespace("default").Delete(ctx, "guarded-v5", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, ctx, dyn.Resource(stackGVR).Namespace("default"), "guarded-v5")
		if _, err := rel.Upgrade(off); err != nil {
			t.Fatalf("upgrade after the v5 stacks are gone: %v", err)
		}
		waitGone(t, ctx, dyn.Resource(subGVR).Namespace(ns), inferencestack.ExtensionName("v5"))
		if _, err := rel.Uninstall(); err != nil {
			t.Fatal(err)
		}
	})
}

func waitGone(t *testing.T, ctx context.Context, ri dynamic.ResourceInterface, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := ri.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(fmt.Errorf("waiting for %s to be deleted: %w", name, err))
	}
}
