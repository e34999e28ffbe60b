package main

import (
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/titanml/inference-stack-operator/operator/api/v1alpha1"
)

// postProcessCRD drops descriptions inside embedded Kubernetes types and
// nothing else: every validation keyword stays, and the InferenceStack's own
// fields (and the fields that embed a Kubernetes type) keep theirs.
func TestPostProcessOnlyDropsEmbeddedDescriptions(t *testing.T) {
	committed, err := os.ReadFile("../../crds/models.takeoff.co_inferencestacks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var in map[string]any
	if err := yaml.Unmarshal(committed, &in); err != nil {
		t.Fatal(err)
	}
	spec := func(m map[string]any) map[string]any {
		v := m["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)
		return v["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)["properties"].(map[string]any)["spec"].(map[string]any)
	}
	at := func(m map[string]any, path ...string) map[string]any {
		t.Helper()
		cur := spec(m)
		for _, p := range path {
			next, ok := cur[p].(map[string]any)
			if !ok {
				t.Fatalf("no %s in %v", p, path)
			}
			cur = next
		}
		return cur
	}
	// Plant what controller-gen writes: an upstream description deep inside
	// a Kubernetes type, and the metadata schema it does not limit.
	volName := func(m map[string]any) map[string]any {
		return at(m, "properties", "gateway", "properties", "volumes", "items", "properties", "name")
	}
	volName(in)["description"] = "name of the volume (upstream text)"
	in["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)["properties"].(map[string]any)["metadata"] = map[string]any{"type": "object"}
	raw, err := yaml.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := postProcessCRD(raw)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != string(committed) {
		t.Error("post-processing the planted CRD does not give the committed one")
	}
	var got map[string]any
	if err := yaml.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if _, ok := volName(got)["description"]; ok {
		t.Error("a description inside corev1.Volume survived")
	}
	for _, path := range [][]string{
		{"properties", "applications"},
		{"properties", "applications", "additionalProperties", "properties", "readerConfig", "properties", "tensorParallel"},
		{"properties", "gateway", "properties", "volumes"},                  // embeds []corev1.Volume
		{"properties", "applicationTemplate", "properties", "modelsVolume"}, // embeds corev1.VolumeSource
		{"properties", "gateway", "properties", "livenessProbe"},
	} {
		if d, _ := at(got, path...)["description"].(string); d == "" {
			t.Errorf("%s lost its description", strings.Join(path, "."))
		}
	}
	// Without descriptions, input and output are the same schema.
	strip(in)
	strip(got)
	meta := got["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)["properties"].(map[string]any)
	if want := map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string", "maxLength": float64(v1alpha1.MaxStackName)}}}; !reflect.DeepEqual(meta["metadata"], want) {
		t.Errorf("metadata schema = %v, want %v", meta["metadata"], want)
	}
	meta["metadata"] = map[string]any{"type": "object"}
	if !reflect.DeepEqual(in, got) {
		t.Error("post-processing changed more than descriptions and metadata.name")
	}
}

func strip(v any) {
	switch v := v.(type) {
	case map[string]any:
		delete(v, "description")
		for _, c := range v {
			strip(c)
		}
	case []any:
		for _, c := range v {
			strip(c)
		}
	}
}

// Every string, list and map of the spec is bounded (v1alpha1's bounds.go):
// no string holds more than v1alpha1.MaxValue characters, and no list or
// map of strings more than v1alpha1.MaxValues in all. A field added
// without a bound, or a bound raised past these, fails here.
func TestEveryValueIsBounded(t *testing.T) {
	committed, err := os.ReadFile("../../crds/models.takeoff.co_inferencestacks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd map[string]any
	if err := yaml.Unmarshal(committed, &crd); err != nil {
		t.Fatal(err)
	}
	spec := crd["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)["properties"].(map[string]any)["spec"].(map[string]any)
	num := func(s map[string]any, key string) (int, bool) {
		v, ok := s[key].(float64)
		return int(v), ok
	}
	// ruleBound returns the N of the first rule of s that starts with
	// prefix and continues with N.
	ruleBound := func(s map[string]any, prefix string) (int, bool) {
		rules, _ := s["x-kubernetes-validations"].([]any)
		for _, r := range rules {
			rule, _ := r.(map[string]any)["rule"].(string)
			if i := strings.Index(rule, prefix); i >= 0 {
				var n int
				if _, err := fmt.Sscanf(rule[i+len(prefix):], "%d", &n); err == nil {
					return n, true
				}
			}
		}
		return 0, false
	}
	// forbidden reports whether a rule of s refuses property name
	// (readerConfig's case hints: the property exists to be refused).
	forbidden := func(s map[string]any, name string) bool {
		rules, _ := s["x-kubernetes-validations"].([]any)
		for _, r := range rules {
			if r.(map[string]any)["rule"] == "!has(self."+name+")" {
				return true
			}
		}
		return false
	}
	isString := func(s map[string]any) bool {
		return s["type"] == "string" || s["x-kubernetes-int-or-string"] == true
	}
	checked := 0
	var walk func(s map[string]any, path string)
	walk = func(s map[string]any, path string) {
		checked++
		switch {
		case isString(s):
			if _, enum := s["enum"]; enum {
				return
			}
			n, ok := num(s, "maxLength")
			switch {
			case !ok:
				t.Errorf("%s: a string without maxLength", path)
			case n > v1alpha1.MaxValue:
				t.Errorf("%s: maxLength %d, more than MaxValue (%d)", path, n, v1alpha1.MaxValue)
			}
		case s["type"] == "array":
			items := s["items"].(map[string]any)
			n, ok := num(s, "maxItems")
			if !ok {
				t.Errorf("%s: a list without maxItems", path)
			} else if l, _ := num(items, "maxLength"); isString(items) && n*l > v1alpha1.MaxValues {
				t.Errorf("%s: %d strings of %d characters, more than MaxValues (%d)", path, n, l, v1alpha1.MaxValues)
			}
			walk(items, path+"[*]")
		case s["type"] == "object" && s["additionalProperties"] != nil:
			values := s["additionalProperties"].(map[string]any)
			n, ok := num(s, "maxProperties")
			k, keyOK := ruleBound(s, keyBoundPrefix)
			switch {
			case !ok:
				t.Errorf("%s: a map without maxProperties", path)
			case !keyOK:
				t.Errorf("%s: a map without a rule bounding its keys", path)
			case isString(values):
				l, _ := num(values, "maxLength")
				total, ok := ruleBound(s, ").sum() <= ")
				if !ok {
					total = n * (k + l)
				}
				if total > v1alpha1.MaxValues {
					t.Errorf("%s: %d keys of %d and values of %d characters, more than MaxValues (%d)", path, n, k, l, v1alpha1.MaxValues)
				}
			}
			walk(values, path+".*")
		case s["type"] == "object":
			if s["x-kubernetes-preserve-unknown-fields"] == true {
				// Values of unknown keys have no schema to bound them:
				// bound their number.
				if _, ok := num(s, "maxProperties"); !ok {
					t.Errorf("%s: keeps unknown keys without maxProperties", path)
				}
			}
			props, _ := s["properties"].(map[string]any)
			for _, name := range slices.Sorted(maps.Keys(props)) {
				if !forbidden(s, name) {
					walk(props[name].(map[string]any), path+"."+name)
				}
			}
		}
	}
	walk(spec, "spec")
	if checked < 1000 {
		t.Fatalf("checked only %d schema nodes: is the walk broken?", checked)
	}
}
