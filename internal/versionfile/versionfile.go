// Package versionfile reads and validates the repository's VERSION file: the
// one semantic version that names the operator binary, its bundle, and the
// catalog entry built from them.
package versionfile

import (
	"fmt"
	"os"
	"strings"

	"github.com/blang/semver/v4"

	inferencestack "github.com/titanml/inference-stack-operator"
)

// Version is a validated release version.
type Version struct {
	semver.Version
}

// Parse validates s with the project's one version rule
// (inferencestack.ParseVersion).
func Parse(s string) (Version, error) {
	v, err := inferencestack.ParseVersion(s)
	if err != nil {
		return Version{}, fmt.Errorf("invalid VERSION: %w", err)
	}
	return Version{v}, nil
}

// Read reads and validates the VERSION file at path.
func Read(path string) (Version, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Version{}, fmt.Errorf("read VERSION: %w", err)
	}
	if strings.Count(strings.TrimSpace(string(b)), "\n") > 0 {
		return Version{}, fmt.Errorf("invalid VERSION file %s: it must hold exactly one line", path)
	}
	return Parse(string(b))
}

// MajorTag is the "v<MAJOR>" suffix used in channel names,
// cluster-scoped object names and the leader-election ID.
func (v Version) MajorTag() string { return inferencestack.Major(v.Version) }
