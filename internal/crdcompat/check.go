package crdcompat

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/internal/catalog"
	"github.com/titanml/inference-stack-operator/internal/srctree"
)

const (
	// CRDPath is the CRD in the source tree (written by `make generate`).
	CRDPath = "crds/models.takeoff.co_inferencestacks.yaml"
	// AcceptedPath lists the reported changes a version makes on purpose.
	AcceptedPath = "operator/api/crd-compatibility.yaml"
)

// Baseline is the CRD that stacks in clusters were created against.
type Baseline struct {
	CRD *apiextensionsv1.CustomResourceDefinition
	// Commit is the git commit it was read from.
	Commit string
	// Source says why that commit ("release 0.1.0", or "commit ... where
	// VERSION became 0.1.0; no release is recorded").
	Source string
}

// FindBaseline returns the CRD to compare the source tree at root with:
// the CRD at the commit of the newest release recorded in
// catalog/released/; with no release recorded, the CRD at the commit that
// last changed VERSION, i.e. as it was when the version under development
// began (the releases of the previous version, if they existed, shipped
// it). It needs git and the commit in the clone.
func FindBaseline(ctx context.Context, root string) (*Baseline, error) {
	rels, err := catalog.LoadReleases(filepath.Join(root, catalog.ReleasedDir))
	if err != nil {
		return nil, err
	}
	var b Baseline
	if len(rels) > 0 {
		last := rels[len(rels)-1] // sorted by version
		b.Commit = last.Revision
		b.Source = fmt.Sprintf("release %s (%s, commit %s)", last.Version, last.File, short(last.Revision))
	} else {
		commit, err := srctree.Git(ctx, root, "log", "-1", "--format=%H", "--", "VERSION")
		if err != nil {
			return nil, err
		}
		if commit == "" {
			return nil, fmt.Errorf("no release is recorded in %s and VERSION was never committed: no CRD to compare with", catalog.ReleasedDir)
		}
		b.Commit = commit
		b.Source = fmt.Sprintf("commit %s, where VERSION was last changed (no release is recorded in %s)", short(commit), catalog.ReleasedDir)
	}
	data, err := srctree.Git(ctx, root, "show", b.Commit+":"+CRDPath)
	if err != nil {
		return nil, fmt.Errorf("reading the CRD of %s (is that commit in this clone? a shallow clone needs `git fetch --unshallow`): %w", b.Source, err)
	}
	if b.CRD, err = Decode([]byte(data)); err != nil {
		return nil, fmt.Errorf("the CRD of %s: %w", b.Source, err)
	}
	return &b, nil
}

// Decode parses a CRD, strictly.
func Decode(data []byte) (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		return nil, fmt.Errorf("decoding the CRD: %w", err)
	}
	return crd, nil
}

// Acceptance is one reported change that a version makes on purpose
// because it breaks no stack that could ever deploy.
type Acceptance struct {
	// Version is the release that makes the change; only the acceptances
	// of the version under development (VERSION) apply.
	Version string `json:"version"`
	// Field is a Finding's field, where "*" matches any run of characters
	// within one dot-separated part ("^.spec.*.livenessProbe.*") and a
	// part "**" any number of parts ("^.spec.**.name").
	Field string `json:"field"`
	// Check is the Finding's check ("minimum", "rules", ...).
	Check string `json:"check"`
	// Why the change breaks no stack.
	Why string `json:"why"`
}

func (a Acceptance) matches(f Finding) bool {
	if a.Check != f.Check {
		return false
	}
	return matchParts(strings.Split(a.Field, "."), strings.Split(f.Field, "."))
}

// matchParts matches a field's parts against a pattern's.
func matchParts(pp, fp []string) bool {
	if len(pp) == 0 {
		return len(fp) == 0
	}
	if pp[0] == "**" {
		for i := 0; i <= len(fp); i++ {
			if matchParts(pp[1:], fp[i:]) {
				return true
			}
		}
		return false
	}
	if len(fp) == 0 {
		return false
	}
	re := "^" + strings.ReplaceAll(regexp.QuoteMeta(pp[0]), `\*`, ".*") + "$"
	return regexp.MustCompile(re).MatchString(fp[0]) && matchParts(pp[1:], fp[1:])
}

