package controller

import (
	"slices"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/event"

	inferencestackchart "github.com/titanml/inference-stack-operator/charts/inference-stack"
)

// An object's version changes with whatever a release sets on it, and
// with nothing the cluster's controllers write after it was applied; the
// watch of a release's objects lets through exactly the updates that
// change it.
func TestObjectVersion(t *testing.T) {
	controller := true
	deployment := func() *metav1.ObjectMeta {
		return &metav1.ObjectMeta{UID: "u1", Generation: 1, ResourceVersion: "10",
			Labels:          map[string]string{"app": "a", "app.kubernetes.io/managed-by": "Helm"},
			Annotations:     map[string]string{"meta.helm.sh/release-name": "s"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "models.takeoff.co/v1alpha1", Kind: "InferenceStack", Name: "s", UID: "stack", Controller: &controller}}}
	}
	base := objectVersion(deployment())
	// watched tells whether the drift watch lets the update from the
	// unchanged object to m through, both as the cache holds them.
	watched := func(m *metav1.ObjectMeta) bool {
		cached := func(m *metav1.ObjectMeta) *metav1.PartialObjectMetadata {
			o, _ := slimMetadata(&metav1.PartialObjectMetadata{ObjectMeta: *m.DeepCopy()})
			return o.(*metav1.PartialObjectMetadata)
		}
		return dependentChanged.Update(event.TypedUpdateEvent[*metav1.PartialObjectMetadata]{
			ObjectOld: cached(deployment()),
			ObjectNew: cached(m),
		})
	}
	same := map[string]func(*metav1.ObjectMeta){
		"a status write (new resourceVersion)":      func(m *metav1.ObjectMeta) { m.ResourceVersion = "11" },
		"the Deployment controller's revision":      func(m *metav1.ObjectMeta) { m.Annotations["deployment.kubernetes.io/revision"] = "1" },
		"a finalizer (not something a release set)": func(m *metav1.ObjectMeta) { m.Finalizers = []string{"x"} },
	}
	for what, change := range same {
		m := deployment()
		m.ResourceVersion = "12" // every write has a new one
		change(m)
		if got := objectVersion(m); got != base {
			t.Errorf("%s changed the version:\n%s\n%s", what, base, got)
		}
		if watched(m) {
			t.Errorf("%s went through the drift watch", what)
		}
	}
	differs := map[string]func(*metav1.ObjectMeta){
		"a spec change":         func(m *metav1.ObjectMeta) { m.Generation = 2 },
		"a label":               func(m *metav1.ObjectMeta) { m.Labels["app"] = "b" },
		"a removed label":       func(m *metav1.ObjectMeta) { delete(m.Labels, "app") },
		"an annotation":         func(m *metav1.ObjectMeta) { m.Annotations["x"] = "y" },
		"an owner reference":    func(m *metav1.ObjectMeta) { m.OwnerReferences = nil },
		"blockOwnerDeletion":    func(m *metav1.ObjectMeta) { m.OwnerReferences[0].BlockOwnerDeletion = &controller },
		"a re-created object":   func(m *metav1.ObjectMeta) { m.UID = "u2" },
		"the start of deletion": func(m *metav1.ObjectMeta) { m.DeletionTimestamp = &metav1.Time{} },
	}
	for what, change := range differs {
		m := deployment()
		m.ResourceVersion = "12"
		change(m)
		if got := objectVersion(m); got == base {
			t.Errorf("%s left the version as it was: %s", what, got)
		}
		if !watched(m) {
			t.Errorf("%s did not go through the drift watch", what)
		}
	}
	if watched(deployment()) {
		t.Error("a resync (the same resourceVersion) went through the drift watch")
	}
	// Without a generation (ConfigMaps), any write may be drift.
	cm := &metav1.ObjectMeta{UID: "u", ResourceVersion: "5"}
	before := objectVersion(cm)
	cm.ResourceVersion = "6"
	if objectVersion(cm) == before {
		t.Error("a write to a kind without a generation left its version as it was")
	}
}

func TestReleaseObjects(t *testing.T) {
	manifest := `---
# Source: x/templates/a.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: b
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: a
  namespace: ns
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: elsewhere
  namespace: other
---
apiVersion: v1
kind: Secret
metadata:
  name: not-the-charts
`
	refs, err := releaseObjects(manifest, "ns")
	if err != nil {
		t.Fatal(err)
	}
	// Only what Helm may act on (stackscope.go) is a release's object.
	want := []objectRef{
		{gvk: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, namespace: "ns", name: "a"},
		{gvk: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, namespace: "ns", name: "b"},
	}
	if !slices.Equal(refs, want) {
		t.Errorf("releaseObjects = %v, want %v", refs, want)
	}
	digest := func(versions map[string]string) (string, bool) {
		stack := &metav1.ObjectMeta{Name: "s", UID: "stack", Generation: 3}
		return verifiedDigest(stack, "facts", 1, refs, func(r objectRef) (string, bool) {
			v, ok := versions[r.name]
			return v, ok
		})
	}
	if _, ok := digest(map[string]string{"a": "1"}); ok {
		t.Error("a digest without the version of every object")
	}
	d1, _ := digest(map[string]string{"a": "1", "b": "1"})
	d2, _ := digest(map[string]string{"a": "1", "b": "2"})
	if d1 == "" || d1 == d2 {
		t.Errorf("digests of different versions: %q, %q", d1, d2)
	}
}

// The render facts name exactly the capabilities the chart asks about, so
// an unrelated CRD does not unsettle every stack, while one the chart
// reads (KEDA's) does.
func TestRenderFacts(t *testing.T) {
	chrt, err := inferencestackchart.Load()
	if err != nil {
		t.Fatal(err)
	}
	r, err := newRenderInputs("1.0.0", chrt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.allCaps || !slices.Contains(r.apis, "keda.sh/v1alpha1/ScaledObject") {
		t.Errorf("the chart's capabilities: all=%t apis=%v, want only keda.sh/v1alpha1/ScaledObject", r.allCaps, r.apis)
	}
	key := func(apis ...string) string {
		caps := &chartutil.Capabilities{APIVersions: append(chartutil.VersionSet{"v1", "apps/v1"}, apis...)}
		return r.capabilityFacts(caps)
	}
	if key() != key("example.com/v1") {
		t.Error("an API the chart does not ask about changed the facts")
	}
	if key() == key("keda.sh/v1alpha1/ScaledObject") {
		t.Error("KEDA's ScaledObject did not change the facts")
	}

	other, err := newRenderInputs("1.0.1", chrt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if other.build == r.build {
		t.Error("another operator version has the same build facts")
	}
	changed := *chrt
	changed.Templates = append(slices.Clone(chrt.Templates), &chart.File{Name: "templates/x.yaml", Data: []byte(`{{ .Capabilities.KubeVersion }}`)})
	all, err := newRenderInputs("1.0.0", &changed, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !all.allCaps || all.build == r.build {
		t.Errorf("a chart reading its capabilities otherwise: all=%t, same build %t", all.allCaps, all.build == r.build)
	}
}
