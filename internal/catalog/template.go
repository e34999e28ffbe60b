// Package catalog turns the semver catalog template
// (catalog/operator_catalog.yaml), the rendered entries of released bundles
// (catalog/released/) and the bundle being built into a validated
// file-based catalog, fully offline: released bundles are never pulled, the
// current bundle is rendered from its directory, and every bundle is
// referenced by its canonical digest.
package catalog

import (
	"bytes"
	"fmt"
	"strings"

	semvertemplate "github.com/operator-framework/operator-registry/alpha/template/semver"
	"gopkg.in/yaml.v3"
	sigsyaml "sigs.k8s.io/yaml"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/internal/oci"
)

// TemplatePath is the semver template, relative to the repository root.
const TemplatePath = "catalog/operator_catalog.yaml"

// Archetypes are the semver template's channel archetypes, least stable
// first.
var Archetypes = []string{inferencestack.Candidate, inferencestack.Fast, inferencestack.Stable}

// Template is a parsed and checked semver template.
type Template struct {
	Data semvertemplate.SemverTemplateData
	// Refs maps archetype to its bundle references, in file order.
	Refs map[string][]oci.Digest
}

// ParseTemplate parses data exactly as operator-registry does (strictly:
// unknown keys are errors) and checks that every bundle is a canonical digest
// reference, listed at most once per channel archetype.
func ParseTemplate(data []byte) (*Template, error) {
	var d semvertemplate.SemverTemplateData
	if err := sigsyaml.UnmarshalStrict(data, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", TemplatePath, err)
	}
	if d.Schema != "olm.semver" {
		return nil, fmt.Errorf("%s: Schema is %q, want \"olm.semver\"", TemplatePath, d.Schema)
	}
	t := &Template{Data: d, Refs: map[string][]oci.Digest{}}
	lists := map[string][]string{}
	for _, b := range d.Candidate.Bundles {
		lists["candidate"] = append(lists["candidate"], b.Image)
	}
	for _, b := range d.Fast.Bundles {
		lists["fast"] = append(lists["fast"], b.Image)
	}
	for _, b := range d.Stable.Bundles {
		lists["stable"] = append(lists["stable"], b.Image)
	}
	var errs []string
	for _, a := range Archetypes {
		seen := map[string]bool{}
		for i, img := range lists[a] {
			ref, err := oci.ParseDigest(img)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s.Bundles[%d]: %v", title(a), i, err))
				continue
			}
			if seen[ref.String()] {
				errs = append(errs, fmt.Sprintf("%s.Bundles[%d]: %s is listed twice", title(a), i, img))
			}
			seen[ref.String()] = true
			t.Refs[a] = append(t.Refs[a], ref)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s:\n  - %s", TemplatePath, strings.Join(errs, "\n  - "))
	}
	return t, nil
}

// AllRefs returns every distinct reference of the template, in archetype
// then file order.
func (t *Template) AllRefs() []oci.Digest {
	var out []oci.Digest
	seen := map[string]bool{}
	for _, a := range Archetypes {
		for _, r := range t.Refs[a] {
			if !seen[r.String()] {
				seen[r.String()] = true
				out = append(out, r)
			}
		}
	}
	return out
}

// Contains reports whether ref is listed under any archetype.
func (t *Template) Contains(ref oci.Digest) bool {
	for _, a := range Archetypes {
		for _, r := range t.Refs[a] {
			if r == ref {
				return true
			}
		}
	}
	return false
}

// ParseArchetypes validates a comma-separated archetype list
// ("stable,fast").
func ParseArchetypes(s string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		if f == "" {
			continue
		}
		ok := false
		for _, a := range Archetypes {
			ok = ok || a == f
		}
		if !ok {
			return nil, fmt.Errorf("unknown channel archetype %q (want some of candidate, fast, stable)", f)
		}
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no channel archetype given (want some of candidate, fast, stable)")
	}
	return out, nil
}

// AddBundle appends `- Image: <ref>` to the Bundles list of each archetype in
// the template source data, keeping its comments, and returns the new
// source. Archetypes already listing ref are left alone; missing archetype
// sections are created.
func AddBundle(data []byte, ref oci.Digest, archetypes []string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", TemplatePath, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: not a YAML mapping", TemplatePath)
	}
	root := doc.Content[0]
	for _, a := range archetypes {
		section := mapValue(root, a)
		if section == nil || section.Kind != yaml.MappingNode {
			section = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			setMapValue(root, title(a), section)
		}
		list := mapValue(section, "bundles")
		if list == nil || list.Kind != yaml.SequenceNode {
			list = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
			setMapValue(section, "Bundles", list)
		}
		list.Style = 0
		present := false
		for _, item := range list.Content {
			if img := mapValue(item, "image"); img != nil && img.Value == ref.String() {
				present = true
			}
		}
		if present {
			continue
		}
		list.Content = append(list.Content, &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: "Image"},
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: ref.String()},
		}})
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w", TemplatePath, err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("%s: %w", TemplatePath, err)
	}
	if _, err := ParseTemplate(buf.Bytes()); err != nil {
		return nil, fmt.Errorf("internal error: edited template does not parse: %w", err)
	}
	return buf.Bytes(), nil
}

// WithoutBundles returns the template source with every Bundles list
// emptied (its other settings kept).
func WithoutBundles(data []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", TemplatePath, err)
	}
	if len(doc.Content) != 1 {
		return nil, fmt.Errorf("%s: not a YAML document", TemplatePath)
	}
	for _, a := range Archetypes {
		if list := mapValue(mapValue(doc.Content[0], a), "bundles"); list != nil {
			list.Kind, list.Tag, list.Content, list.Value = yaml.SequenceNode, "!!seq", nil, ""
		}
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", TemplatePath, err)
	}
	if _, err := ParseTemplate(out); err != nil {
		return nil, err
	}
	return out, nil
}

// mapValue finds key in a mapping node, case-insensitively (as the
// template's JSON decoding does).
func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if strings.EqualFold(m.Content[i].Value, key) {
			return m.Content[i+1]
		}
	}
	return nil
}

func setMapValue(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if strings.EqualFold(m.Content[i].Value, key) {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
}

func title(a string) string { return strings.ToUpper(a[:1]) + a[1:] }