// LoadAcceptances reads AcceptedPath in root; a missing file holds none.
func LoadAcceptances(root string) ([]Acceptance, error) {
	data, err := os.ReadFile(filepath.Join(root, AcceptedPath))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the accepted CRD changes: %w", err)
	}
	var file struct {
		Accepted []Acceptance `json:"accepted"`
	}
	if err := yaml.UnmarshalStrict(data, &file); err != nil {
		return nil, fmt.Errorf("%s: %w", AcceptedPath, err)
	}
	for i, a := range file.Accepted {
		v, err := inferencestack.ParseVersion(a.Version)
		if err != nil || a.Field == "" || a.Check == "" || strings.TrimSpace(a.Why) == "" {
			return nil, fmt.Errorf("%s: accepted[%d] needs a version, a field, a check and why (%+v)", AcceptedPath, i, a)
		}
		file.Accepted[i].Version = v.String()
	}
	return file.Accepted, nil
}

// Result is the outcome of Check.
type Result struct {
	Baseline *Baseline
	Version  string
	// Breaking are the findings no acceptance of Version covers.
	Breaking []Finding
	// Accepted are the findings an acceptance covers.
	Accepted []Finding
	// Unused are acceptances of Version that match no finding: stale or
	// misspelt, or the baseline already has the change (a history
	// squashed into one commit). A misspelt one leaves its change
	// unaccepted, so only tidiness is at stake: UnusedErr reports them.
	Unused []Acceptance
}

// Err describes the breaking changes, or returns nil: the verdict.
func (r *Result) Err() error {
	if len(r.Breaking) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the InferenceStack CRD (%s) has %d change(s) since %s that can break existing stacks:\n", CRDPath, len(r.Breaking), r.Baseline.Source)
	for _, f := range r.Breaking {
		fmt.Fprintf(&b, "  - %s\n", f)
	}
	fmt.Fprintf(&b, "Keep the old schema accepting what it accepted (add fields, widen, add a new CRD version), "+
		"or, for a change that rejects only what could never deploy, add it with the reason to %s under version %s.", AcceptedPath, r.Version)
	return fmt.Errorf("%s", b.String())
}

// UnusedErr describes the acceptances that match no change, or returns
// nil. The repository's own test fails on it, so the list stays exact; a
// release does not (its tree may be a copy without the history).
func (r *Result) UnusedErr() error {
	if len(r.Unused) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s lists changes for %s that the CRD does not make since %s (remove them):", AcceptedPath, r.Version, r.Baseline.Source)
	for _, a := range r.Unused {
		fmt.Fprintf(&b, "\n  - %s (%s)", a.Field, a.Check)
	}
	return fmt.Errorf("%s", b.String())
}

// Check compares the CRD of the source tree at root with its baseline
// (FindBaseline) and sorts the findings by the acceptances of the version
// in VERSION. Call Err on the result for the verdict.
func Check(ctx context.Context, root string) (*Result, error) {
	v, err := inferencestack.ReadVersionFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(root, CRDPath))
	if err != nil {
		return nil, fmt.Errorf("reading the CRD: %w", err)
	}
	current, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CRDPath, err)
	}
	base, err := FindBaseline(ctx, root)
	if err != nil {
		return nil, err
	}
	acc, err := LoadAcceptances(root)
	if err != nil {
		return nil, err
	}
	findings, err := Compare(base.CRD, current)
	if err != nil {
		return nil, err
	}
	r := &Result{Baseline: base, Version: v.String()}
	used := make([]bool, len(acc))
	for _, f := range findings {
		accepted := false
		for i, a := range acc {
			if a.Version == r.Version && a.matches(f) {
				accepted, used[i] = true, true
			}
		}
		if accepted {
			r.Accepted = append(r.Accepted, f)
		} else {
			r.Breaking = append(r.Breaking, f)
		}
	}
	for i, a := range acc {
		if a.Version == r.Version && !used[i] {
			r.Unused = append(r.Unused, a)
		}
	}
	return r, nil
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
