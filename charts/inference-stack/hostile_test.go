package inferencestack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/Masterminds/sprig/v3"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/titanml/inference-stack-operator/crds"
)

// hostilePayloads are strings that restructure YAML when written into it
// unquoted: a new key at a shallower indentation, a key of the same line,
// flow collections, a document separator, quotes, a comment, YAML's tags,
// anchors and block indicators.
var hostilePayloads = []string{
	// (No trailing newline: Helm trims the end of every manifest, so a
	// value's trailing line break is lost when it is the document's last.)
	"x\n  injected: true\ntemplate:\n  spec:\n    hostPID: true",
	"a: b",
	"{x: y}",
	"[1, 2]",
	"---\nkind: Pod",
	`x' "y`,
	"# not a comment",
	"*a &b !!binary | >",
}

// step is one step of a path into the spec: a property, a map key, or
// the first item of a list.
type step struct {
	prop  string
	key   bool
	index bool
}

// leaf is a string a tenant writes: a string value, or a key of a map
// whose keys are the tenant's (labels, annotations, applications, the
// free-form config maps).
type leaf struct {
	path   []step
	mapKey bool
}

func (l leaf) String() string {
	var b strings.Builder
	for _, s := range l.path {
		switch {
		case s.key:
			b.WriteString(".*")
		case s.index:
			b.WriteString("[0]")
		default:
			b.WriteString("." + s.prop)
		}
	}
	if l.mapKey {
		b.WriteString(" (key)")
	}
	return b.String()
}

// maxDepth bounds the walk into recursive-looking Kubernetes types.
const maxDepth = 14

// stringLeaves lists every string leaf and tenant-controlled map key of the
// schema s (the InferenceStack's spec, Kubernetes types included).
func stringLeaves(s *apiextensionsv1.JSONSchemaProps, path []step, out *[]leaf) {
	if len(path) > maxDepth {
		return
	}
	if s.XIntOrString || s.Type == "string" {
		*out = append(*out, leaf{path: slices.Clone(path)})
		return
	}
	switch s.Type {
	case "object":
		for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
			p := s.Properties[name]
			stringLeaves(&p, append(path, step{prop: name}), out)
		}
		if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
			*out = append(*out, leaf{path: slices.Clone(path), mapKey: true})
			stringLeaves(s.AdditionalProperties.Schema, append(path, step{key: true}), out)
		} else if s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields {
			*out = append(*out, leaf{path: slices.Clone(path), mapKey: true})
		}
	case "array":
		if s.Items != nil && s.Items.Schema != nil {
			stringLeaves(s.Items.Schema, append(path, step{index: true}), out)
		}
	}
}

// sample is a value of the schema that its pattern and enum accept.
func sample(s *apiextensionsv1.JSONSchemaProps, preferred string) any {
	if s.XIntOrString {
		return preferred
	}
	switch s.Type {
	case "string":
		if len(s.Enum) > 0 {
			var v string
			_ = yaml.Unmarshal(s.Enum[0].Raw, &v)
			return v
		}
		if s.Pattern == "" {
			return preferred
		}
		re := regexp.MustCompile(s.Pattern)
		for _, c := range []string{preferred, "a", "/a", "A", "sha256:" + strings.Repeat("0", 64)} {
			if re.MatchString(c) {
				return c
			}
		}
		return preferred
	case "integer", "number":
		if s.Minimum != nil && *s.Minimum > 1 {
			return int64(*s.Minimum)
		}
		return int64(1)
	case "boolean":
		return false
	case "array":
		return []any{}
	}
	return minimal(s)
}

// minimal is the smallest object of the schema: its required properties.
func minimal(s *apiextensionsv1.JSONSchemaProps) map[string]any {
	m := map[string]any{}
	for _, r := range s.Required {
		p := s.Properties[r]
		m[r] = sample(&p, "a")
	}
	return m
}

