// Package release publishes a version and checks published versions
// against the source.
//
// Run: from a clean commit whose CRD keeps the stacks of the last release
// valid (internal/crdcompat), build the images, push the operator and
// bundle by digest, record the bundle's rendered catalog entry in
// catalog/released/ and its digest in catalog/operator_catalog.yaml,
// rebuild (which must now reproduce the recorded digests) and push the
// catalog.
//
// Verify: for each recorded version, rebuild the images from the source at
// the recorded revision, with the tools of that revision, and compare.
package release

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/internal/build"
	"github.com/titanml/inference-stack-operator/internal/catalog"
	"github.com/titanml/inference-stack-operator/internal/crdcompat"
	"github.com/titanml/inference-stack-operator/internal/oci"
	"github.com/titanml/inference-stack-operator/internal/push"
	"github.com/titanml/inference-stack-operator/internal/srctree"
)

// Run releases the VERSION of cfg.Root. Re-running it for a version already
// recorded rebuilds, checks the digests reproduce, and pushes again (pushes
// are idempotent), so an interrupted release can simply be re-run.
func Run(ctx context.Context, cfg build.Config, po push.Options) (*build.Result, error) {
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", args...)
		}
	}
	if cfg.CurrentOnly {
		return nil, fmt.Errorf("a release builds the full catalog; drop the development-catalog option")
	}
	in, err := build.LoadInputs(cfg)
	if err != nil {
		return nil, fmt.Errorf("reading the release's inputs: %w", err)
	}
	if in.Release != nil {
		logf("%s is already released (%s): rebuilding to check the digests, then pushing again", in.Version, in.Release.File)
		return rerelease(ctx, cfg, po, in.Version.String())
	}

	commit, err := releaseCommit(ctx, cfg)
	if err != nil {
		return nil, err
	}
	cfg.Revision = commit
	if err := checkCRD(ctx, cfg.Root, in.Version.String(), logf); err != nil {
		return nil, err
	}

	logf("releasing %s from %s", in.Version, commit)
	res, err := build.Build(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("building %s: %w", in.Version, err)
	}
	if _, err := push.Outputs(ctx, res.Out, []string{build.Operator, build.Bundle}, po); err != nil {
		return nil, fmt.Errorf("pushing the operator and bundle of %s: %w", in.Version, err)
	}

	// Record the release, then rebuild: the catalog now lists the bundle
	// from its released entry, and the rebuild must reproduce the digests.
	file, err := record(cfg, res, in.Version.String(), logf)
	if err != nil {
		return nil, err
	}
	final, err := build.Build(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("rebuilding after recording the release: %w", err)
	}
	if err := checkReproduced(res, final); err != nil {
		return nil, err
	}
	if _, err := push.Outputs(ctx, final.Out, []string{build.Catalog}, po); err != nil {
		return nil, fmt.Errorf("pushing the catalog of %s: %w", in.Version, err)
	}
	logf("released %s. Commit %s and %s.", in.Version, file, catalog.TemplatePath)
	return final, nil
}

// rerelease rebuilds a recorded version, which must reproduce its recorded
// digests (build.Build checks them), and pushes its images again.
func rerelease(ctx context.Context, cfg build.Config, po push.Options, version string) (*build.Result, error) {
	res, err := build.Build(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("rebuilding %s: %w", version, err)
	}
	if _, err := push.Outputs(ctx, res.Out, build.Names, po); err != nil {
		return nil, fmt.Errorf("pushing %s again: %w", version, err)
	}
	return res, nil
}

// releaseCommit returns the commit a release is built from: that of a
// clean work tree, which cfg.Revision, when set, must name.
func releaseCommit(ctx context.Context, cfg build.Config) (string, error) {
	info, err := srctree.ReadRevision(ctx, cfg.Root)
	if err != nil {
		return "", fmt.Errorf("reading the source revision: %w", err)
	}
	if info.Commit == "" {
		return "", fmt.Errorf("a release is built from a git commit, and %s has none", cfg.Root)
	}
	if info.Dirty {
		st, _ := srctree.GitStatus(ctx, cfg.Root)
		return "", fmt.Errorf("the work tree has uncommitted changes; a release must be reproducible from its commit:\n%s", st)
	}
	if cfg.Revision != "" && cfg.Revision != info.Commit {
		return "", fmt.Errorf("a release stamps the commit it is built from (%s), not %s", info.Commit, cfg.Revision)
	}
	return info.Commit, nil
}

