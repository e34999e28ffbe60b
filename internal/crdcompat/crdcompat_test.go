package crdcompat

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/crds"
	"github.com/titanml/inference-stack-operator/internal/bundle"
	"github.com/titanml/inference-stack-operator/internal/catalog"
)

// current is the CRD of this source tree.
func current(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd, err := Decode(crds.InferenceStackYAML)
	if err != nil {
		t.Fatal(err)
	}
	return crd
}

// edit changes a CRD version's root schema.
type edit func(root *apiextensionsv1.JSONSchemaProps)

// at edits the schema node at a dotted path of property names; "*" steps
// into additionalProperties, "[]" into items. Properties are values in a
// map, so each node on the way is written back.
func at(path string, f func(s *apiextensionsv1.JSONSchemaProps)) edit {
	return func(root *apiextensionsv1.JSONSchemaProps) {
		var walk func(s *apiextensionsv1.JSONSchemaProps, parts []string)
		walk = func(s *apiextensionsv1.JSONSchemaProps, parts []string) {
			if len(parts) == 0 {
				f(s)
				return
			}
			switch parts[0] {
			case "*":
				walk(s.AdditionalProperties.Schema, parts[1:])
			case "[]":
				walk(s.Items.Schema, parts[1:])
			default:
				p, ok := s.Properties[parts[0]]
				if !ok {
					panic("no property " + parts[0] + " in " + path)
				}
				walk(&p, parts[1:])
				s.Properties[parts[0]] = p
			}
		}
		walk(root, strings.Split(path, "."))
	}
}

func changed(t *testing.T, edits ...edit) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := current(t)
	for _, e := range edits {
		e(crd.Spec.Versions[0].Schema.OpenAPIV3Schema)
	}
	return crd
}

func ptr[T any](v T) *T { return &v }

// Breaking changes planted in the real CRD are reported, each naming the
// field and the check.
func TestBreakingChanges(t *testing.T) {
	reader := "spec.applications.*.readerConfig"
	for _, tc := range []struct {
		name  string
		edit  edit
		field string
		check string
	}{
		{"field removed", at(reader, func(s *apiextensionsv1.JSONSchemaProps) { delete(s.Properties, "quantType") }),
			"^.spec.applications[*].readerConfig.quantType", "existingFieldRemoval"},
		{"enum narrowed", at(reader+".device", func(s *apiextensionsv1.JSONSchemaProps) {
			s.Enum = s.Enum[:1]
		}), "^.spec.applications[*].readerConfig.device", "enum"},
		{"required field added", at("spec.gateway.image", func(s *apiextensionsv1.JSONSchemaProps) {
			s.Required = append(s.Required, "repository")
		}), "^.spec.gateway.image", "required"},
		{"maximum lowered", at(reader+".tensorParallel", func(s *apiextensionsv1.JSONSchemaProps) {
			s.Maximum = ptr(8.0)
		}), "^.spec.applications[*].readerConfig.tensorParallel", "maximum"},
		{"minimum added", at("spec.applicationTemplate.livenessProbe.periodSeconds", func(s *apiextensionsv1.JSONSchemaProps) {
			s.Minimum = ptr(1.0)
		}), "^.spec.applicationTemplate.livenessProbe.periodSeconds", "minimum"},
		{"maxLength added", at(reader+".quantType", func(s *apiextensionsv1.JSONSchemaProps) {
			s.MaxLength = ptr(int64(8))
		}), "^.spec.applications[*].readerConfig.quantType", "maxLength"},
		{"type changed", at("spec.gateway.replicaCount", func(s *apiextensionsv1.JSONSchemaProps) {
			s.Type, s.Format = "string", ""
		}), "^.spec.gateway.replicaCount", "type"},
		{"CEL rule added", at("spec.applications", func(s *apiextensionsv1.JSONSchemaProps) {
			s.XValidations = append(s.XValidations, apiextensionsv1.ValidationRule{Rule: "size(self) < 3", Message: "at most 2"})
		}), "^.spec.applications", "rules"},
		{"pattern added", at(reader+".quantType", func(s *apiextensionsv1.JSONSchemaProps) {
			s.Pattern = "^[a-z]+$"
		}), "^.spec.applications[*].readerConfig.quantType", "pattern"},
		{"unknown fields no longer preserved", at(reader, func(s *apiextensionsv1.JSONSchemaProps) {
			s.XPreserveUnknownFields = nil
		}), "^.spec.applications[*].readerConfig", "unhandled"},
		{"default added", at("spec.gateway.replicaCount", func(s *apiextensionsv1.JSONSchemaProps) {
			s.Default = &apiextensionsv1.JSON{Raw: []byte("2")}
		}), "^.spec.gateway.replicaCount", "default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Compare(current(t), changed(t, tc.edit))
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, f := range got {
				t.Logf("%s", f)
				if f.Field == tc.field && f.Check == tc.check {
					found = true
					// The message names the field without crdify's "^.".
					if !strings.Contains(f.String(), strings.TrimPrefix(tc.field, "^.")) {
						t.Errorf("%q does not name the field", f)
					}
				}
			}
			if !found {
				t.Errorf("no %s finding at %s among %v", tc.check, tc.field, got)
			}
		})
	}

	t.Run("scope changed", func(t *testing.T) {
		crd := current(t)
		crd.Spec.Scope = apiextensionsv1.ClusterScoped
		got, err := Compare(current(t), crd)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 || got[0].Check != "scope" {
			t.Errorf("findings %v, want a scope change", got)
		}
	})
}