// document builds the spec that sets one leaf to value (or, for a map
// key, a key to value), with what every object on the way requires, and
// what makes the chart render that part: an application for the
// template, an enabled ingress with a host, enabled scaling.
func document(spec *apiextensionsv1.JSONSchemaProps, l leaf, value string) map[string]any {
	root := minimal(spec)
	var cur any = root
	setCur := func(any) {}
	s := spec
	for i, st := range l.path {
		last := i == len(l.path)-1
		var next *apiextensionsv1.JSONSchemaProps
		switch {
		case st.index:
			next = s.Items.Schema
		case st.key:
			next = s.AdditionalProperties.Schema
		default:
			p := s.Properties[st.prop]
			next = &p
		}
		var v any
		switch {
		case last && !l.mapKey:
			v = value
		case next.Type == "array":
			v = []any{}
		case next.Type == "object":
			v = minimal(next)
		default:
			v = sample(next, "a")
		}
		var setChild func(any)
		if st.index {
			arr := []any{v}
			setCur(arr)
			setChild = func(x any) { arr[0] = x }
		} else {
			m := cur.(map[string]any)
			k := st.prop
			if st.key {
				k = mapKeyAt(l.path, i)
			}
			if existing, ok := m[k].(map[string]any); ok && !last {
				v = existing
			}
			m[k] = v
			setChild = func(x any) { m[k] = x }
		}
		cur, setCur, s = v, setChild, next
	}
	if l.mapKey {
		var entry any = "v"
		if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
			entry = sample(s.AdditionalProperties.Schema, "v")
		}
		setCur(map[string]any{value: entry})
	}
	enableRendering(root, l)
	return root
}

// mapKeyAt is the key a document uses for the map step i of path: "app"
// for an application, "k" elsewhere.
func mapKeyAt(path []step, i int) string {
	if i > 0 && path[i-1].prop == "applications" {
		return "app"
	}
	return "k"
}

// enableRendering switches on what renders the leaf's part of the chart.
func enableRendering(root map[string]any, l leaf) {
	first := ""
	if len(l.path) > 0 {
		first = l.path[0].prop
	}
	if first == "applicationTemplate" {
		if _, ok := root["applications"]; !ok {
			root["applications"] = map[string]any{"app": map[string]any{}}
		}
	}
	section := func(name string) map[string]any {
		m, _ := root[name].(map[string]any)
		if m == nil {
			return nil
		}
		if name == "applications" {
			m, _ = m["app"].(map[string]any)
		}
		return m
	}
	for _, name := range []string{"gateway", "applicationTemplate", "applications"} {
		sec := section(name)
		if sec == nil {
			continue
		}
		if ing, ok := sec["ingress"].(map[string]any); ok {
			ing["enabled"] = true
			if _, ok := ing["hosts"]; !ok {
				ing["hosts"] = []any{map[string]any{"host": "h.example"}}
			}
		}
		if sc, ok := sec["scaling"].(map[string]any); ok {
			sc["enabled"] = true
			if _, ok := sc["metricTarget"]; !ok {
				sc["metricTarget"] = map[string]any{"value": int64(1)}
			}
			delete(sec, "replicaCount")
		}
	}
}

// renderer renders the chart for values as the operator does: values
// checked against values.schema.json (compiled once), then the templates,
// without a release.
type renderer struct {
	chart  *chart.Chart
	schema *jsonschema.Schema
	caps   *chartutil.Capabilities
}

func newRenderer(t *testing.T) *renderer {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(c.Schema))
	if err != nil {
		t.Fatal(err)
	}
	compiler := jsonschema.NewCompiler()
	if err := compiler.AddResource("file:///values.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	schema, err := compiler.Compile("file:///values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *kubeVersion
	caps.APIVersions = append(caps.APIVersions, "keda.sh/v1alpha1", "keda.sh/v1alpha1/ScaledObject")
	return &renderer{chart: c, schema: schema, caps: caps}
}

// refusal is a render error that refuses the values on purpose: the values
// schema, or the chart's own fail. Any other error (a rendered document
// that is not YAML, an object rendered twice) means a value broke the
// chart's structure.
type refusal struct{ error }

