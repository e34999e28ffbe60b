// Package valuesschema turns a CRD's structural (OpenAPI v3) schema into a JSON
// Schema (draft-07) that Helm validates chart values against.
package valuesschema

import (
	"bytes"
	"encoding/json"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// ValuesSchema returns the JSON schema of the spec of the CRD's first served
// version, indented and with sorted keys (stable bytes for a committed file).
func ValuesSchema(crdYAML []byte) ([]byte, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(crdYAML, &crd); err != nil {
		return nil, fmt.Errorf("parsing CRD: %w", err)
	}
	var spec *apiextensionsv1.JSONSchemaProps
	for _, v := range crd.Spec.Versions {
		if v.Served && v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
			s, ok := v.Schema.OpenAPIV3Schema.Properties["spec"]
			if !ok {
				return nil, fmt.Errorf("version %s has no spec property", v.Name)
			}
			spec = &s
			break
		}
	}
	if spec == nil {
		return nil, fmt.Errorf("CRD %s has no served version with a schema", crd.Name)
	}

	root := convert(spec, false)
	root["$schema"] = "http://json-schema.org/draft-07/schema#"
	root["title"] = fmt.Sprintf("Values of the inference-stack chart (generated from the %s CRD; do not edit)", crd.Name)

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("encoding schema: %w", err)
	}
	return buf.Bytes(), nil
}

// convert maps one OpenAPI node to JSON Schema. Kubernetes extensions are
// translated where JSON Schema can say the same thing (int-or-string,
// nullable) and dropped otherwise: CEL rules (x-kubernetes-validations) are
// enforced by the API server, and formats are left out because Helm's
// validator would assert formats the API server treats as hints.
//
// Fields of Kubernetes core types (see opaque) keep only their outer type
// and its bound on items or properties (env's 128 entries): the API server
// validates them when the rendered objects are applied, and their full
// schemas would make the chart, which Helm stores in every release Secret,
// about a megabyte larger.
func convert(s *apiextensionsv1.JSONSchemaProps, shallow bool) map[string]any {
	out := map[string]any{}
	if s.Description != "" {
		out["description"] = s.Description
	}
	if s.XIntOrString {
		out["anyOf"] = []any{map[string]any{"type": "integer"}, map[string]any{"type": "string"}}
		return out
	}
	setInt := func(key string, v *int64) {
		if v != nil {
			out[key] = *v
		}
	}
	if shallow {
		if s.Type != "" {
			out["type"] = s.Type
		}
		if s.Items != nil && s.Items.Schema != nil && s.Items.Schema.Type != "" {
			out["items"] = map[string]any{"type": s.Items.Schema.Type}
		}
		setInt("maxItems", s.MaxItems)
		setInt("maxProperties", s.MaxProperties)
		return out
	}
	if s.Type != "" {
		if s.Nullable {
			out["type"] = []any{s.Type, "null"}
		} else {
			out["type"] = s.Type
		}
	}
	if len(s.Enum) > 0 {
		enum := make([]any, 0, len(s.Enum))
		for _, e := range s.Enum {
			var v any
			if err := json.Unmarshal(e.Raw, &v); err == nil {
				enum = append(enum, v)
			}
		}
		out["enum"] = enum
	}
	if s.Pattern != "" {
		out["pattern"] = s.Pattern
	}
	setInt("minLength", s.MinLength)
	setInt("maxLength", s.MaxLength)
	setInt("minItems", s.MinItems)
	setInt("maxItems", s.MaxItems)
	setInt("minProperties", s.MinProperties)
	setInt("maxProperties", s.MaxProperties)
	if s.Minimum != nil {
		out["minimum"] = *s.Minimum
	}
	if s.Maximum != nil {
		out["maximum"] = *s.Maximum
	}
	if len(s.Required) > 0 {
		out["required"] = s.Required
	}
	if len(s.Properties) > 0 {
		props := map[string]any{}
		for name, p := range s.Properties {
			props[name] = convert(&p, opaque[name])
		}
		out["properties"] = props
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		out["additionalProperties"] = convert(s.AdditionalProperties.Schema, false)
	}
	if s.Items != nil && s.Items.Schema != nil {
		out["items"] = convert(s.Items.Schema, false)
	}
	return out
}

// opaque names the chart values whose type is a Kubernetes core type.
var opaque = map[string]bool{
	"affinity":           true,
	"env":                true,
	"imagePullSecrets":   true,
	"livenessProbe":      true,
	"modelsVolume":       true,
	"podSecurityContext": true,
	"readinessProbe":     true,
	"resources":          true,
	"securityContext":    true,
	"startupProbe":       true,
	"tolerations":        true,
	"volumeMounts":       true,
	"volumes":            true,
}