// checkCRD refuses a release whose CRD makes stacks of the last release
// invalid: the CRD ships outside the bundle, so nothing else stops it.
func checkCRD(ctx context.Context, root, version string, logf func(string, ...any)) error {
	compat, err := crdcompat.Check(ctx, root)
	if err != nil {
		return fmt.Errorf("checking the CRD against the last release: %w", err)
	}
	if err := compat.Err(); err != nil {
		return fmt.Errorf("refusing to release %s: %w", version, err)
	}
	logf("the CRD keeps the stacks of %s valid", compat.Baseline.Source)
	if err := compat.UnusedErr(); err != nil {
		logf("note: %v", err)
	}
	return nil
}

// record writes the release's catalog entry to catalog/released/ and adds
// its bundle to the catalog template, returning the entry's file.
func record(cfg build.Config, res *build.Result, version string, logf func(string, ...any)) (string, error) {
	file, err := catalog.WriteRelease(filepath.Join(cfg.Root, catalog.ReleasedDir), res.CurrentEntry)
	if err != nil {
		return "", fmt.Errorf("recording the release of %s: %w", version, err)
	}
	tmplPath := filepath.Join(cfg.Root, catalog.TemplatePath)
	tmpl, err := os.ReadFile(tmplPath)
	if err != nil {
		return "", fmt.Errorf("reading the catalog template: %w", err)
	}
	archetypes := cfg.Archetypes
	if len(archetypes) == 0 {
		archetypes = inferencestack.DefaultArchetypes()
	}
	updated, err := catalog.AddBundle(tmpl, res.Image(build.Bundle).Ref, archetypes)
	if err != nil {
		return "", fmt.Errorf("adding the bundle of %s to the catalog template: %w", version, err)
	}
	if err := os.WriteFile(tmplPath, updated, 0o644); err != nil {
		return "", fmt.Errorf("writing the catalog template: %w", err)
	}
	logf("recorded %s and added the bundle to %s (%s)", file, catalog.TemplatePath, strings.Join(archetypes, ", "))
	return file, nil
}

// checkReproduced requires the rebuild after recording to give the
// operator and bundle digests that were pushed.
func checkReproduced(pushed, rebuilt *build.Result) error {
	for _, n := range []string{build.Operator, build.Bundle} {
		if rebuilt.Image(n).Ref != pushed.Image(n).Ref {
			return fmt.Errorf("the rebuild of %s did not reproduce: %s then %s", n, pushed.Image(n).Ref, rebuilt.Image(n).Ref)
		}
	}
	return nil
}

// Verification is the outcome of rebuilding one recorded version.
type Verification struct {
	Version          string
	Revision         string
	Operator, Bundle struct{ Recorded, Rebuilt string }
}

// OK reports whether both digests reproduced.
func (v Verification) OK() bool {
	return v.Operator.Recorded == v.Operator.Rebuilt && v.Bundle.Recorded == v.Bundle.Rebuilt
}

// VerifyOptions configure Verify.
type VerifyOptions struct {
	// Versions restricts the check; empty means every recorded version.
	Versions []string
	// WorkDir holds the checked-out trees and their rebuilds; default a
	// temporary directory, removed afterwards. A rebuild of the same
	// revision found there (from an earlier run) is reused.
	WorkDir string
	// Env holds extra environment entries for the rebuild.
	Env []string
	Log io.Writer
}

// Verify rebuilds recorded versions of the repository at root from their
// recorded revision (git archive), with the build tool of that revision,
// and compares the operator and bundle digests with the record.
func Verify(ctx context.Context, root string, o VerifyOptions) ([]Verification, error) {
	rels, err := catalog.LoadReleases(filepath.Join(root, catalog.ReleasedDir))
	if err != nil {
		return nil, fmt.Errorf("reading the recorded releases: %w", err)
	}
	want := map[string]bool{}
	for _, v := range o.Versions {
		want[v] = true
	}
	work := o.WorkDir
	if work == "" {
		if work, err = os.MkdirTemp("", "isctl-verify-"); err != nil {
			return nil, fmt.Errorf("creating the verification directory: %w", err)
		}
		defer os.RemoveAll(work)
	}
	var out []Verification
	for _, r := range rels {
		if len(want) > 0 && !want[r.Version] {
			continue
		}
		delete(want, r.Version)
		v, err := verifyOne(ctx, root, work, r, o)
		if err != nil {
			return out, fmt.Errorf("verify %s: %w", r.Version, err)
		}
		out = append(out, v)
	}
	for v := range want {
		return out, fmt.Errorf("version %s has no record in %s", v, catalog.ReleasedDir)
	}
	return out, nil
}