// render returns the rendered objects by Kind/name, each decoded; a
// ConfigMap's config.yaml is decoded too (its structure counts).
func (r *renderer) render(vals map[string]any) (map[string]any, error) {
	// The values schema sees what a stack's spec would be: JSON.
	raw, err := json.Marshal(vals)
	if err != nil {
		return nil, err
	}
	var asJSON any
	if err := json.Unmarshal(raw, &asJSON); err != nil {
		return nil, err
	}
	if err := r.schema.Validate(asJSON); err != nil {
		return nil, refusal{err}
	}
	rv, err := chartutil.ToRenderValuesWithSchemaValidation(r.chart, asJSON.(map[string]any),
		chartutil.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true, Revision: 1}, r.caps, true)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(r.chart, rv)
	if err != nil {
		if strings.Contains(err.Error(), "inference-stack: ") {
			return nil, refusal{err} // the chart's own fail
		}
		return nil, err
	}
	out := map[string]any{}
	for name, content := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		for _, doc := range releaseutil.SplitManifests(content) {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				return nil, fmt.Errorf("%s renders a document that is not YAML: %w", name, err)
			}
			if len(obj) == 0 {
				continue
			}
			md, _ := obj["metadata"].(map[string]any)
			key := fmt.Sprintf("%v/%v", obj["kind"], md["name"])
			if _, dup := out[key]; dup {
				return nil, fmt.Errorf("%s rendered twice", key)
			}
			if data, ok := obj["data"].(map[string]any); ok {
				if cfg, ok := data["config.yaml"].(string); ok {
					var parsed any
					if err := yaml.Unmarshal([]byte(cfg), &parsed); err != nil {
						return nil, fmt.Errorf("%s: config.yaml is not YAML: %w", key, err)
					}
					data["config.yaml"] = parsed
				}
			}
			out[key] = obj
		}
	}
	return out, nil
}

// shape flattens rendered objects to "object|key.path" → the values found
// there, with the marker and the payload in object names and keys
// replaced by ⟨v⟩, and list indices dropped: the chart orders some lists
// by map key, so a hostile key may sort elsewhere.
func shape(objs map[string]any, marker, payload string) map[string][]string {
	// The free-form config maps are written with snake_case keys.
	snake := sprig.TxtFuncMap()["snakecase"].(func(string) string)
	norm := func(s string) string {
		if payload != "" {
			s = strings.ReplaceAll(strings.ReplaceAll(s, payload, "⟨v⟩"), snake(payload), "⟨v⟩")
		}
		return strings.ReplaceAll(s, marker, "⟨v⟩")
	}
	out := map[string][]string{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if len(v) == 0 {
				out[prefix] = append(out[prefix], "{}")
			}
			for k, x := range v {
				walk(prefix+"."+norm(k), x)
			}
		case []any:
			if len(v) == 0 {
				out[prefix] = append(out[prefix], "[]")
			}
			for _, x := range v {
				walk(prefix+"[]", x)
			}
		default:
			out[prefix] = append(out[prefix], fmt.Sprint(v))
		}
	}
	for key, obj := range objs {
		walk(norm(key)+"|", obj)
	}
	return out
}

