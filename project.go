// Package inferencestack holds the facts of the project that the operator,
// the image build, the charts' tests and the end-to-end tests share, each
// stated once: the module path, the OLM package and its channels, the one
// rule for versions, the major derived from a version and the names derived
// from a major. The operator binary links it, so it imports nothing heavy.
package inferencestack

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/blang/semver/v4"
)

// ModulePath is the Go module of the repository (this package's import
// path).
const ModulePath = "github.com/titanml/inference-stack-operator"

// PackageName is the operator's OLM package. The catalog, the default
// ClusterCatalog and every per-major object are named after it.
const PackageName = "inference-stack-operator"

// CatalogName is the default name of the ClusterCatalog serving the
// operator's catalog.
const CatalogName = PackageName

// Group is the API group of InferenceStack, which also qualifies the
// operator's leader-election lease.
const Group = "models.takeoff.co"

//go:embed VERSION
var versionFile string

// Version is the operator release version from the VERSION file (semver,
// without a leading "v").
func Version() string { return strings.TrimSpace(versionFile) }

// ParseVersion is the one rule for the project's versions (VERSION, the
// version stamped into the operator, the bundle and catalog versions):
// MAJOR.MINOR.PATCH with an optional pre-release, as semver.org defines them.
// A leading "v" and build metadata ("+...") are rejected: the version is
// used verbatim in image tags, where "+" is not allowed, and in CSV names,
// where a "v" would be doubled.
func ParseVersion(s string) (semver.Version, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return semver.Version{}, fmt.Errorf("empty version")
	}
	if strings.HasPrefix(s, "v") || strings.HasPrefix(s, "V") {
		return semver.Version{}, fmt.Errorf("version %q: write it without the leading %q (e.g. %q)", s, s[:1], s[1:])
	}
	v, err := semver.Parse(s)
	if err != nil {
		return semver.Version{}, fmt.Errorf("version %q is not a semantic version MAJOR.MINOR.PATCH[-PRERELEASE]: %w", s, err)
	}
	if len(v.Build) > 0 {
		return semver.Version{}, fmt.Errorf("version %q: build metadata (+...) is not allowed in image tags", s)
	}
	return v, nil
}

// ParseVersionFile checks a VERSION file's content, or a version given in
// its place, with ParseVersion.
func ParseVersionFile(s string) (semver.Version, error) {
	v, err := ParseVersion(s)
	if err != nil {
		return semver.Version{}, fmt.Errorf("invalid VERSION: %w", err)
	}
	return v, nil
}

// ReadVersionFile reads and checks the VERSION file at path: one line, a
// version ParseVersion accepts.
func ReadVersionFile(path string) (semver.Version, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return semver.Version{}, fmt.Errorf("read VERSION: %w", err)
	}
	if strings.Count(strings.TrimSpace(string(b)), "\n") > 0 {
		return semver.Version{}, fmt.Errorf("invalid VERSION file %s: it must hold exactly one line", path)
	}
	return ParseVersionFile(string(b))
}

// Major is the major of v as the project writes it, "v<MAJOR>": the
// operatorVersion label value the operator of that major reconciles, and
// the suffix of its channels and per-major names.
func Major(v semver.Version) string { return fmt.Sprintf("v%d", v.Major) }

// MajorOf parses version (ParseVersion) and returns its major.
func MajorOf(version string) (string, error) {
	v, err := ParseVersion(version)
	if err != nil {
		return "", err
	}
	return Major(v), nil
}

// Channel archetypes of the semver catalog template; each becomes one
// channel per major (Channel).
const (
	Stable    = "stable"
	Fast      = "fast"
	Candidate = "candidate"
)

// DefaultArchetypes are the channel archetypes a new bundle joins unless
// told otherwise, most stable first; the bundle's channels annotation lists
// them.
func DefaultArchetypes() []string { return []string{Stable, Fast} }

// Channel is the channel of archetype for major ("stable-v0"), as the
// semver template generates it with GenerateMajorChannels.
func Channel(archetype, major string) string { return archetype + "-" + major }

// InstanceName names what exists once per major: the bundle's operator
// Deployment and ServiceAccount (and the objects derived from them).
func InstanceName(major string) string { return PackageName + "-" + major }

// ExtensionName is the default name of a major's ClusterExtension.
func ExtensionName(major string) string { return InstanceName(major) }

// Namespace is the default install namespace of a major: one per major,
// because the bundle's Deployment keeps its name across versions.
func Namespace(major string) string { return InstanceName(major) }

// InstallerName is the default ServiceAccount (and ClusterRole, Role and
// bindings) OLM installs a major's bundle with.
func InstallerName(major string) string { return InstanceName(major) + "-installer" }

// LeaseID is the leader-election lease of a major's operator. It carries
// the major so that two majors never share one.
func LeaseID(major string) string { return PackageName + "-" + major + "." + Group }

// OperatorNamespacesAnnotation, on the InferenceStack CRD, maps each major
// to the namespace its operator is installed in, as JSON
// ({"v0":"inference-stack-operator-v0"}). The catalog chart writes it; an
// operator reads another major's Lease only there (Namespace(major) for a
// major it does not list), because only cluster admins can write a CRD
// while a namespace's editors can create Leases.
const OperatorNamespacesAnnotation = Group + "/operator-namespaces"

// OperatorNamespaces reads the value of OperatorNamespacesAnnotation (empty:
// no entries).
func OperatorNamespaces(value string) (map[string]string, error) {
	out := map[string]string{}
	if value == "" {
		return out, nil
	}
	if err := json.Unmarshal([]byte(value), &out); err != nil {
		return nil, fmt.Errorf(`the annotation %s is not a JSON object of majors to namespaces ({"v0":"inference-stack-operator-v0"}): %w`,
			OperatorNamespacesAnnotation, err)
	}
	return out, nil
}
