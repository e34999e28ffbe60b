// Package crdcompat is the InferenceStack CRD's upgrade-safety gate.
//
// The CRD lives outside the operator's bundle (OLM v1 cannot own a CRD that
// several majors share), so OLM's own CRD upgrade-safety preflight never
// sees it. This package is that check: it compares the CRD of the source
// tree with the CRD of the last recorded release (see Baseline) using
// sigs.k8s.io/crdify, and reports every change that can break a stack that
// exists in a cluster, naming the field. `make test` runs it (crds'
// tests) and `isctl release` refuses a release that fails it.
//
// A change that crdify reports as breaking but that can break no stack that
// ever deployed (say, rejecting a negative probe period, which the API
// server has always refused in the Deployment) is accepted by listing it,
// with the reason, in AcceptedPath.
package crdcompat

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/crdify/pkg/config"
	"sigs.k8s.io/crdify/pkg/runner"
	"sigs.k8s.io/crdify/pkg/validations"
	"sigs.k8s.io/crdify/pkg/validations/crd/existingfieldremoval"
	"sigs.k8s.io/crdify/pkg/validations/crd/scope"
	"sigs.k8s.io/crdify/pkg/validations/crd/storedversionremoval"
	"sigs.k8s.io/crdify/pkg/validations/property"
)

// Finding is one change from the old CRD to the new one that can break
// existing objects.
type Finding struct {
	// Version is the CRD version ("v1alpha1"); for a comparison between two
	// served versions of the new CRD, "v1alpha1 -> v1beta1".
	Version string
	// Field is the schema path in crdify's notation: "^" is the object,
	// "[*]" a list item or map value ("^.spec.applications[*].env").
	// Empty for changes to the CRD as a whole (its scope, its versions).
	Field string
	// Check is the crdify validation that found it ("enum", "required",
	// "existingFieldRemoval", "pattern", "rules", "unhandled", ...).
	Check string
	// Detail is crdify's description of the change.
	Detail string
}

func (f Finding) String() string {
	where := f.Version
	if f.Field != "" {
		where += " " + strings.TrimPrefix(strings.TrimPrefix(f.Field, "^"), ".")
	}
	return fmt.Sprintf("%s (%s): %s", where, f.Check, f.Detail)
}

// Compare returns the changes from old to new that can break objects
// stored with old, sorted by version, field and check.
//
// crdify runs with every validation at Error, except that changed
// descriptions are ignored and added enum values are allowed; changes no
// validation understands ("unhandled", e.g. a changed format or a dropped
// x-kubernetes-preserve-unknown-fields) are errors. Two validations are
// added to crdify's: "pattern" (a pattern added or changed) and "rules" (a
// CEL rule added or changed), which crdify otherwise lumps into unhandled,
// and "mapValues", which keeps a change inside a map's values from being
// reported a second time, as unhandled, at the map itself.
func Compare(old, new *apiextensionsv1.CustomResourceDefinition) ([]Finding, error) {
	registry := validations.NewRegistry()
	existingfieldremoval.Register(registry)
	scope.Register(registry)
	storedversionremoval.Register(registry)
	property.RegisterDefault(registry)
	property.RegisterEnum(registry)
	property.RegisterMaximum(registry)
	property.RegisterMaxItems(registry)
	property.RegisterMaxLength(registry)
	property.RegisterMaxProperties(registry)
	property.RegisterMinimum(registry)
	property.RegisterMinItems(registry)
	property.RegisterMinLength(registry)
	property.RegisterMinProperties(registry)
	property.RegisterRequired(registry)
	property.RegisterType(registry)
	property.RegisterDescription(registry)
	registry.Register(patternName, func(map[string]any) (validations.Validation, error) { return &patternCheck{}, nil })
	registry.Register(rulesName, func(map[string]any) (validations.Validation, error) { return &rulesCheck{}, nil })
	registry.Register(mapValuesName, func(map[string]any) (validations.Validation, error) { return &mapValuesCheck{}, nil })

	cfg := &config.Config{
		UnhandledEnforcement: config.EnforcementPolicyError,
		Conversion:           config.ConversionPolicyNone,
		Validations: []config.ValidationConfig{
			// Descriptions are documentation: the CRD drops the upstream ones
			// of embedded Kubernetes types on purpose.
			{Name: "description", Enforcement: config.EnforcementPolicyNone},
			// A new allowed value breaks nothing stored.
			{Name: "enum", Enforcement: config.EnforcementPolicyError,
				Configuration: map[string]any{"additionPolicy": string(property.AdditionPolicyAllow)}},
		},
	}
	if err := config.ValidateConfig(cfg); err != nil {
		return nil, fmt.Errorf("configuring crdify: %w", err)
	}
	r, err := runner.New(cfg, registry)
	if err != nil {
		return nil, fmt.Errorf("configuring crdify: %w", err)
	}
	res := r.Run(old, new)

	var out []Finding
	for _, c := range res.CRDValidation {
		for _, e := range c.Errors {
			out = append(out, crdFinding(c.Name, e))
		}
	}
	// Same-version results are keyed by version ("v1alpha1"), served-version
	// ones by pair ("v1alpha1 -> v1beta1").
	for _, m := range []map[string]map[string][]validations.ComparisonResult{res.SameVersionValidation, res.ServedVersionValidation} {
		for v, fields := range m {
			for field, results := range fields {
				for _, c := range results {
					for _, e := range c.Errors {
						out = append(out, Finding{Version: v, Field: field, Check: c.Name, Detail: e})
					}
				}
			}
		}
	}
	out = dropEchoesOfRemovals(out)
	for i, f := range out {
		out[i].Detail = shorten(f.Detail)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		if a.Field != b.Field {
			return a.Field < b.Field
		}
		if a.Check != b.Check {
			return a.Check < b.Check
		}
		return a.Detail < b.Detail
	})
	return out, nil
}

