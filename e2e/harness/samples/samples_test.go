package samples

import (
	"testing"

	"sigs.k8s.io/yaml"
)

func TestExamplesParse(t *testing.T) {
	for name, doc := range map[string]string{"Example": Example, "AbsentGPU": AbsentGPU, "OtherMajor": OtherMajor, "H100": H100} {
		var m struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string            `json:"name"`
				Namespace string            `json:"namespace"`
				Labels    map[string]string `json:"labels"`
			} `json:"metadata"`
			Spec map[string]any `json:"spec"`
		}
		if err := yaml.UnmarshalStrict([]byte(doc), &m); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if m.APIVersion != "models.takeoff.co/v1alpha1" || m.Kind != "InferenceStack" || m.Metadata.Name == "" || m.Metadata.Labels["operatorVersion"] == "" || len(m.Spec) == 0 {
			t.Errorf("%s is not a labelled InferenceStack with a spec: %+v", name, m)
		}
	}
	var spec map[string]any
	if err := yaml.Unmarshal([]byte(ExampleSpec), &spec); err != nil || spec["applications"] == nil || spec["imagePullSecrets"] == nil {
		t.Errorf("ExampleSpec %q: %v", ExampleSpec, err)
	}
}
