package main

import (
	"os"
	"reflect"
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
