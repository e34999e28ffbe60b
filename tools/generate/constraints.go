package main

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"

	"github.com/titanml/inference-stack-operator/operator/api/v1alpha1"
)

// constraints add validation to the schema of a Go type wherever it occurs
// in the CRD (path is where, as in walkSchema). They cover what markers
// cannot: the Kubernetes types carry no markers of ours, and the
// readerConfig hints are derived from its fields. Each rejects, at
// admission and with the field's path, a value that would otherwise be
// stored and fail only later, when the chart's objects are applied
// (ReleaseFailed) or the reader reads its config.
var constraints = map[reflect.Type]func(s map[string]any, path string){
	reflect.TypeFor[corev1.Probe]():          probeRanges,
	reflect.TypeFor[corev1.EnvVar]():         envVarRules,
	reflect.TypeFor[v1alpha1.ReaderConfig](): caseHints,
}

// probeRanges: the API server rejects negative probe timings, a
// terminationGracePeriodSeconds of 0 or less, and a probe without exactly
// one handler; liveness and startup probes must have successThreshold 1
// (0 is defaulted to 1).
func probeRanges(s map[string]any, path string) {
	props := s["properties"].(map[string]any)
	for _, f := range []string{"initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"} {
		props[f].(map[string]any)["minimum"] = 0
	}
	props["terminationGracePeriodSeconds"].(map[string]any)["minimum"] = 1
	if strings.HasSuffix(path, ".livenessProbe") || strings.HasSuffix(path, ".startupProbe") {
		props["successThreshold"].(map[string]any)["maximum"] = 1
	}
	addRule(s, map[string]any{
		// An empty probe is not rendered, so only a probe with settings
		// needs its handler.
		"rule": "[has(self.exec), has(self.httpGet), has(self.tcpSocket), has(self.grpc)].filter(h, h).size() == " +
			"(has(self.initialDelaySeconds) || has(self.timeoutSeconds) || has(self.periodSeconds) || has(self.successThreshold) || has(self.failureThreshold) || has(self.terminationGracePeriodSeconds) || " +
			"has(self.exec) || has(self.httpGet) || has(self.tcpSocket) || has(self.grpc) ? 1 : 0)",
		"message": "a probe needs exactly one of exec, httpGet, tcpSocket and grpc",
	})
}

// envVarRules: an environment variable name is printable ASCII other than
// '=' (the rule of Kubernetes 1.30 and later), and value and valueFrom
// exclude each other.
func envVarRules(s map[string]any, _ string) {
	name := s["properties"].(map[string]any)["name"].(map[string]any)
	name["pattern"] = `^[ -<>-~]+$`
	name["minLength"] = 1
	addRule(s, map[string]any{
		"rule":      "!has(self.valueFrom) || !has(self.value) || size(self.value) == 0",
		"message":   "set value or valueFrom, not both",
		"fieldPath": ".valueFrom",
	})
}

// caseHints: readerConfig keeps keys it does not know (for readers newer
// than this API), so a known option spelt with another case, such as
// tensorparallel, would be kept and silently ignored. CEL cannot see keys
// the schema does not declare, so the likely misspellings of every option
// (all lower case, and with a capital first letter) are declared, and a
// rule rejects each with a hint.
func caseHints(s map[string]any, _ string) {
	props := s["properties"].(map[string]any)
	var known []string
	eachJSONField(reflect.TypeFor[v1alpha1.ReaderConfig](), func(name string, _ reflect.Type) { known = append(known, name) })
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
			addRule(s, map[string]any{
				"rule":      fmt.Sprintf("!has(self.%s)", variant),
				"message":   fmt.Sprintf("unknown key %s: did you mean %s? Keys are case-sensitive", variant, name),
				"fieldPath": "." + variant,
				"reason":    "FieldValueInvalid",
			})
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
