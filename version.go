// Package inferencestack exposes facts of the repository that every part of
// the build reads, so that each has exactly one source.
package inferencestack

import (
	_ "embed"
	"strings"
)

//go:embed VERSION
var versionFile string

// Version is the operator release version from the VERSION file (semver,
// without a leading "v").
func Version() string { return strings.TrimSpace(versionFile) }
