// Package samples holds the example InferenceStacks, each defined once as a
// manifest beside this file, for the demo, the end-to-end scenarios and
// the product's tests (admission, Pod Security, the controller).
package samples

import (
	_ "embed"
	"fmt"

	"sigs.k8s.io/yaml"
)

var (
	// Example is the example of the operator's documentation ("Using a
	// Specific Operator Version"), labelled for v0: a reader on the RTX
	// 3060 node.
	//go:embed example.yaml
	Example string
	// AbsentGPU selects a GPU product no node has.
	//go:embed absent-gpu.yaml
	AbsentGPU string
	// OtherMajor is labelled for a major no operator runs.
	//go:embed other-major.yaml
	OtherMajor string
	// H100 runs a 4-GPU tensor-parallel reader on the H100 node.
	//go:embed h100.yaml
	H100 string
)

// ExampleSpec is Example's spec alone (YAML), for tests that create the
// stack under their own name, namespace and labels.
var ExampleSpec = specOf(Example)

func specOf(doc string) string {
	var m struct {
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		panic(fmt.Sprintf("an example stack does not parse: %v", err))
	}
	out, err := yaml.Marshal(m.Spec)
	if err != nil {
		panic(fmt.Sprintf("an example stack's spec does not marshal: %v", err))
	}
	return string(out)
}
