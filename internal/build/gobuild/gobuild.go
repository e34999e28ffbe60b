// Package gobuild cross-compiles the operator binary reproducibly: static
// (CGO_ENABLED=0), -trimpath, no VCS stamping, an empty build ID, stripped,
// with the version and git commit stamped through -X, and with every
// environment knob that changes the output (GOFLAGS, GOAMD64, GOARM64,
// GOEXPERIMENT, go.work) pinned.
package gobuild

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Target is one GOOS/GOARCH pair.
type Target struct {
	OS, Arch string
}

func (t Target) String() string { return t.OS + "/" + t.Arch }

// ParseTargets parses "linux/amd64,linux/arm64". Only Linux on amd64 and
// arm64 is supported (the operator image's platforms).
func ParseTargets(s string) ([]Target, error) {
	var out []Target
	seen := map[Target]bool{}
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		os, arch, ok := strings.Cut(p, "/")
		t := Target{OS: os, Arch: arch}
		if !ok || os != "linux" || (arch != "amd64" && arch != "arm64") {
			return nil, fmt.Errorf("unsupported platform %q (want linux/amd64 and/or linux/arm64)", p)
		}
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no platform given")
	}
	return out, nil
}

// Options describe one binary build.
type Options struct {
	// ModuleRoot is the directory holding go.mod; the build runs there.
	ModuleRoot string
	// Package is the main package, relative to ModuleRoot (e.g. "./operator").
	Package string
	// Output is the path of the binary to write.
	Output string
	Target Target
	// Tags are build tags.
	Tags []string
	// Stamp maps fully-qualified string variables to the value -X sets.
	Stamp map[string]string
	// Env holds extra KEY=VALUE entries appended after the pinned ones
	// (tests use it for TMPDIR; GOCACHE and GOMODCACHE may also be set).
	Env []string
	// Go is the go command to run; empty means "go" from PATH. The Bazel
	// build passes the SDK that go.mod's toolchain line names.
	Go string
}

// pinned lists environment variables that change the produced bytes and are
// therefore always set explicitly, whatever the caller's environment says.
var pinned = []string{"CGO_ENABLED", "GOOS", "GOARCH", "GOFLAGS", "GOAMD64", "GOARM64", "GOARM", "GO386", "GOEXPERIMENT", "GOWORK", "GO111MODULE"}

// Env returns the environment of a build for target: the caller's environment
// without the variables that change the output, then their pinned values.
func Env(target Target, extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, p := range pinned {
			if k == p {
				drop = true
				break
			}
		}
		if !drop {
			env = append(env, kv)
		}
	}
	env = append(env, PinnedEnv(target)...)
	return append(env, extra...)
}

// PinnedEnv returns the values Env pins for target (the build's provenance
// records them).
func PinnedEnv(target Target) []string {
	return []string{
		"CGO_ENABLED=0",
		"GOOS=" + target.OS,
		"GOARCH=" + target.Arch,
		"GOFLAGS=-mod=readonly",
		"GOAMD64=v1",
		"GOARM64=v8.0",
		"GOEXPERIMENT=",
		"GOWORK=off",
		"GO111MODULE=on",
	}
}

// Args returns the `go build` arguments for o (without the leading "go").
func Args(o Options) ([]string, error) {
	ld := []string{"-buildid=", "-s", "-w"}
	keys := make([]string, 0, len(o.Stamp))
	for k := range o.Stamp {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := o.Stamp[k]
		if strings.ContainsAny(k+v, " \t\n'\"\\") {
			return nil, fmt.Errorf("stamp %s=%q: whitespace, quotes and backslashes are not allowed", k, v)
		}
		ld = append(ld, "-X", k+"="+v)
	}
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=" + strings.Join(ld, " ")}
	if len(o.Tags) > 0 {
		tags := append([]string(nil), o.Tags...)
		sort.Strings(tags)
		args = append(args, "-tags="+strings.Join(tags, ","))
	}
	return append(args, "-o", o.Output, o.Package), nil
}

// Build runs `go build` for o. The combined output of a failed build is part
// of the returned error.
func Build(ctx context.Context, o Options) error {
	args, err := Args(o)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(o.Output), 0o755); err != nil {
		return fmt.Errorf("creating the output directory: %w", err)
	}
	goCmd := o.Go
	if goCmd == "" {
		goCmd = "go"
	}
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = o.ModuleRoot
	cmd.Env = Env(o.Target, o.Env)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s failed: %w\n%s", o.Package, o.Target, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// ModuleVersion returns the version of the module providing pkg, as the
// build in moduleRoot resolves it ("" for a package of the main module).
// goCmd and extra are as Options.Go and Options.Env.
func ModuleVersion(ctx context.Context, goCmd, moduleRoot, pkg string, extra []string) (string, error) {
	if goCmd == "" {
		goCmd = "go"
	}
	cmd := exec.CommandContext(ctx, goCmd, "list", "-f", "{{with .Module}}{{if not .Main}}{{.Version}}{{end}}{{end}}", pkg)
	cmd.Dir = moduleRoot
	cmd.Env = Env(Target{OS: "linux", Arch: "amd64"}, extra)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list %s: %w\n%s", pkg, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// GoVersion reports the version of the go command that Build runs
// (e.g. "go1.26.8"); it is part of what determines the produced bytes.
func GoVersion(ctx context.Context, moduleRoot string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "env", "GOVERSION")
	cmd.Dir = moduleRoot
	cmd.Env = Env(Target{OS: "linux", Arch: "amd64"}, nil)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Embed is a package of the main module that embeds files (//go:embed).
type Embed struct {
	ImportPath string
	// Dir is the package's directory.
	Dir string
	// Files are the embedded files, relative to Dir.
	Files []string
}

// EmbeddedFiles lists the packages of the module at moduleRoot, among pkg
// and its dependencies as built for target, that embed files: what a
// binary carries besides code, which its build information does not list.
// Packages of other modules are left out (their module's hash covers them).
func EmbeddedFiles(ctx context.Context, moduleRoot, pkg string, target Target) ([]Embed, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-json=ImportPath,Dir,Module,EmbedFiles", pkg)
	cmd.Dir = moduleRoot
	cmd.Env = Env(target, nil)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps %s: %w\n%s", pkg, err, strings.TrimSpace(stderr.String()))
	}
	var embeds []Embed
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			ImportPath, Dir string
			Module          *struct{ Main bool }
			EmbedFiles      []string
		}
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("reading go list's output: %w", err)
		}
		if p.Module != nil && p.Module.Main && len(p.EmbedFiles) > 0 {
			files := append([]string(nil), p.EmbedFiles...)
			sort.Strings(files)
			embeds = append(embeds, Embed{ImportPath: p.ImportPath, Dir: p.Dir, Files: files})
		}
	}
	sort.Slice(embeds, func(i, j int) bool { return embeds[i].ImportPath < embeds[j].ImportPath })
	return embeds, nil
}