// Changes that keep every stored stack valid pass.
func TestCompatibleChanges(t *testing.T) {
	reader := "spec.applications.*.readerConfig"
	edits := []edit{
		at(reader, func(s *apiextensionsv1.JSONSchemaProps) {
			s.Properties["pageCacheSize"] = apiextensionsv1.JSONSchemaProps{Type: "integer", Minimum: ptr(1.0)}
		}),
		at(reader+".device", func(s *apiextensionsv1.JSONSchemaProps) {
			s.Enum = append(s.Enum, apiextensionsv1.JSON{Raw: []byte(`"rocm"`)})
			s.Description = "reworded"
		}),
		at(reader+".tensorParallel", func(s *apiextensionsv1.JSONSchemaProps) { s.Maximum = ptr(64.0) }),
		at("spec.fullnameOverride", func(s *apiextensionsv1.JSONSchemaProps) { s.Pattern = "" }),
		at("spec.applications", func(s *apiextensionsv1.JSONSchemaProps) {
			s.XValidations[0].Message = "a clearer message for the same rule"
		}),
		at("spec.gateway.volumes.[].name", func(s *apiextensionsv1.JSONSchemaProps) { s.Description = "" }),
	}
	crd := changed(t, edits...)
	crd.Spec.Versions[0].AdditionalPrinterColumns = append(crd.Spec.Versions[0].AdditionalPrinterColumns,
		apiextensionsv1.CustomResourceColumnDefinition{Name: "Apps", Type: "string", JSONPath: ".spec.applications"})
	got, err := Compare(current(t), crd)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("compatible changes reported as breaking: %v", got)
	}
	if got, _ := Compare(current(t), current(t)); len(got) != 0 {
		t.Errorf("the CRD is not compatible with itself: %v", got)
	}
}

func TestAcceptanceMatching(t *testing.T) {
	f := Finding{Version: "v1alpha1", Field: "^.spec.applications[*].livenessProbe.periodSeconds", Check: "minimum"}
	for pattern, want := range map[string]bool{
		"^.spec.applications[*].livenessProbe.periodSeconds": true,
		"^.spec.*.*Probe.periodSeconds":                      true,
		"^.spec.*.*Probe.*":                                  true,
		"^.spec.*.periodSeconds":                             false, // one part per "*"
		"^.spec.gateway.*Probe.periodSeconds":                false,
		"^.spec.**.periodSeconds":                            true, // any number of parts
		"^.**.livenessProbe.**":                              true,
		"^.spec.**.livenessProbe":                            false,
		"^.spec.**.gateway.**":                               false,
	} {
		if got := (Acceptance{Field: pattern, Check: "minimum"}).matches(f); got != want {
			t.Errorf("%s matches = %v, want %v", pattern, got, want)
		}
	}
	if (Acceptance{Field: f.Field, Check: "maximum"}).matches(f) {
		t.Error("an acceptance of another check matched")
	}
}

func runGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func write(t *testing.T, dir, name string, data []byte) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeCRD(t *testing.T, dir string, crd *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	data, err := yaml.Marshal(crd)
	if err != nil {
		t.Fatal(err)
	}
	write(t, dir, CRDPath, data)
}

