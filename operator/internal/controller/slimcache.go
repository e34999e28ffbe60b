package controller

import (
	"encoding/hex"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What the operator caches of objects a tenant can write (Secrets labelled
// as Helm releases, objects labelled as Helm's, in every namespace it
// watches) is only what it reads: a tenant's labels, annotations, owner
// references and finalizers would otherwise stay in the operator's memory
// as long as the objects live, as large as the API server lets them be.
// The caches keep, of an object's metadata:
//
//   - its name, namespace, UID, resourceVersion, generation and deletion;
//   - its controller reference (events find the stack by it);
//   - the labels the operator selects or reads by (keptLabels);
//   - what objectVersion makes of the rest, as one annotation, so that a
//     change to any of it still shows (drift, the verified digest).
//
// A tenant's metadata then costs the operator a few hundred bytes per
// object, whatever its size.

// cachedVersionAnnotation holds objectVersion in a cached object. Only the
// caches write it (slimMetadata replaces every annotation), so a live
// object carrying it proves nothing: objectVersion is computed for those.
const cachedVersionAnnotation = "models.takeoff.co/cached-version"

// keptLabels are the labels the operator reads of a cached object: Helm's
// release labels of a release Secret, and this operator's claim.
var keptLabels = []string{"owner", "name", "status", "version", ReconciledByLabel}

// slimMetadata is the transform of every cache of tenant-written objects
// (see above).
func slimMetadata(obj any) (any, error) {
	m, err := meta.Accessor(obj)
	if err != nil || slimmed(m) {
		return obj, nil
	}
	version := objectVersion(m)
	m.SetManagedFields(nil)
	var kept map[string]string
	for _, k := range keptLabels {
		if v, ok := m.GetLabels()[k]; ok {
			if kept == nil {
				kept = map[string]string{}
			}
			kept[k] = v
		}
	}
	m.SetLabels(kept)
	m.SetAnnotations(map[string]string{cachedVersionAnnotation: version})
	var owners []metav1.OwnerReference
	if c := metav1.GetControllerOfNoCopy(m); c != nil {
		owners = []metav1.OwnerReference{*c}
	}
	m.SetOwnerReferences(owners)
	m.SetFinalizers(nil)
	return obj, nil
}

// slimMetadataOnly is the cache's default transform: slimMetadata for the
// metadata-only views (the Helm-labelled objects of the chart's kinds,
// which the dependent watches and Helm's reads use), managed fields
// stripped from anything else.
func slimMetadataOnly(obj any) (any, error) {
	if _, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return slimMetadata(obj)
	}
	if m, err := meta.Accessor(obj); err == nil && m.GetManagedFields() != nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// slimmed tells whether m is already as slimMetadata leaves it: an
// informer passes the objects it holds to its transform again when it
// relists, and the version must not be computed from what is left of
// them. Whoever may write an object can give it our annotation alone
// and clear its managed fields, but not a value of objectVersion's shape
// for the object's own UID, generation and resourceVersion (see
// versionShaped).
func slimmed(m metav1.Object) bool {
	a := m.GetAnnotations()
	v, ok := a[cachedVersionAnnotation]
	if !ok || len(a) != 1 || !versionShaped(m, v) || len(m.GetManagedFields()) > 0 || len(m.GetOwnerReferences()) > 1 || len(m.GetFinalizers()) > 0 {
		return false
	}
	for k := range m.GetLabels() {
		if !slices.Contains(keptLabels, k) {
			return false
		}
	}
	return true
}

// versionShaped tells whether v is what objectVersion writes for m: an
// API server can return an object carrying the annotation (anyone who may
// write the object may set it, and clear its managed fields), but not one
// whose value is of this shape for that object's own UID, generation and
// resourceVersion, and bounded: a tenant cannot make the cache keep a
// large value for an object as if it were already slimmed.
func versionShaped(m metav1.Object, v string) bool {
	if m.GetGeneration() == 0 {
		return v == versionHead(m)
	}
	digest, ok := strings.CutPrefix(v, versionHead(m))
	if !ok || len(digest) != 2*versionDigestBytes {
		return false
	}
	_, err := hex.DecodeString(digest)
	return err == nil
}

// cachedVersion is objectVersion of an object as the caches hold it.
func cachedVersion(m metav1.Object) string {
	if v, ok := m.GetAnnotations()[cachedVersionAnnotation]; ok && len(m.GetAnnotations()) == 1 {
		return v
	}
	// Not from a cache that slims (none such today): computed as it is.
	return objectVersion(m)
}
