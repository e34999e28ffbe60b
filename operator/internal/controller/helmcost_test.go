package controller

import (
	"reflect"
	"testing"

	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	inferencestackchart "github.com/titanml/inference-stack-operator/charts/inference-stack"
	"github.com/titanml/inference-stack-operator/operator/internal/watches"
)

// Helm's reads of an object may be answered from the cache only for kinds
// whose cache holds every Helm-managed object; a kind cached more narrowly
// (the release Secrets of one major, the stacks of one major) must always
// be read from the API server, or an existing object would look absent.
func TestHelmManagedKindsFollowTheCacheOptions(t *testing.T) {
	ws, err := watches.Load(watches.Default, "v0", watches.Charts{"inference-stack": inferencestackchart.Load})
	if err != nil {
		t.Fatal(err)
	}
	co, err := CacheOptions(ws, Options{})
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	helmManaged, err := helmManagedKinds(co, scheme)
	if err != nil {
		t.Fatal(err)
	}
	for gvk, want := range map[schema.GroupVersionKind]bool{
		appsv1.SchemeGroupVersion.WithKind("Deployment"):                                     true,
		corev1.SchemeGroupVersion.WithKind("Service"):                                        true,
		corev1.SchemeGroupVersion.WithKind("ConfigMap"):                                      true,
		corev1.SchemeGroupVersion.WithKind("ServiceAccount"):                                 true,
		schema.GroupVersionKind{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObject"}: true,
		corev1.SchemeGroupVersion.WithKind("Secret"):                                         false,
		ws[0].GroupVersionKind:                                                               false,
	} {
		if got := helmManaged(gvk); got != want {
			t.Errorf("helmManaged(%s) = %v, want %v", gvk, got, want)
		}
	}
}

// Drift repair compares the manifest with the live object as JSON; the API
// server writes quantities back in canonical form, so the manifest's must
// be too, or every resync patches the Deployment for nothing: numbers of
// any size included. What is not a container or a volume (a forged
// record's manifest) is left as it is.
func TestCanonicalQuantities(t *testing.T) {
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(`
kind: Deployment
spec:
  template:
    spec:
      containers:
        - name: a
          resources:
            limits: {nvidia.com/gpu: 1, memory: 1024Mi, cpu: 0.5}
            requests: {nvidia.com/gpu: 1, cpu: 1000m, memory: 17179869184}
        - not a container
      initContainers:
        - name: b
          resources: {limits: {ephemeral-storage: 2048Mi}}
      volumes:
        - name: dshm
          emptyDir: {medium: Memory, sizeLimit: 1024Mi}
        - name: config
          configMap: {name: c}
        - 7
`), &obj); err != nil {
		t.Fatal(err)
	}
	canonicalQuantities(obj)
	want := map[string]any{
		"kind": "Deployment",
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "a", "resources": map[string]any{
				"limits":   map[string]any{"nvidia.com/gpu": "1", "memory": "1Gi", "cpu": "500m"},
				"requests": map[string]any{"nvidia.com/gpu": "1", "cpu": "1", "memory": "17179869184"},
			}}, "not a container"},
			"initContainers": []any{map[string]any{"name": "b", "resources": map[string]any{
				"limits": map[string]any{"ephemeral-storage": "2Gi"},
			}}},
			"volumes": []any{
				map[string]any{"name": "dshm", "emptyDir": map[string]any{"medium": "Memory", "sizeLimit": "1Gi"}},
				map[string]any{"name": "config", "configMap": map[string]any{"name": "c"}},
				float64(7),
			},
		}}},
	}
	if !reflect.DeepEqual(obj, want) {
		t.Errorf("canonicalQuantities:\n got %v\nwant %v", obj, want)
	}
}

// A stored revision drops the chart's templates; the release Helm goes on
// using keeps them, and a release without templates passes as it is.
func TestWithoutTemplates(t *testing.T) {
	c, err := inferencestackchart.Load()
	if err != nil {
		t.Fatal(err)
	}
	rel := &release.Release{Name: "stack", Chart: c, Manifest: "kind: ConfigMap\n"}
	n := len(c.Templates)
	stored := withoutTemplates(rel)
	if len(stored.Chart.Templates) != 0 || stored.Chart.Metadata != c.Metadata || stored.Manifest != rel.Manifest {
		t.Errorf("stored: %d templates, metadata %v, manifest %q", len(stored.Chart.Templates), stored.Chart.Metadata, stored.Manifest)
	}
	if rel.Chart != c || len(c.Templates) != n || n == 0 {
		t.Errorf("the release Helm keeps changed: %d templates, was %d", len(c.Templates), n)
	}
	if withoutTemplates(stored) != stored {
		t.Error("a release without templates was copied")
	}
}

// A release this process writes is never taken as new until it deletes a
// revision of it (an uninstall, or the pruning before the next revision),
// so the names it remembers are those of releases that exist.
func TestReleaseNamesRemembersWhatItWrote(t *testing.T) {
	names := newReleaseNames(nil) // Create and Delete never read the cache
	h := newHistoryOnce(driver.NewMemory(), names, "stack", "team")
	key := client.ObjectKey{Namespace: "team", Name: "stack"}
	rel := &release.Release{Name: "stack", Namespace: "team", Version: 1, Info: &release.Info{Status: release.StatusPendingInstall}}
	if err := h.Create("sh.helm.release.v1.stack.v1", rel); err != nil {
		t.Fatal(err)
	}
	if !names.wrote[key] {
		t.Fatal("a created revision's release is not remembered")
	}
	if _, err := h.Delete("sh.helm.release.v1.stack.v1"); err != nil {
		t.Fatal(err)
	}
	if names.wrote[key] {
		t.Error("a release whose revision was deleted is still remembered")
	}
	// A write that fails may still have reached the API server.
	if err := h.Update("sh.helm.release.v1.stack.v1", rel); err == nil {
		t.Fatal("updating a deleted revision succeeded")
	}
	if !names.wrote[key] {
		t.Error("a failed update left the release unremembered")
	}
}
