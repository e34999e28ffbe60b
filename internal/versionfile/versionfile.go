// Package versionfile reads and validates the repository's VERSION file: the
// one semantic version that names the operator binary, its bundle, and the
// catalog entry built from them.
package versionfile

import (
	"fmt"
	"os"
	"strings"

	"github.com/blang/semver/v4"
)

// Version is a validated release version.
type Version struct {
	semver.Version
}

// Parse validates s as a strict semantic version (MAJOR.MINOR.PATCH with an
// optional pre-release). A leading "v" and build metadata ("+...") are
// rejected: the version is used verbatim in image tags and CSV names, where a
// "+" is not allowed and a "v" would be doubled.
func Parse(s string) (Version, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Version{}, fmt.Errorf("invalid VERSION: empty")
	}
	if strings.HasPrefix(s, "v") || strings.HasPrefix(s, "V") {
		return Version{}, fmt.Errorf("invalid VERSION %q: write it without the leading %q (e.g. %q)", s, s[:1], s[1:])
	}
	v, err := semver.Parse(s)
	if err != nil {
		return Version{}, fmt.Errorf("invalid VERSION %q: not a semantic version MAJOR.MINOR.PATCH[-PRERELEASE]: %v", s, err)
	}
	if len(v.Build) > 0 {
		return Version{}, fmt.Errorf("invalid VERSION %q: build metadata (+...) is not allowed in image tags", s)
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
func (v Version) MajorTag() string { return fmt.Sprintf("v%d", v.Major) }
