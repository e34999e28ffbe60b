package main

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"unicode"

	"github.com/titanml/inference-stack-operator/operator/api/v1alpha1"
)

// applyRules writes the rules of v1alpha1.SchemaRules and
// v1alpha1.BoundRules that apply to Go type t at path (as in walkSchema)
// into its schema node s: the rules of t and of the structs t embeds
// inline.
func applyRules(s map[string]any, t reflect.Type, path string) {
	for _, r := range slices.Concat(v1alpha1.SchemaRules, v1alpha1.BoundRules) {
		if t.Kind() != reflect.Struct || !declares(t, r.Owner) || !at(path, r.At) {
			continue
		}
		props, _ := s["properties"].(map[string]any)
		for _, name := range slices.Sorted(maps.Keys(r.Fields)) {
			p, ok := props[name].(map[string]any)
			if !ok {
				panic(fmt.Sprintf("schema rule of %s: no property %q", t.Name(), name))
			}
			setBounds(p, r.Fields[name])
		}
		for _, rule := range r.Rules {
			addRule(s, celRule(rule))
		}
		if r.CaseHints {
			caseHints(s, t)
		}
	}
}

// at tells whether path ends with one of suffixes, or suffixes is empty.
func at(path string, suffixes []string) bool {
	if len(suffixes) == 0 {
		return true
	}
	return slices.ContainsFunc(suffixes, func(suffix string) bool { return strings.HasSuffix(path, suffix) })
}

func setBounds(p map[string]any, b v1alpha1.FieldBounds) {
	if b.Minimum != nil {
		p["minimum"] = *b.Minimum
	}
	if b.Maximum != nil {
		p["maximum"] = *b.Maximum
	}
	if b.MinLength != nil {
		p["minLength"] = *b.MinLength
	}
	if b.Pattern != "" {
		p["pattern"] = b.Pattern
	}
	if b.MaxLength > 0 {
		target := p
		switch p["type"] {
		case "array":
			target, _ = p["items"].(map[string]any)
		case "object":
			target, _ = p["additionalProperties"].(map[string]any)
		}
		if target == nil {
			panic(fmt.Sprintf("maxLength %d: no string to bound in %v", b.MaxLength, p))
		}
		lower(target, "maxLength", b.MaxLength)
	}
	if b.MaxItems > 0 {
		lower(p, "maxItems", b.MaxItems)
	}
	if b.MaxProperties > 0 {
		lower(p, "maxProperties", b.MaxProperties)
	}
	if b.MaxKeyLength > 0 {
		boundKeys(p, b.MaxKeyLength)
	}
	if b.MaxTotal > 0 {
		addRule(p, map[string]any{
			"rule":    fmt.Sprintf("self.map(k, size(k) + size(self[k])).sum() <= %d", b.MaxTotal),
			"message": fmt.Sprintf("keys and values may total at most %d characters", b.MaxTotal),
		})
	}
}

// lower sets the bound key of s to n unless s has a lower one already (so
// bounds from markers, name rules and bound rules combine to the least).
func lower(s map[string]any, key string, n int) {
	if cur, ok := s[key]; ok {
		if c, ok := asInt(cur); ok && c <= n {
			return
		}
	}
	s[key] = n
}

func asInt(v any) (int, bool) {
	switch v := v.(type) {
	case int:
		return v, true
	case int64:
		return int(v), true
	case float64:
		return int(v), true
	}
	return 0, false
}

// keyBoundPrefix starts every rule that bounds a map's keys (boundKeys'
// and the name rules' own), so a map bounded either way is recognised.
const keyBoundPrefix = "self.all(k, size(k) <= "

// boundKeys bounds the length of the keys of map s with a CEL rule. It
// has no message: the API server's "failed rule: self.all(k, size(k) <=
// 253)" says as much, and the CRD has one such rule per map of every
// embedded Kubernetes type.
func boundKeys(s map[string]any, n int) {
	addRule(s, map[string]any{"rule": fmt.Sprintf("%s%d)", keyBoundPrefix, n)})
}

