package controller

import (
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A cached object keeps what the operator reads, and its version, and
// nothing else of a tenant's metadata, however large.
func TestSlimMetadata(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	secret := func() *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1.s.v1", Namespace: "tenant", UID: "u", ResourceVersion: "7",
				Labels: map[string]string{"owner": "helm", "name": "s", "status": "deployed", "version": "1", ReconciledByLabel: "v0",
					"padding": huge[:63]},
				Annotations: map[string]string{"padding": huge},
				Finalizers:  []string{"example.com/" + huge[:200]},
				OwnerReferences: []metav1.OwnerReference{
					{APIVersion: "v1", Kind: "ConfigMap", Name: huge[:253], UID: "x"},
					{APIVersion: "models.takeoff.co/v1alpha1", Kind: "InferenceStack", Name: "s", UID: "stack", Controller: ptr.To(true)},
				},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: huge[:100]}},
			}}
	}
	want := objectVersion(secret())
	o, err := slimMetadata(secret())
	if err != nil {
		t.Fatal(err)
	}
	got := o.(*metav1.PartialObjectMetadata)
	if cachedVersion(got) != want {
		t.Errorf("cached version %q, want %q", cachedVersion(got), want)
	}
	// An informer hands the objects it holds to its transform again when
	// it relists: the second pass changes nothing.
	again, _ := slimMetadata(got.DeepCopy())
	if v := cachedVersion(again.(*metav1.PartialObjectMetadata)); v != want {
		t.Errorf("transformed twice, the cached version is %q, want %q", v, want)
	}
	if len(got.Labels) != 5 || got.Labels["padding"] != "" || got.Labels["version"] != "1" || got.Labels[ReconciledByLabel] != "v0" {
		t.Errorf("labels %v", got.Labels)
	}
	if c := metav1.GetControllerOf(got); len(got.OwnerReferences) != 1 || c == nil || c.UID != "stack" {
		t.Errorf("owner references %v", got.OwnerReferences)
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 1024 {
		t.Errorf("a Secret with a MiB of metadata is %d bytes cached: %s", len(b), b)
	}

	// A Deployment (with a generation) keeps its version through the
	// Deployments' own transform; a change of a stripped label shows.
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "tenant", UID: "d", Generation: 3,
		Labels: map[string]string{"app.kubernetes.io/managed-by": "Helm", "team": "a"}}}
	before := objectVersion(d)
	o, _ = slimDeployment(d.DeepCopy())
	if v := cachedVersion(o.(*appsv1.Deployment)); v != before {
		t.Errorf("deployment: cached %q, want %q", v, before)
	}
	d.Labels["team"] = "b"
	o, _ = slimDeployment(d.DeepCopy())
	if cachedVersion(o.(*appsv1.Deployment)) == before {
		t.Error("a changed label left the cached version as it was")
	}

	// A live object whose only annotation is ours, with a large value and
	// no managed fields (a tenant can write both), is slimmed, not taken
	// for slimmed: the cache keeps its computed version.
	bloated := secret()
	bloated.Labels = map[string]string{"owner": "helm"}
	bloated.OwnerReferences, bloated.ManagedFields = nil, nil
	bloated.Annotations = map[string]string{cachedVersionAnnotation: huge[:250<<10]}
	o, _ = slimMetadata(bloated)
	if v := cachedVersion(o.(*metav1.PartialObjectMetadata)); v != "uid=u rv=7" {
		t.Errorf("a live object with our annotation was cached with version of %d bytes", len(v))
	}
	// Nor one with finalizers.
	finalized, _ := slimMetadata(secret())
	finalized.(*metav1.PartialObjectMetadata).Finalizers = []string{"example.com/" + huge[:200]}
	if slimmed(finalized.(*metav1.PartialObjectMetadata)) {
		t.Error("an object with finalizers was taken for slimmed")
	}

	// A live object carrying the annotation proves nothing: its version is
	// computed.
	forged := secret()
	forged.Generation = 1
	forged.Annotations = map[string]string{cachedVersionAnnotation: "uid=u generation=1 deleting=false metadata=00"}
	if objectVersion(forged) == forged.Annotations[cachedVersionAnnotation] {
		t.Error("objectVersion took a live object's annotation")
	}
}

// A panic in what Helm's writes call becomes the write's error.
func TestRecovered(t *testing.T) {
	write := func() (err error) {
		defer recovered(&err, "updating the release's objects")
		var m map[string]int
		m["x"]++ // a nil map: panics
		return nil
	}
	if err := write(); err == nil || !strings.Contains(err.Error(), "updating the release's objects") {
		t.Errorf("a panicking write returned %v", err)
	}
}
