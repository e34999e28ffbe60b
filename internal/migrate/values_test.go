package migrate

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func parse(t *testing.T, doc string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestStackSpec checks how a ModelOrchestra's values become an
// InferenceStack's: names kept through nameOverride (or fullnameOverride),
// list ports rewritten as maps, dropped keys removed, image tags pinned to
// the old chart's, and the ModelOrchestra's own spec untouched.
func TestStackSpec(t *testing.T) {
	orchestra := parse(t, `
gateway:
  ports:
    - {name: inference, containerPort: 3000, protocol: TCP}
    - {name: openai, containerPort: 3003}
  service:
    ports:
      - {name: http, port: 80, targetPort: openai}
  exportPrometheusMetrics: true
applicationTemplate:
  modelsVolume: {name: models, persistentVolumeClaim: {claimName: weights}}
applications:
  llama:
    image: {tag: "0.20.0-gpu"}
    scaling: {enabled: true, metricTarget: {name: queue, value: 5}}
`)
	original := orchestraCopy(t, orchestra)
	spec, changes, err := stackSpec(orchestra, oldRelease{Fullname: "prod-model-orchestra", NameLabel: "model-orchestra", ReleaseName: "prod", AppVersion: "0.21.2"})
	if err != nil {
		t.Fatal(err)
	}
	want := parse(t, `
nameOverride: model-orchestra
gateway:
  image: {tag: 0.21.2-cpu}
  ports: {inference: 3000, openai: 3003}
  service:
    ports:
      http: {port: 80, targetPort: openai}
applicationTemplate:
  image: {tag: 0.21.2-gpu}
  modelsVolume: {persistentVolumeClaim: {claimName: weights}}
applications:
  llama:
    image: {tag: "0.20.0-gpu"}
    scaling: {enabled: true, metricTarget: {value: 5}}
`)
	if !reflect.DeepEqual(spec, want) {
		got, _ := yaml.Marshal(spec)
		t.Errorf("spec:\n%s", got)
	}
	if !reflect.DeepEqual(orchestra, original) {
		t.Error("stackSpec changed the ModelOrchestra's spec")
	}
	for _, w := range []string{"nameOverride: model-orchestra", "gateway.ports", "gateway.service.ports", "gateway.exportPrometheusMetrics", "applicationTemplate.modelsVolume.name", "applications.llama.scaling.metricTarget.name", "gateway.image.tag: 0.21.2-cpu", "applicationTemplate.image.tag: 0.21.2-gpu"} {
		if !slices.ContainsFunc(changes, func(c string) bool { return strings.HasPrefix(c, w) }) {
			t.Errorf("changes %q lack %q", changes, w)
		}
	}

	// A fullname the rule cannot reproduce is kept with fullnameOverride;
	// values the user set are left alone.
	spec, changes, err = stackSpec(parse(t, "{nameOverride: mo, gateway: {image: {tag: custom}}}"), oldRelease{Fullname: "legacy-name", NameLabel: "mo", ReleaseName: "x", AppVersion: "0.21.2"})
	if err != nil {
		t.Fatal(err)
	}
	if spec["fullnameOverride"] != "legacy-name" || spec["nameOverride"] != "mo" || spec["gateway"].(map[string]any)["image"].(map[string]any)["tag"] != "custom" {
		t.Errorf("spec %v (changes %q)", spec, changes)
	}

	// A port without a name cannot become a map entry.
	if _, _, err := stackSpec(parse(t, "{gateway: {ports: [{containerPort: 3000}]}}"), oldRelease{}); err == nil || !strings.Contains(err.Error(), "gateway.ports[0]") {
		t.Errorf("unnamed port: %v", err)
	}
}

func orchestraCopy(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	data, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, string(data))
}

func TestFullname(t *testing.T) {
	for _, tc := range []struct{ release, override, want string }{
		{"my-model-orchestra", "model-orchestra", "my-model-orchestra"},
		{"prod", "model-orchestra", "prod-model-orchestra"},
		{"prod", "", "prod-inference-stack"},
		{strings.Repeat("a", 60), "model-orchestra", strings.Repeat("a", 60) + "-mo"},
	} {
		if got := fullname(tc.release, tc.override); got != tc.want {
			t.Errorf("fullname(%q, %q) = %q, want %q", tc.release, tc.override, got, tc.want)
		}
	}
}