// keysBounded reports whether a rule of s bounds its keys' length.
func keysBounded(s map[string]any) bool {
	rules, _ := s["x-kubernetes-validations"].([]any)
	for _, r := range rules {
		if m, ok := r.(map[string]any); ok {
			if rule, _ := m["rule"].(string); strings.HasPrefix(rule, keyBoundPrefix) {
				return true
			}
		}
	}
	return false
}

// applyDefaults bounds node s, inside an embedded Kubernetes type, with
// v1alpha1.KubernetesDefault where nothing else bounded it: every string,
// int-or-string, list, map and map key of the spec gets a bound.
func applyDefaults(s map[string]any) {
	d := v1alpha1.KubernetesDefault
	unset := func(key string, n int) {
		if _, ok := s[key]; !ok {
			s[key] = n
		}
	}
	switch {
	case s["x-kubernetes-int-or-string"] == true:
		unset("maxLength", v1alpha1.KubernetesIntOrStringLength)
	case s["type"] == "string":
		if _, enum := s["enum"]; !enum {
			unset("maxLength", d.MaxLength)
		}
	case s["type"] == "array":
		unset("maxItems", d.MaxItems)
	case s["type"] == "object" && s["additionalProperties"] != nil:
		unset("maxProperties", d.MaxProperties)
		if !keysBounded(s) {
			boundKeys(s, d.MaxKeyLength)
		}
	}
}

// celRule is r as an x-kubernetes-validations entry.
func celRule(r v1alpha1.CELRule) map[string]any {
	m := map[string]any{"rule": r.Rule, "message": r.Message}
	if r.FieldPath != "" {
		m["fieldPath"] = r.FieldPath
	}
	if r.Reason != "" {
		m["reason"] = r.Reason
	}
	return m
}

// caseHints declares the case variants of every field of struct t (see
// v1alpha1.SchemaRule.CaseHints) and rejects each with a hint.
func caseHints(s map[string]any, t reflect.Type) {
	props := s["properties"].(map[string]any)
	var known []string
	eachJSONField(t, func(name string, _ reflect.Type) { known = append(known, name) })
	slices.Sort(known)
	for _, name := range known {
		for _, variant := range caseVariants(name) {
			if _, taken := props[variant]; taken {
				continue
			}
			// CEL sees only declared fields with a type: the misspelling
			// gets the option's type, which a value meant for it has.
			known := props[name].(map[string]any)
			trap := map[string]any{
				"description": fmt.Sprintf("Not an option: did you mean %s? Keys are case-sensitive.", name),
				"type":        known["type"],
			}
			if f, ok := known["format"]; ok {
				trap["format"] = f
			}
			props[variant] = trap
			addRule(s, celRule(v1alpha1.CELRule{
				Rule:      fmt.Sprintf("!has(self.%s)", variant),
				Message:   fmt.Sprintf("unknown key %s: did you mean %s? Keys are case-sensitive", variant, name),
				FieldPath: "." + variant,
				Reason:    "FieldValueInvalid",
			}))
		}
	}
}

// caseVariants returns the all-lower-case and capitalised spellings of a
// camelCase name that differ from it.
func caseVariants(name string) []string {
	var out []string
	seen := map[string]bool{name: true}
	upper := []rune(name)
	upper[0] = unicode.ToUpper(upper[0])
	for _, v := range []string{strings.ToLower(name), string(upper)} {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// addRule appends a CEL rule unless s has it already (so post-processing
// a processed CRD changes nothing).
func addRule(s map[string]any, rule map[string]any) {
	rules, _ := s["x-kubernetes-validations"].([]any)
	for _, r := range rules {
		if m, ok := r.(map[string]any); ok && m["rule"] == rule["rule"] {
			return
		}
	}
	s["x-kubernetes-validations"] = append(rules, rule)
}
