package bundle

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	apivalidation "github.com/operator-framework/api/pkg/validation"
	"github.com/operator-framework/operator-registry/alpha/property"
	"github.com/operator-framework/operator-registry/pkg/image"
	registrybundle "github.com/operator-framework/operator-registry/pkg/lib/bundle"
	"github.com/operator-framework/operator-registry/pkg/registry"
	"github.com/sirupsen/logrus"
)

// Report is the outcome of validating a bundle directory.
type Report struct {
	Errors   []string
	Warnings []string
}

// Err returns the errors as one error, or nil.
func (r Report) Err() error {
	if len(r.Errors) == 0 {
		return nil
	}
	return fmt.Errorf("invalid bundle:\n  - %s", strings.Join(r.Errors, "\n  - "))
}

// ValidateDir validates the bundle in dir three ways:
//   - operator-registry's bundle format and content checks (what `opm` and
//     `operator-sdk bundle validate` run),
//   - operator-framework/api's default bundle validators plus its good
//     practices validator,
//   - OLM v1's own rules for registry+v1 bundles: the AllNamespaces install
//     mode is supported, no dependency properties (olm.gvk.required,
//     olm.package.required, olm.constraint), every owned CRD is shipped, no
//     webhooks or API services.
func ValidateDir(dir string) Report {
	var r Report
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	v := registrybundle.NewImageValidator(nil, logrus.NewEntry(quiet))
	if err := v.ValidateBundleFormat(dir); err != nil {
		r.addErr("operator-registry bundle format", err)
	}
	if err := v.ValidateBundleContent(filepath.Join(dir, "manifests")); err != nil {
		r.addErr("operator-registry bundle content", err)
	}

	b, err := manifests.GetBundleFromDir(dir)
	if err != nil {
		r.Errors = append(r.Errors, fmt.Sprintf("load bundle: %v", err))
		return r
	}
	validators := append(apivalidation.DefaultBundleValidators, apivalidation.GoodPracticesValidator)
	for _, res := range validators.Validate(b.ObjectsToValidate()...) {
		for _, e := range res.Errors {
			r.Errors = append(r.Errors, "operator-framework/api: "+e.Error())
		}
		for _, w := range res.Warnings {
			r.Warnings = append(r.Warnings, "operator-framework/api: "+w.Error())
		}
	}
	r.Errors = append(r.Errors, olmV1Rules(dir, b)...)
	return r
}

func (r *Report) addErr(what string, err error) {
	var ve registrybundle.ValidationError
	if errors.As(err, &ve) {
		for _, e := range ve.Errors {
			r.Errors = append(r.Errors, what+": "+e.Error())
		}
		return
	}
	r.Errors = append(r.Errors, what+": "+err.Error())
}

func olmV1Rules(dir string, b *manifests.Bundle) []string {
	var errs []string
	csv := b.CSV
	if csv == nil {
		return []string{"OLM v1: bundle has no ClusterServiceVersion"}
	}
	allNS := false
	for _, m := range csv.Spec.InstallModes {
		if m.Type == operatorsv1alpha1.InstallModeTypeAllNamespaces && m.Supported {
			allNS = true
		}
	}
	if !allNS {
		errs = append(errs, "OLM v1: the CSV must support the AllNamespaces install mode")
	}
	shipped := map[string]bool{}
	for _, crd := range b.V1CRDs {
		shipped[crd.Name] = true
	}
	for _, crd := range b.V1beta1CRDs {
		shipped[crd.Name] = true
	}
	for _, o := range csv.Spec.CustomResourceDefinitions.Owned {
		if !shipped[o.Name] {
			errs = append(errs, fmt.Sprintf("OLM v1: the CSV owns CRD %s, which the bundle does not ship", o.Name))
		}
	}
	for _, req := range csv.Spec.CustomResourceDefinitions.Required {
		errs = append(errs, fmt.Sprintf("OLM v1: the CSV requires CRD %s; a required CRD is a dependency, which OLM v1 rejects", req.Name))
	}
	if len(csv.Spec.APIServiceDefinitions.Owned)+len(csv.Spec.APIServiceDefinitions.Required) > 0 {
		errs = append(errs, "OLM v1: API service definitions are not supported")
	}
	if len(csv.Spec.WebhookDefinitions) > 0 {
		errs = append(errs, "OLM v1: webhook definitions are not supported here")
	}
	if _, err := os.Stat(filepath.Join(dir, "metadata", "dependencies.yaml")); err == nil {
		errs = append(errs, "OLM v1: metadata/dependencies.yaml declares dependencies, which OLM v1 rejects")
	}

	// What the catalog will say about the bundle: the properties rendered
	// from the directory, exactly as `opm render` derives them.
	in, err := registry.NewImageInput(image.SimpleReference(""), dir)
	if err != nil {
		return append(errs, fmt.Sprintf("OLM v1: render bundle properties: %v", err))
	}
	_, props, err := registry.ObjectsAndPropertiesFromBundle(in.Bundle)
	if err != nil {
		return append(errs, fmt.Sprintf("OLM v1: render bundle properties: %v", err))
	}
	var deps []string
	for _, p := range props {
		switch p.Type {
		case property.TypeGVKRequired, property.TypePackageRequired, property.TypeConstraint:
			deps = append(deps, p.Type+" "+string(p.Value))
		}
	}
	sort.Strings(deps)
	for _, d := range deps {
		errs = append(errs, "OLM v1: dependency property "+d+" is not supported")
	}
	return errs
}
