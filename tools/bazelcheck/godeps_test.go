package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// gazelleForTest builds the gazelle of bazel.mk's BAZEL_GAZELLE_VERSION (the
// version MODULE.bazel pins; the main check compares them).
func gazelleForTest(t *testing.T) (binary, version string) {
	t.Helper()
	mk, err := os.ReadFile("../../bazel.mk")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^BAZEL_GAZELLE_VERSION := (\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("bazel.mk sets no BAZEL_GAZELLE_VERSION")
	}
	version = string(m[1])
	bin := t.TempDir()
	cmd := exec.Command("go", "install", "github.com/bazelbuild/bazel-gazelle/cmd/gazelle@"+version)
	cmd.Env = append(os.Environ(), "GOBIN="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building gazelle %s: %v\n%s", version, err, out)
	}
	return filepath.Join(bin, "gazelle"), version
}

// checkGoDepsFixture runs the go-deps check over a materialized fixture,
// whose modules are local replacements (no proxy, no go.sum).
func checkGoDepsFixture(t *testing.T, gazelle, version string, overlay map[string]string) []Finding {
	t.Helper()
	base := readArchive(t, "testdata/godeps.txtar")
	root, _ := materialize(t, base, overlay)
	t.Setenv("GOFLAGS", "-mod=mod")
	t.Setenv("GOPROXY", "off")
	t.Setenv("GOWORK", "off")
	findings, err := CheckGoDeps(GoDepsConfig{Config: Config{Root: root, GoModCache: goModCache(), GazelleVersion: version},
		Work: t.TempDir(), Gazelle: gazelle})
	if err != nil {
		t.Fatal(err)
	}
	return findings
}

func TestGoDeps(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gazelle and runs it over the fixture's modules")
	}
	gazelle, version := gazelleForTest(t)
	t.Run("clean", func(t *testing.T) {
		for _, f := range checkGoDepsFixture(t, gazelle, version, nil) {
			t.Errorf("unexpected finding in the clean fixture: %s", f)
		}
	})
	paths, err := filepath.Glob("testdata/godeps/*.txtar")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	if len(paths) < 3 {
		t.Fatalf("only %d planted mistakes; want at least 3", len(paths))
	}
	for _, p := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(p), ".txtar"), func(t *testing.T) {
			m := readArchive(t, p)
			want, ok := m.files["want"]
			if !ok {
				t.Fatalf("%s has no want section", p)
			}
			delete(m.files, "want")
			expectFindings(t, m, want, checkGoDepsFixture(t, gazelle, version, m.files))
		})
	}
}
