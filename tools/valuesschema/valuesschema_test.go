package valuesschema

import (
	"encoding/json"
	"testing"
)

func TestConvertTranslatesKubernetesExtensions(t *testing.T) {
	crd := []byte(`
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.com}
spec:
  group: example.com
  names: {kind: Thing, plural: things}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            x-kubernetes-validations:
            - rule: self.size > 0
            properties:
              size: {type: integer, format: int32, minimum: 0}
              port: {x-kubernetes-int-or-string: true}
              when: {type: string, format: date-time, nullable: true}
              mode: {type: string, enum: [a, b]}
              labels:
                type: object
                additionalProperties: {type: string}
              env:
                type: array
                maxItems: 128
                items: {type: object, properties: {name: {type: string, maxLength: 253}}}
`)
	b, err := ValuesSchema(crd)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	props := got["properties"].(map[string]any)
	if _, ok := got["x-kubernetes-validations"]; ok {
		t.Error("CEL rules must not leak into the JSON schema")
	}
	if size := props["size"].(map[string]any); size["format"] != nil || size["minimum"] != float64(0) {
		t.Errorf("size = %v, want minimum 0 and no format", size)
	}
	if port := props["port"].(map[string]any); port["anyOf"] == nil {
		t.Errorf("int-or-string not translated: %v", port)
	}
	if when := props["when"].(map[string]any); len(when["type"].([]any)) != 2 {
		t.Errorf("nullable not translated: %v", when)
	}
	if labels := props["labels"].(map[string]any); labels["additionalProperties"] == nil {
		t.Errorf("map values lost: %v", labels)
	}
	// env is a Kubernetes type: its items stay opaque, its bound stays.
	if env := props["env"].(map[string]any); env["maxItems"] != float64(128) || env["items"].(map[string]any)["properties"] != nil {
		t.Errorf("env = %v, want maxItems 128 and opaque items", env)
	}
	if req := got["required"].([]any); len(req) != 1 || req[0] != "size" {
		t.Errorf("required = %v", req)
	}

	if _, err := ValuesSchema([]byte("kind: CustomResourceDefinition\nspec: {versions: []}\n")); err == nil {
		t.Error("a CRD without a served schema must be an error")
	}
}