// TestHostileStrings: for every string and tenant-controlled map key of the
// InferenceStack's spec (walked from the CRD's schema, Kubernetes types
// included), each hostile payload either is refused (by the values schema
// or the chart) or renders as that string: the same objects with the same
// keys as a benign value, the payload itself wherever the benign value
// appeared. Leaves are rendered in groups (one per field of the gateway,
// the template or an application): a group whose document is refused is
// tried leaf by leaf, so a refused leaf never hides another.
func TestHostileStrings(t *testing.T) {
	crd, err := crds.InferenceStack()
	if err != nil {
		t.Fatal(err)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	var leaves []leaf
	stringLeaves(&spec, nil, &leaves)
	r := newRenderer(t)
	const marker = "benignvalue"

	var groups [][]leaf
	index := map[string]int{}
	for _, l := range leaves {
		key := groupKey(l)
		i, ok := index[key]
		if !ok {
			i = len(groups)
			index[key] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], l)
	}

	var (
		mu                         sync.Mutex
		renders, rendered, refused int
	)
	// check renders the leaves with the payload and compares with the
	// benign render; it returns false when the hostile document is
	// refused.
	check := func(ls []leaf, payload string) (ok bool, problems []string) {
		benign, berr := r.render(merged(&spec, ls, marker))
		got, err := r.render(merged(&spec, ls, payload))
		mu.Lock()
		renders += 2
		mu.Unlock()
		var refused refusal
		switch {
		case errors.As(err, &refused):
			// Refused. (Where the benign value is refused too, the field
			// takes only an enum or a pattern, which no payload matches.)
			return false, nil
		case err != nil:
			return true, []string{fmt.Sprintf("payload %q breaks the chart's output: %v", payload, err)}
		case berr != nil:
			return true, []string{fmt.Sprintf("payload %q renders where the benign value %q is refused (%v)", payload, marker, berr)}
		}
		want, have := shape(benign, marker, ""), shape(got, marker, payload)
		if d1, d2 := missing(want, have), missing(have, want); len(d1)+len(d2) > 0 {
			return true, []string{fmt.Sprintf("payload %q changes what is rendered:\n  only benign: %v\n  only hostile: %v", payload, d1, d2)}
		}
		for k, vs := range want {
			for range count(vs, marker) {
				if count(have[k], payload) < count(vs, marker) {
					problems = append(problems, fmt.Sprintf("payload %q renders at %s as %q", payload, k, have[k]))
					break
				}
			}
		}
		return true, problems
	}

	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for _, g := range groups {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var problems []string
			add := func(ls []leaf, ps []string) {
				for _, p := range ps {
					problems = append(problems, fmt.Sprintf("%s: %s", ls[0], p))
				}
			}
			for _, payload := range hostilePayloads {
				ok, ps := check(g, payload)
				if ok {
					add(g, ps)
					mu.Lock()
					rendered += len(g)
					mu.Unlock()
					continue
				}
				for _, l := range g {
					ok, ps := check([]leaf{l}, payload)
					mu.Lock()
					if ok {
						rendered++
					} else {
						refused++
					}
					mu.Unlock()
					add([]leaf{l}, ps)
				}
			}
			for _, p := range problems {
				t.Error(p)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d leaves in %d groups × %d payloads (%d renders): %d rendered as the string itself, %d refused by the schema or the chart",
		len(leaves), len(groups), len(hostilePayloads), renders, rendered, refused)
	if rendered+refused != len(leaves)*len(hostilePayloads) {
		t.Errorf("%d cases judged, want %d", rendered+refused, len(leaves)*len(hostilePayloads))
	}
}

// groupKey puts a leaf with the others under the same field of the
// gateway, the template or an application (or of the spec).
func groupKey(l leaf) string {
	n := 2
	if len(l.path) > 1 && l.path[0].prop == "applications" {
		n = 3
	}
	n = min(n, len(l.path))
	return leaf{path: l.path[:n]}.String()
}

// merged is the documents of the leaves merged into one.
func merged(spec *apiextensionsv1.JSONSchemaProps, ls []leaf, value string) map[string]any {
	out := map[string]any{}
	for _, l := range ls {
		mergeInto(out, document(spec, l, value))
	}
	return out
}

// mergeInto merges src into dst: maps key by key, lists item by item,
// other values from src where dst has none or src has the leaf's value.
func mergeInto(dst, src map[string]any) {
	for k, v := range src {
		dv, ok := dst[k]
		if !ok {
			dst[k] = v
			continue
		}
		switch v := v.(type) {
		case map[string]any:
			if dm, ok := dv.(map[string]any); ok {
				mergeInto(dm, v)
				continue
			}
			dst[k] = v
		case []any:
			dl, ok := dv.([]any)
			if !ok || len(dl) == 0 {
				dst[k] = v
				continue
			}
			for i := range v {
				if i >= len(dl) {
					dl = append(dl, v[i])
					continue
				}
				if dm, ok := dl[i].(map[string]any); ok {
					if sm, ok := v[i].(map[string]any); ok {
						mergeInto(dm, sm)
						continue
					}
				}
				dl[i] = v[i]
			}
			dst[k] = dl
		default:
			if s, ok := dv.(string); !ok || s == "a" || s == "v" {
				dst[k] = v
			}
		}
	}
}

func count(vs []string, s string) int {
	n := 0
	for _, v := range vs {
		if v == s {
			n++
		}
	}
	return n
}

// missing lists the paths of a that b does not have as often.
func missing(a, b map[string][]string) []string {
	var out []string
	for k, vs := range a {
		if len(b[k]) < len(vs) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	if len(out) > 8 {
		out = append(out[:8], fmt.Sprintf("… %d more", len(out)-8))
	}
	return out
}

func BenchmarkRender(b *testing.B) {
	t := &testing.T{}
	r := newRenderer(t)
	vals := map[string]any{"gateway": map[string]any{"nodeSelector": map[string]any{"a": "b"}}}
	for b.Loop() {
		if _, err := r.render(vals); err != nil {
			b.Fatal(err)
		}
	}
}