// dropEchoesOfRemovals drops the findings at a removed field other than
// its removal: crdify compares a removed field's schema with an empty one,
// which also reports its type, bounds and rules as changed.
func dropEchoesOfRemovals(fs []Finding) []Finding {
	removed := map[[2]string]bool{}
	for _, f := range fs {
		if f.Check == "existingFieldRemoval" && f.Field != "" {
			removed[[2]string{f.Version, f.Field}] = true
		}
	}
	return slices.DeleteFunc(fs, func(f Finding) bool {
		return f.Check != "existingFieldRemoval" && removed[[2]string{f.Version, f.Field}]
	})
}

// maxDetailLines bounds a finding's detail: an unhandled change carries a
// diff of the whole schema node, which can run to hundreds of lines.
const maxDetailLines = 12

func shorten(detail string) string {
	lines := strings.Split(detail, "\n")
	if len(lines) <= maxDetailLines {
		return detail
	}
	return strings.Join(lines[:maxDetailLines], "\n") + fmt.Sprintf("\n      ... (%d more lines)", len(lines)-maxDetailLines)
}

// crdFinding turns a CRD-wide result into a Finding. A removed field
// ("removed field : v1alpha1.^.spec.foo") is reported at its field, so the
// message names it and an acceptance can match it.
func crdFinding(check, detail string) Finding {
	f := Finding{Check: check, Detail: detail}
	if check == "existingFieldRemoval" {
		if _, loc, ok := strings.Cut(detail, " : "); ok {
			if v, field, ok := strings.Cut(loc, "."); ok {
				f.Version, f.Field, f.Detail = v, field, "field removed"
			}
		}
	}
	return f
}

const (
	patternName   = "pattern"
	rulesName     = "rules"
	mapValuesName = "mapValues"
)

// patternCheck reports a pattern added to a string, or changed: whether
// the new pattern still accepts every value the old one did cannot be
// decided here. A removed pattern accepts more and is fine.
type patternCheck struct{ enforcement config.EnforcementPolicy }

func (p *patternCheck) Name() string                              { return patternName }
func (p *patternCheck) SetEnforcement(e config.EnforcementPolicy) { p.enforcement = e }
func (p *patternCheck) Compare(a, b *apiextensionsv1.JSONSchemaProps) validations.ComparisonResult {
	var err error
	switch {
	case a.Pattern == "" && b.Pattern != "":
		err = fmt.Errorf("pattern %q added", b.Pattern)
	case a.Pattern != "" && b.Pattern != "" && a.Pattern != b.Pattern:
		err = fmt.Errorf("pattern changed: %q -> %q", a.Pattern, b.Pattern)
	}
	a.Pattern, b.Pattern = "", ""
	return validations.HandleErrors(p.Name(), p.enforcement, err)
}

// rulesCheck reports CEL rules (x-kubernetes-validations) that the new
// schema has and the old one had not, by rule text: a new or rewritten rule
// may reject stored objects. Removed rules, and new messages for old rules,
// break nothing.
type rulesCheck struct{ enforcement config.EnforcementPolicy }

func (r *rulesCheck) Name() string                              { return rulesName }
func (r *rulesCheck) SetEnforcement(e config.EnforcementPolicy) { r.enforcement = e }
func (r *rulesCheck) Compare(a, b *apiextensionsv1.JSONSchemaProps) validations.ComparisonResult {
	old := map[string]bool{}
	for _, v := range a.XValidations {
		old[v.Rule] = true
	}
	var errs []error
	for _, v := range b.XValidations {
		if !old[v.Rule] {
			errs = append(errs, fmt.Errorf("CEL rule added: %s", v.Rule))
		}
	}
	a.XValidations, b.XValidations = nil, nil
	return validations.HandleErrors(r.Name(), r.enforcement, errs...)
}

// mapValuesCheck: crdify compares a map's value schema on its own (at
// "<map>[*]") but leaves it on the map's node too, where any change inside
// it would show again as an unhandled change of the map. It reports what
// belongs to the map itself: becoming or ceasing to be a map.
type mapValuesCheck struct{ enforcement config.EnforcementPolicy }

func (m *mapValuesCheck) Name() string                              { return mapValuesName }
func (m *mapValuesCheck) SetEnforcement(e config.EnforcementPolicy) { m.enforcement = e }
func (m *mapValuesCheck) Compare(a, b *apiextensionsv1.JSONSchemaProps) validations.ComparisonResult {
	var err error
	switch {
	case a.AdditionalProperties == nil && b.AdditionalProperties != nil:
		err = fmt.Errorf("became a map (additionalProperties added)")
	case a.AdditionalProperties != nil && b.AdditionalProperties == nil:
		err = fmt.Errorf("is no longer a map (additionalProperties removed)")
	case a.AdditionalProperties != nil && a.AdditionalProperties.Allows != b.AdditionalProperties.Allows:
		err = fmt.Errorf("additionalProperties changed from %v to %v", a.AdditionalProperties.Allows, b.AdditionalProperties.Allows)
	}
	a.AdditionalProperties, b.AdditionalProperties = nil, nil
	return validations.HandleErrors(m.Name(), m.enforcement, err)
}
