package controller

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"

	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
)

// A release record's manifest is what Helm parses, builds and patches
// from, with the operator's power and inside its process, before the
// stack's scope (stackscope.go) sees a single object: what it costs to
// parse and build must be bounded, and nothing in it may reach the parts
// of Helm and the Kubernetes libraries that were never written for hostile
// input. So before Helm reads a record's manifest, the manifest must be
// one the chart could have rendered in shape (checkManifest):
//
//   - at most maxManifestDocuments documents, split as Helm's builder
//     splits them: each costs a REST mapping (for an unknown group, a
//     discovery request under the manager's mapper lock) and a client;
//   - no YAML anchor or alias: the chart writes none, and aliases expand,
//     in every parser the manifest meets, to far more than the record's
//     size (a 68 KB document made 59 MB of JSON);
//   - no null in a list, no key twice in a mapping, no two keys of a
//     mapping that differ only in case: Kubernetes objects have none, and
//     the strategic merge patch Helm computes panics on a null list
//     element (in Helm's own goroutine, where no recovery reaches);
//   - only the chart's kinds (exact apiVersion and kind keys), no List (a
//     document with items), each in the stack's namespace or none.
//
// A record that fails is refused whole, naming the Secret to delete: its
// stack's release fails, and nothing else.

// chartDocuments is the most the chart renders: five objects for the
// gateway and four per application, for at most 32 applications.
const chartDocuments = 5 + 4*32

// maxManifestDocuments bounds a record's documents, with room to spare.
const maxManifestDocuments = 2 * chartDocuments

// checkManifest refuses a manifest the chart could not have rendered in
// shape (see above); namespace is the stack's.
func checkManifest(manifest, namespace string) error {
	r := k8syaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	docs := 0
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading its manifest: %w", err)
		}
		var root yaml.Node
		if err := yaml.Unmarshal(doc, &root); err != nil {
			return fmt.Errorf("its manifest's document %d is not YAML: %w", docs+1, err)
		}
		if len(root.Content) == 0 {
			continue // comments only, or nothing: Helm skips it too
		}
		docs++
		if docs > maxManifestDocuments {
			return fmt.Errorf("its manifest has more than %d documents; the chart renders at most %d", maxManifestDocuments, chartDocuments)
		}
		// The object first (its exact keys, which a node tree reads
		// without expanding anything), then the rest of its shape.
		if err := checkObject(root.Content[0], namespace); err != nil {
			return fmt.Errorf("its manifest's document %d: %w", docs, err)
		}
		if err := checkShape(root.Content[0], ""); err != nil {
			return fmt.Errorf("its manifest's document %d: %w", docs, err)
		}
	}
}

// checkShape refuses anchors, aliases, nulls in lists and mappings with a
// key twice (or twice but for case) anywhere under n.
func checkShape(n *yaml.Node, path string) error {
	if n.Anchor != "" || n.Kind == yaml.AliasNode {
		return fmt.Errorf("%s: a YAML anchor or alias, which the chart never writes", where(path))
	}
	switch n.Kind {
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if c.Kind == yaml.ScalarNode && c.Tag == "!!null" {
				return fmt.Errorf("%s: null in a list", where(p))
			}
			if err := checkShape(c, p); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		seen := map[string]string{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				return fmt.Errorf("%s: a key that is not a string", where(path))
			}
			if prev, ok := seen[fold(k.Value)]; ok {
				return fmt.Errorf("%s: keys %q and %q in one mapping", where(path), prev, k.Value)
			}
			seen[fold(k.Value)] = k.Value
			if err := checkShape(n.Content[i+1], path+"."+k.Value); err != nil {
				return err
			}
		}
	}
	return nil
}

// fold maps s to one spelling of all the strings that equal it but for
// case, as a case-insensitive parser (encoding/json's field matching,
// strings.EqualFold) takes them: "namespace" and "nameſpace" (U+017F),
// "kind" and "Kind" (U+212A) are one.
func fold(s string) string {
	return strings.Map(func(r rune) rune {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		return least
	}, s)
}

func where(path string) string {
	if path == "" {
		return "the document"
	}
	return strings.TrimPrefix(path, ".")
}

// checkObject refuses a document that is not one object of the chart's
// kinds in namespace (or none), read by its exact keys as Helm reads it.
func checkObject(n *yaml.Node, namespace string) error {
	if n.Kind != yaml.MappingNode {
		return errors.New("not an object")
	}
	apiVersion, kind := scalar(n, "apiVersion"), scalar(n, "kind")
	if field(n, "items") != nil {
		return fmt.Errorf("%s %s with items: a List, which the chart never renders", apiVersion, kind)
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil || kind == "" || !chartKind(gv.WithKind(kind).GroupKind()) {
		return fmt.Errorf("apiVersion %q kind %q: not a kind the chart renders", apiVersion, kind)
	}
	meta := field(n, "metadata")
	if meta == nil || meta.Kind != yaml.MappingNode || scalar(meta, "name") == "" {
		return fmt.Errorf("%s without a name", kind)
	}
	if ns := scalar(meta, "namespace"); ns != "" && ns != namespace {
		return fmt.Errorf("%s %s in namespace %s, not the stack's", kind, scalar(meta, "name"), ns)
	}
	return nil
}

// field is the value of key in mapping n (exact key), or nil.
func field(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// scalar is the string value of key in mapping n, "" if none or not a
// scalar.
func scalar(n *yaml.Node, key string) string {
	if v := field(n, key); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}
