// Package version reports the operator's version and the major it serves.
package version

import (
	"fmt"
	"strconv"
	"strings"

	inferencestack "github.com/titanml/inference-stack-operator"
)

// Version and GitCommit may be stamped with -ldflags -X by the release build;
// Version defaults to the repository's VERSION file so that every build,
// including `go run` and tests, derives the same major.
var (
	Version   = ""
	GitCommit = "unknown"
)

// Get returns the semantic version the binary was built from.
func Get() string {
	if Version != "" {
		return Version
	}
	return inferencestack.Version()
}

// Major returns the major version label ("v0", "v1", ...) that this build
// reconciles; it is the value of the operatorVersion label it selects.
func Major() string {
	m, err := ParseMajor(Get())
	if err != nil {
		// VERSION is validated by tests and the release build; a broken stamp is
		// a build defect, not a runtime condition.
		panic(err)
	}
	return m
}

// ParseMajor validates a semantic version (MAJOR.MINOR.PATCH[-pre][+build])
// and returns its major as "v<MAJOR>".
func ParseMajor(v string) (string, error) {
	core := v
	if i := strings.IndexAny(core, "-+"); i >= 0 {
		core = core[:i]
	}
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return "", fmt.Errorf("version %q is not MAJOR.MINOR.PATCH", v)
	}
	for _, p := range parts {
		if p == "" || (len(p) > 1 && p[0] == '0') {
			return "", fmt.Errorf("version %q: %q is not a semver number", v, p)
		}
		if _, err := strconv.ParseUint(p, 10, 32); err != nil {
			return "", fmt.Errorf("version %q: %q is not a semver number", v, p)
		}
	}
	return "v" + parts[0], nil
}
