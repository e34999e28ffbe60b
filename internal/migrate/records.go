package migrate

import (
	"fmt"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/titanml/inference-stack-operator/operator/helmrecord"
)

// The old operator stores each revision's manifest as it rendered it, owner
// references to the ModelOrchestra included. A rollback to such a revision
// (helm rollback, by hand) would write those references back, to an owner
// that no longer exists, and the garbage collector would delete the
// objects, pods and all. So the stored manifests are adopted too: each
// reference to the ModelOrchestra becomes the stack's.

// adoptManifest returns the Secret payload of a release record (Helm's
// format: base64 of gzipped JSON) with every owner reference to old in its
// manifest replaced by owner, and whether anything changed.
func adoptManifest(payload []byte, old types.UID, owner metav1.OwnerReference) ([]byte, bool, error) {
	rel, err := decodeRecord(payload)
	if err != nil {
		return nil, false, err
	}
	if old == "" || !strings.Contains(rel.Manifest, string(old)) {
		return payload, false, nil
	}
	docs := releaseutil.SplitManifests(rel.Manifest)
	keys := make([]string, 0, len(docs))
	for k := range docs {
		keys = append(keys, k)
	}
	// SplitManifests numbers the documents in order (manifest-0, -1, ...).
	sort.Sort(releaseutil.BySplitManifestsOrder(keys))
	var out strings.Builder
	for _, k := range keys {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(docs[k]), &u.Object); err != nil {
			return nil, false, fmt.Errorf("reading the manifest of revision %d: %w", rel.Version, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if refs, changed := adoptedRefs(u.GetOwnerReferences(), old, owner); changed {
			u.SetOwnerReferences(refs)
		}
		doc, err := yaml.Marshal(u.Object)
		if err != nil {
			return nil, false, err
		}
		out.WriteString("---\n")
		out.Write(doc)
	}
	rel.Manifest = out.String()
	encoded, err := encodeRecord(rel)
	return encoded, true, err
}

// decodeRecord reads a record's payload, bounded as the operator bounds
// it: the namespace's editors can write Secrets that look like records.
func decodeRecord(payload []byte) (*release.Release, error) {
	return helmrecord.Decode(payload, helmrecord.MaxRecordBytes)
}

func encodeRecord(rel *release.Release) ([]byte, error) {
	return helmrecord.Encode(rel)
}
