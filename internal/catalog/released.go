package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"
	sigsyaml "sigs.k8s.io/yaml"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/internal/bundle"
	"github.com/titanml/inference-stack-operator/internal/oci"
)

// ReleasedDir holds one file per released version, relative to the
// repository root.
const ReleasedDir = "catalog/released"

// Release is the record `isctl release` writes for a released version:
// everything needed to put the bundle into a catalog without pulling it,
// and to rebuild the images and check that they reproduce.
type Release struct {
	Version string `json:"version"`
	// Revision is the git commit the release was built from (and stamped
	// into the operator binary and image labels).
	Revision string `json:"revision"`
	// SourceDateEpoch is the SOURCE_DATE_EPOCH the images were built with.
	SourceDateEpoch int64 `json:"sourceDateEpoch"`
	// GoVersion is the Go toolchain that compiled the operator.
	GoVersion string `json:"goVersion"`
	// Platforms are the operator image's platforms ("linux/amd64").
	Platforms     []string `json:"platforms"`
	OperatorImage string   `json:"operatorImage"`
	BundleImage   string   `json:"bundleImage"`
	// Bundle is the olm.bundle entry rendered from the bundle directory.
	Bundle declcfg.Bundle `json:"bundle"`

	// File is where the record was read from (not serialized).
	File string `json:"-"`
}

const releaseHeader = "# Written by `isctl release` (make release). Do not edit: the catalog is\n" +
	"# rendered from this entry, and `isctl verify` rebuilds the images at\n" +
	"# `revision` and checks that they reproduce these digests.\n"

// ReleaseFileName is the file name of version v's record.
func ReleaseFileName(v string) string { return v + ".yaml" }

// Marshal serializes r with sorted keys.
func (r Release) Marshal() ([]byte, error) {
	raw, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encoding the release of %s: %w", r.Version, err)
	}
	y, err := sigsyaml.JSONToYAML(raw)
	if err != nil {
		return nil, fmt.Errorf("encoding the release of %s: %w", r.Version, err)
	}
	return append([]byte(releaseHeader), y...), nil
}

// ParseRelease parses and checks one record; name is used in messages.
func ParseRelease(name string, data []byte) (Release, error) {
	var r Release
	if err := sigsyaml.UnmarshalStrict(data, &r); err != nil {
		return r, fmt.Errorf("%s: %w", name, err)
	}
	r.File = name
	return r, r.check()
}

func (r Release) check() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: %s", r.File, fmt.Sprintf(format, args...))
	}
	v, err := semver.Parse(r.Version)
	if err != nil {
		return fail("invalid version %q: %v", r.Version, err)
	}
	if base := filepath.Base(r.File); base != ReleaseFileName(r.Version) && r.File != "" {
		return fail("records version %s, so it must be named %s", r.Version, ReleaseFileName(r.Version))
	}
	if r.Revision == "" || strings.HasSuffix(r.Revision, "-dirty") {
		return fail("revision %q is not a commit", r.Revision)
	}
	if len(r.Platforms) == 0 {
		return fail("no platforms recorded")
	}
	if _, err := oci.ParseDigest(r.OperatorImage); err != nil {
		return fail("operatorImage: %v", err)
	}
	if _, err := oci.ParseDigest(r.BundleImage); err != nil {
		return fail("bundleImage: %v", err)
	}
	b := r.Bundle
	if b.Schema != declcfg.SchemaBundle || b.Image != r.BundleImage || b.Package != inferencestack.PackageName || b.Name != bundle.CSVName(v) {
		return fail("bundle entry must be an %s named %s in package %s with image %s", declcfg.SchemaBundle, bundle.CSVName(v), inferencestack.PackageName, r.BundleImage)
	}
	props, err := property.Parse(b.Properties)
	if err != nil {
		return fail("bundle properties: %v", err)
	}
	if len(props.Packages) != 1 || props.Packages[0].Version != r.Version || props.Packages[0].PackageName != inferencestack.PackageName {
		return fail("bundle entry must carry exactly one olm.package property for %s %s", inferencestack.PackageName, r.Version)
	}
	return nil
}

// LoadReleases reads every record under dir (a missing directory holds no
// releases) and checks that no version or bundle image is recorded twice.
func LoadReleases(dir string) ([]Release, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the released entries: %w", err)
	}
	var out []Release
	var errs []string
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		name := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("reading a released entry: %w", err)
		}
		r, err := ParseRelease(name, data)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		out = append(out, r)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("released entries:\n  - %s", strings.Join(errs, "\n  - "))
	}
	sort.Slice(out, func(i, j int) bool {
		return semver.MustParse(out[i].Version).LT(semver.MustParse(out[j].Version))
	})
	byVersion := map[string]string{}
	byImage := map[string]string{}
	for _, r := range out {
		key := semver.MustParse(r.Version).String()
		if prev, dup := byVersion[key]; dup {
			return nil, fmt.Errorf("two released bundles with version %s: %s and %s", r.Version, prev, r.File)
		}
		byVersion[key] = r.File
		if prev, dup := byImage[r.BundleImage]; dup {
			return nil, fmt.Errorf("bundle %s is recorded twice: %s and %s", r.BundleImage, prev, r.File)
		}
		byImage[r.BundleImage] = r.File
	}
	return out, nil
}

// Find returns the record of version v, if any.
func Find(rs []Release, v string) (Release, bool) {
	for _, r := range rs {
		if r.Version == v {
			return r, true
		}
	}
	return Release{}, false
}

// WriteRelease writes r into dir as <version>.yaml, refusing to overwrite
// a different record.
func WriteRelease(dir string, r Release) (string, error) {
	r.File = filepath.Join(dir, ReleaseFileName(r.Version))
	if err := r.check(); err != nil {
		return "", err
	}
	data, err := r.Marshal()
	if err != nil {
		return "", err
	}
	if old, err := os.ReadFile(r.File); err == nil {
		if string(old) == string(data) {
			return r.File, nil
		}
		return "", fmt.Errorf("%s already exists with different content; a released version is never rewritten", r.File)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("recording the release: %w", err)
	}
	return r.File, os.WriteFile(r.File, data, 0o644)
}
