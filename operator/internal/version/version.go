// Package version reports the operator's version and the major it serves.
package version

import (
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
	m, err := inferencestack.MajorOf(Get())
	if err != nil {
		// VERSION is validated by tests and the release build; a broken stamp is
		// a build defect, not a runtime condition.
		panic(err)
	}
	return m
}
