package main

import (
	"fmt"
	"reflect"

	"github.com/titanml/inference-stack-operator/operator/api/v1alpha1"
)

// schemaDialect is what a name rule is written into: the CRD's OpenAPI
// schema (CEL for map keys, which structural schemas cannot constrain
// otherwise) or the chart's JSON Schema (propertyNames).
type schemaDialect int

const (
	openAPI schemaDialect = iota
	jsonSchema
)

// applyNames writes the name rules (v1alpha1.NameRules) of struct type t
// into its schema node s.
func applyNames(s map[string]any, t reflect.Type, dialect schemaDialect) {
	if t.Kind() != reflect.Struct {
		return
	}
	props, _ := s["properties"].(map[string]any)
	if props == nil {
		return // a Kubernetes type the values schema keeps opaque
	}
	for _, r := range v1alpha1.NameRules {
		if !declares(t, r.Owner) {
			continue
		}
		p, ok := props[r.Field].(map[string]any)
		if !ok {
			panic(fmt.Sprintf("name rule %s.%s: %s has no property %q", r.Owner.Name(), r.Field, t.Name(), r.Field))
		}
		if r.Value != nil {
			target := p
			switch {
			case p["type"] == "array":
				target, _ = p["items"].(map[string]any)
			case p["type"] == "object":
				target, _ = p["additionalProperties"].(map[string]any)
			}
			if target == nil {
				panic(fmt.Sprintf("name rule %s.%s: no string to constrain in %v", r.Owner.Name(), r.Field, p))
			}
			constrainString(target, *r.Value, dialect)
		}
		if r.Key != nil {
			constrainKeys(p, *r.Key, r.MaxProperties, dialect)
		}
	}
}

// declares reports whether struct t is owner or embeds it inline.
func declares(t, owner reflect.Type) bool {
	if t == owner {
		return true
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct && declares(f.Type, owner) {
			return true
		}
	}
	return false
}

// valuePattern accepts the format or the empty string (the chart's
// "unset").
func valuePattern(f v1alpha1.NameFormat) string { return "^(" + f.Pattern + ")?$" }

func keyPattern(f v1alpha1.NameFormat) string { return "^(" + f.Pattern + ")$" }

// constrainString sets the pattern and maximum length of a string (or the
// string branch of an int-or-string).
func constrainString(s map[string]any, f v1alpha1.NameFormat, dialect schemaDialect) {
	if dialect == jsonSchema {
		if branches, ok := s["anyOf"].([]any); ok {
			for _, b := range branches {
				if bm, ok := b.(map[string]any); ok && bm["type"] == "string" {
					s = bm
				}
			}
		}
	}
	s["pattern"] = valuePattern(f)
	if f.MaxLength > 0 {
		lower(s, "maxLength", f.MaxLength)
	}
}

// constrainKeys limits the keys of the map s to format f: a CEL rule in
// the CRD, propertyNames in JSON Schema; and bounds its size.
func constrainKeys(s map[string]any, f v1alpha1.NameFormat, maxProperties int, dialect schemaDialect) {
	if maxProperties > 0 {
		lower(s, "maxProperties", maxProperties)
	}
	if dialect == jsonSchema {
		names := map[string]any{"pattern": keyPattern(f)}
		if f.MaxLength > 0 {
			names["maxLength"] = f.MaxLength
		}
		s["propertyNames"] = names
		return
	}
	rule := fmt.Sprintf("self.all(k, k.matches(r'%s'))", keyPattern(f))
	if f.MaxLength > 0 {
		rule = fmt.Sprintf("%s%d && k.matches(r'%s'))", keyBoundPrefix, f.MaxLength, keyPattern(f))
	}
	addRule(s, map[string]any{
		"rule":    rule,
		"message": fmt.Sprintf("every key must be %s, of at most %d characters", f.Name, f.MaxLength),
		"reason":  "FieldValueInvalid",
	})
}