// Check finds its baseline in git: the commit that last changed VERSION
// while no release is recorded, then the recorded release's commit; it
// fails on breaking changes, passes accepted ones and rejects stale
// acceptances.
func TestCheckInAGitRepository(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	ctx := context.Background()
	dir := t.TempDir()
	runGit(t, dir, "init", "-q")
	write(t, dir, "VERSION", []byte("0.1.0\n"))
	writeCRD(t, dir, current(t))
	runGit(t, dir, "add", "-A")
	runGit(t, dir, "commit", "-qm", "0.1.0 begins")
	start := runGit(t, dir, "rev-parse", "HEAD")

	check := func() *Result {
		t.Helper()
		r, err := Check(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := check(); r.Err() != nil || r.Baseline.Commit != start {
		t.Fatalf("unchanged CRD: %v (baseline %s)", r.Err(), r.Baseline.Source)
	}

	// A breaking change, committed or not, fails against the commit where
	// VERSION was set, naming the field.
	narrowed := changed(t, at("spec.applications.*.readerConfig.device", func(s *apiextensionsv1.JSONSchemaProps) { s.Enum = s.Enum[:1] }))
	writeCRD(t, dir, narrowed)
	runGit(t, dir, "commit", "-qam", "narrow device")
	r := check()
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "spec.applications[*].readerConfig.device (enum)") || !strings.Contains(err.Error(), "no release is recorded") {
		t.Fatalf("narrowed enum: %v", err)
	} else {
		t.Logf("%v", err)
	}

	// Accepted for the version under development: passes. The same entry
	// for another version does not apply.
	accept := func(version string, field string) {
		write(t, dir, AcceptedPath, []byte("accepted:\n- version: "+version+"\n  field: "+field+"\n  check: enum\n  why: test\n"))
	}
	accept("0.0.9", "^.spec.*.readerConfig.device")
	if check().Err() == nil {
		t.Fatal("an acceptance of another version applied")
	}
	accept("0.1.0", "^.spec.*.readerConfig.device")
	if r := check(); r.Err() != nil || len(r.Accepted) != 1 {
		t.Fatalf("accepted change: %v, accepted %v", r.Err(), r.Accepted)
	}
	// An acceptance that matches nothing is reported apart: it leaves the
	// change it meant unaccepted, and is stale besides.
	accept("0.1.0", "^.spec.*.readerConfig.quantType")
	r = check()
	if err := r.UnusedErr(); err == nil || !strings.Contains(err.Error(), "does not make") {
		t.Fatalf("stale acceptance: %v", err)
	}
	if r.Err() == nil {
		t.Fatal("a misspelt acceptance accepted the change")
	}
	os.Remove(filepath.Join(dir, AcceptedPath))

	// Once a release is recorded, its commit is the baseline.
	released := runGit(t, dir, "rev-parse", "HEAD")
	v := semver.MustParse("0.1.0")
	bundleRef := "example.com/bundle@sha256:" + strings.Repeat("b", 64)
	rel := catalog.Release{
		Version: "0.1.0", Revision: released, Platforms: []string{"linux/amd64"},
		OperatorImage: "example.com/operator@sha256:" + strings.Repeat("a", 64), BundleImage: bundleRef,
		Bundle: declcfg.Bundle{Schema: declcfg.SchemaBundle, Name: bundle.CSVName(v), Package: inferencestack.PackageName, Image: bundleRef,
			Properties: []property.Property{property.MustBuildPackage(inferencestack.PackageName, "0.1.0")}},
	}
	if _, err := catalog.WriteRelease(filepath.Join(dir, catalog.ReleasedDir), rel); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "VERSION", []byte("0.2.0\n"))
	runGit(t, dir, "add", "-A")
	runGit(t, dir, "commit", "-qm", "release 0.1.0, begin 0.2.0")
	if r := check(); r.Err() != nil || r.Baseline.Commit != released || !strings.Contains(r.Baseline.Source, "release 0.1.0") {
		t.Fatalf("after the release: %v (baseline %s)", r.Err(), r.Baseline.Source)
	}
	// Restoring the removed enum value is compatible with the release.
	writeCRD(t, dir, current(t))
	if err := check().Err(); err != nil {
		t.Fatalf("widening after the release: %v", err)
	}
}
