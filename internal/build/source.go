package build

// Where the programs the images package come from: compiled here from the
// source tree (the release path), or compiled elsewhere and handed over as
// files (the Bazel build's compile actions, the end-to-end tests' binaries).

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"strings"

	"github.com/titanml/inference-stack-operator/internal/build/gobuild"
)

// The programs the images package (BinarySource.Binary): the operator, and
// the catalog image's opm and health probe.
const (
	OPM         = "opm"
	HealthProbe = "grpc_health_probe"
)

// CatalogPrograms lists the catalog image's programs.
var CatalogPrograms = []string{OPM, HealthProbe}

// A BinarySource gives the programs the images package.
type BinarySource interface {
	// Binary returns the path of program (Operator, OPM or HealthProbe)
	// for p. A source that compiles writes it to out, from the tree at
	// root, and stamps the operator with vars.
	Binary(ctx context.Context, root, program string, p gobuild.Target, vars map[string]string, out string) (string, error)
	// GoVersion is the Go version the operator for platforms (and the
	// catalog's programs) are built with.
	GoVersion(ctx context.Context, root string, platforms []gobuild.Target) (string, error)
}

// GoBuild compiles the programs from source with `go build`, reproducibly
// (internal/build/gobuild). Only a build that compiles attaches an SBOM and
// a provenance: both describe the compile.
type GoBuild struct {
	// Go is the go command; empty means "go" from PATH. The Bazel compile
	// step passes the SDK that go.mod's toolchain line names.
	Go string
	// Env holds extra environment entries for `go build`.
	Env []string
	// OperatorPackage is the operator's main package; default "./operator".
	OperatorPackage string
	// OPMPackage and HealthProbePackage are the main packages of the
	// catalog image's programs; default the constants of the same names
	// (tests point them at stand-ins).
	OPMPackage, HealthProbePackage string
}

func (s *GoBuild) withDefaults() *GoBuild {
	d := *s
	if d.OperatorPackage == "" {
		d.OperatorPackage = "./operator"
	}
	if d.OPMPackage == "" {
		d.OPMPackage = OPMPackage
	}
	if d.HealthProbePackage == "" {
		d.HealthProbePackage = HealthProbePackage
	}
	return &d
}

// Binary compiles program for p into out: the operator stamped with vars,
// opm stamped with its module's version, or the health probe.
func (s *GoBuild) Binary(ctx context.Context, root, program string, p gobuild.Target, vars map[string]string, out string) (string, error) {
	s = s.withDefaults()
	o := gobuild.Options{ModuleRoot: root, Output: out, Target: p, Env: s.Env, Go: s.Go}
	switch program {
	case Operator:
		o.Package, o.Stamp = s.OperatorPackage, vars
	case OPM:
		o.Package, o.Tags = s.OPMPackage, []string{opmBuildTag}
		v, err := gobuild.ModuleVersion(ctx, s.Go, root, s.OPMPackage, s.Env)
		if err != nil {
			return "", fmt.Errorf("the version of opm: %w", err)
		}
		if v != "" {
			o.Stamp = map[string]string{opmVersionVar: v}
		}
	case HealthProbe:
		o.Package = s.HealthProbePackage
	default:
		return "", fmt.Errorf("%q is not a program of the images (%s, %s)", program, Operator, strings.Join(CatalogPrograms, ", "))
	}
	if err := gobuild.Build(ctx, o); err != nil {
		return "", err
	}
	return out, nil
}

// GoVersion is the version of the go command.
func (s *GoBuild) GoVersion(ctx context.Context, root string, _ []gobuild.Target) (string, error) {
	return gobuild.GoVersion(ctx, root)
}

// Prebuilt packages programs compiled elsewhere: by the Bazel build's
// compile actions (isctl bazel-compile), or by Bazel for the end-to-end
// tests. The operator binaries must be stamped with Stamp.OperatorVars of
// the build's stamp (the compile step resolves it with ResolveStamp from
// the same inputs), the catalog's programs compiled as GoBuild compiles
// them. The images are the same; no SBOM or provenance is attached to
// them, since both describe a compile that the packaging did not run.
type Prebuilt struct {
	// Operator are the operator binaries by platform.
	Operator map[gobuild.Target]string
	// Catalog are the catalog image's programs (CatalogPrograms) for the
	// catalog's platform; only a build of the catalog needs them.
	Catalog map[string]string
}

// Binary returns the file given for program and p.
func (s *Prebuilt) Binary(_ context.Context, _, program string, p gobuild.Target, _ map[string]string, _ string) (string, error) {
	if program == Operator {
		if path, ok := s.Operator[p]; ok {
			return path, nil
		}
		return "", fmt.Errorf("no prebuilt operator binary for %s", p)
	}
	if path, ok := s.Catalog[program]; ok {
		return path, nil
	}
	return "", fmt.Errorf("no prebuilt %s for the catalog image (Prebuilt.Catalog)", program)
}

// GoVersion is the Go version the binaries were compiled with (read from
// their build information): the operator's of platforms and the catalog
// programs given must agree.
func (s *Prebuilt) GoVersion(_ context.Context, _ string, platforms []gobuild.Target) (string, error) {
	var paths, names []string
	for _, p := range platforms {
		path, ok := s.Operator[p]
		if !ok {
			return "", fmt.Errorf("no prebuilt operator binary for %s", p)
		}
		paths, names = append(paths, path), append(names, "the prebuilt operator binary for "+p.String())
	}
	for _, n := range CatalogPrograms {
		if path, ok := s.Catalog[n]; ok {
			paths, names = append(paths, path), append(names, "the prebuilt "+n)
		}
	}
	version := ""
	for i, path := range paths {
		info, err := buildinfo.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("%s: %w", names[i], err)
		}
		if version != "" && info.GoVersion != version {
			return "", fmt.Errorf("the prebuilt binaries were built with different Go versions (%s, %s of %s)", version, info.GoVersion, names[i])
		}
		version = info.GoVersion
	}
	return version, nil
}