func verifyOne(ctx context.Context, root, work string, r catalog.Release, o VerifyOptions) (Verification, error) {
	v := Verification{Version: r.Version, Revision: r.Revision}
	out, err := rebuild(ctx, root, work, r, o)
	if err != nil {
		return v, err
	}
	refs, err := build.ReadDigests(out)
	if err != nil {
		return v, fmt.Errorf("reading the rebuilt digests of %s: %w", r.Version, err)
	}
	v.Operator.Recorded, v.Operator.Rebuilt = r.OperatorImage, refs[build.Operator].String()
	v.Bundle.Recorded, v.Bundle.Rebuilt = r.BundleImage, refs[build.Bundle].String()
	return v, nil
}

// rebuiltMarker, in a rebuilt tree, holds the revision its out/ was built
// from: a later verification of the same revision reuses the rebuild.
const rebuiltMarker = ".isctl-rebuilt"

// rebuild builds the release r from its recorded revision (git archive into
// work/<version>, then that revision's own isctl) and returns the output
// directory of the rebuild.
func rebuild(ctx context.Context, root, work string, r catalog.Release, o VerifyOptions) (string, error) {
	tree := filepath.Join(work, r.Version)
	out := filepath.Join(tree, "out")
	if done, err := os.ReadFile(filepath.Join(tree, rebuiltMarker)); err == nil && string(done) == r.Revision {
		if o.Log != nil {
			fmt.Fprintf(o.Log, "reusing the rebuild of %s from %s in %s\n", r.Version, r.Revision, tree)
		}
		return out, nil
	}
	if err := os.RemoveAll(tree); err != nil {
		return "", fmt.Errorf("clearing the tree of %s: %w", r.Version, err)
	}
	if err := os.MkdirAll(tree, 0o755); err != nil {
		return "", fmt.Errorf("creating the tree of %s: %w", r.Version, err)
	}
	if o.Log != nil {
		fmt.Fprintf(o.Log, "rebuilding %s from %s\n", r.Version, r.Revision)
	}
	archive := exec.CommandContext(ctx, "git", "archive", "--format=tar", r.Revision)
	archive.Dir = root
	var tarball, stderr bytes.Buffer
	archive.Stdout, archive.Stderr = &tarball, &stderr
	if err := archive.Run(); err != nil {
		return "", fmt.Errorf("git archive %s (is the release commit in this clone?): %w: %s", r.Revision, err, strings.TrimSpace(stderr.String()))
	}
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", tree)
	untar.Stdin = &tarball
	if out, err := untar.CombinedOutput(); err != nil {
		return "", fmt.Errorf("unpack %s: %w: %s", r.Revision, err, out)
	}
	if got, err := os.ReadFile(filepath.Join(tree, "VERSION")); err != nil || strings.TrimSpace(string(got)) != r.Version {
		return "", fmt.Errorf("revision %s does not hold VERSION %s (found %q, %v)", r.Revision, r.Version, strings.TrimSpace(string(got)), err)
	}
	op, _ := oci.ParseDigest(r.OperatorImage)
	bd, _ := oci.ParseDigest(r.BundleImage)
	// Revisions older than the tag-free catalog renderer need the tag to
	// build isctl without cgo; newer ones ignore it.
	cmd := exec.CommandContext(ctx, "go", "run", "-tags", "containers_image_openpgp", "./tools/cmd/isctl", "build",
		"--revision", r.Revision,
		"--operator-repo", op.Repository, "--bundle-repo", bd.Repository,
		"--platforms", strings.Join(r.Platforms, ","),
		"--out", out)
	cmd.Dir = tree
	cmd.Env = append(append(os.Environ(), fmt.Sprintf("SOURCE_DATE_EPOCH=%d", r.SourceDateEpoch), "GOFLAGS=-mod=readonly"), o.Env...)
	var buildOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buildOut, &buildOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("rebuild at %s failed: %w\n%s", r.Revision, err, buildOut.String())
	}
	if err := os.WriteFile(filepath.Join(tree, rebuiltMarker), []byte(r.Revision), 0o644); err != nil {
		return "", fmt.Errorf("recording the rebuild of %s: %w", r.Version, err)
	}
	return out, nil
}
