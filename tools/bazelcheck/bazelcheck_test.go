package main

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/titanml/inference-stack-operator/internal/build"
	"github.com/titanml/inference-stack-operator/internal/bundle"
	"github.com/titanml/inference-stack-operator/internal/catalog"
)

// archive is a txtar-like file: a comment, then sections "-- name --".
type archive struct {
	comment string
	files   map[string]string
	order   []string
}

func readArchive(t *testing.T, path string) archive {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a := archive{files: map[string]string{}}
	name := ""
	var b strings.Builder
	flush := func() {
		if name == "" {
			a.comment = b.String()
		} else {
			a.files[name] = b.String()
			a.order = append(a.order, name)
		}
		b.Reset()
	}
	for _, line := range strings.SplitAfter(string(data), "\n") {
		trimmed := strings.TrimRight(line, "\n")
		if strings.HasPrefix(trimmed, "-- ") && strings.HasSuffix(trimmed, " --") && len(trimmed) > 6 {
			flush()
			name = strings.TrimSpace(trimmed[3 : len(trimmed)-3])
			continue
		}
		b.WriteString(line)
	}
	flush()
	return a
}

// materialize writes the base archive, overlaid with the mistake's files
// (a section whose content is "DELETE" removes the file), and returns the
// repository root and the module cache directory.
func materialize(t *testing.T, base archive, overlay map[string]string) (root, cache string) {
	t.Helper()
	dir := t.TempDir()
	root = filepath.Join(dir, "repo")
	cache = filepath.Join(dir, "modcache")
	files := map[string]string{}
	for k, v := range base.files {
		files[k] = v
	}
	for k, v := range overlay {
		if strings.TrimSpace(v) == "DELETE" {
			delete(files, k)
			continue
		}
		files[k] = v
	}
	for name, content := range files {
		target := filepath.Join(root, filepath.FromSlash(name))
		if rest, ok := strings.CutPrefix(name, "modcache/"); ok {
			target = filepath.Join(cache, filepath.FromSlash(rest))
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(target, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	return root, cache
}

func check(t *testing.T, root, cache string) []Finding {
	t.Helper()
	findings, err := Check(Config{Root: root, GoModCache: cache, GazelleVersion: "v0.53.0"})
	if err != nil {
		t.Fatal(err)
	}
	return findings
}

func TestBaseFixtureIsClean(t *testing.T) {
	base := readArchive(t, "testdata/base.txtar")
	root, cache := materialize(t, base, nil)
	for _, f := range check(t, root, cache) {
		t.Errorf("unexpected finding in the clean fixture: %s", f)
	}
}

// TestPlantedMistakes runs the checker on the base fixture with one
// planted mistake per file in testdata/mistakes. The "want" section lists
// substrings (one per line) that must each appear in a finding; the clean
// base guarantees that every finding comes from the planted mistake.
// TestFetchRuleRuns: the repository rule stand-in runs a rule that builds
// a wrapper module right without a finding (the planted mistakes 31 and 32
// are its wrong variants).
func TestFetchRuleRuns(t *testing.T) {
	base := readArchive(t, "testdata/base.txtar")
	ok := readArchive(t, "testdata/fetch_ok.txtar")
	root, cache := materialize(t, base, ok.files)
	for _, f := range check(t, root, cache) {
		t.Errorf("unexpected finding: %s", f)
	}
}

func TestPlantedMistakes(t *testing.T) {
	base := readArchive(t, "testdata/base.txtar")
	paths, err := filepath.Glob("testdata/mistakes/*.txtar")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	if len(paths) < 8 {
		t.Fatalf("only %d planted mistakes; want at least 8", len(paths))
	}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".txtar")
		t.Run(name, func(t *testing.T) {
			m := readArchive(t, p)
			want, ok := m.files["want"]
			if !ok {
				t.Fatalf("%s has no want section", p)
			}
			delete(m.files, "want")
			root, cache := materialize(t, base, m.files)
			expectFindings(t, m, want, check(t, root, cache))
		})
	}
}

// expectFindings fails unless there are findings and, for each line of
// want, one of them contains it.
func expectFindings(t *testing.T, m archive, want string, findings []Finding) {
	t.Helper()
	if len(findings) == 0 {
		t.Fatalf("planted mistake not caught (%s)", strings.TrimSpace(m.comment))
	}
	var all []string
	for _, f := range findings {
		all = append(all, f.String())
	}
	joined := strings.Join(all, "\n")
	t.Logf("findings:\n%s", joined)
	for _, w := range strings.Split(strings.TrimSpace(want), "\n") {
		if w = strings.TrimSpace(w); w != "" && !strings.Contains(joined, w) {
			t.Errorf("no finding contains %q; findings:\n%s", w, joined)
		}
	}
}

func TestRepoName(t *testing.T) {
	for in, want := range map[string]string{
		"k8s.io/api":                           "io_k8s_api",
		"sigs.k8s.io/controller-runtime":       "io_k8s_sigs_controller_runtime",
		"github.com/BurntSushi/toml":           "com_github_burntsushi_toml",
		"helm.sh/helm/v3":                      "sh_helm_helm_v3",
		"go.starlark.net":                      "net_starlark_go",
		"gopkg.in/yaml.v3":                     "in_gopkg_yaml_v3",
		"github.com/containerd/containerd/api": "com_github_containerd_containerd_api",
	} {
		if got := repoName(in); got != want {
			t.Errorf("repoName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestGoLibName(t *testing.T) {
	for in, want := range map[string]string{
		"k8s.io/api/core/v1":             "core",
		"github.com/blang/semver/v4":     "semver",
		"sigs.k8s.io/controller-runtime": "controller-runtime",
		"gopkg.in/yaml.v3":               "yaml_v3",
	} {
		if got := goLibName(in); got != want {
			t.Errorf("goLibName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseGoMod(t *testing.T) {
	m, err := parseGoMod([]byte("module example.com/x\n\ngo 1.26.3\n\nrequire a.io/b v1.0.0\nrequire (\n\tc.io/d v0.1.0 // indirect\n\t\"e.io/f\" v2.0.0+incompatible\n)\nreplace a.io/b => ./b\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Module != "example.com/x" || m.Go != "1.26.3" || len(m.Requires) != 3 {
		t.Fatalf("parsed %+v", m)
	}
	if m.Requires[0].Indirect || !m.Requires[1].Indirect || m.Requires[2].Path != "e.io/f" {
		t.Errorf("requires %+v", m.Requires)
	}
}

// The build inputs the checker requires of the build steps' actions are
// what the Go-native build reads.
func TestBuildInputFilesMatchTheBuild(t *testing.T) {
	want := []string{"VERSION", catalog.TemplatePath, bundle.BaseCSVPath, bundle.OperatorRBACPath}
	if strings.Join(buildInputFiles, " ") != strings.Join(want, " ") {
		t.Errorf("buildInputFiles = %v, want %v", buildInputFiles, want)
	}
	// The operator's steps get only its stamp inputs: the Go-native build
	// loads the operator's inputs from a tree holding them alone.
	stampOnly := t.TempDir()
	for _, f := range stampInputFiles {
		if err := os.WriteFile(filepath.Join(stampOnly, f), []byte("0.1.0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := build.LoadInputs(build.Config{Root: stampOnly, Images: []string{build.Operator}}); err != nil {
		t.Errorf("the operator's inputs from stampInputFiles %v alone: %v", stampInputFiles, err)
	}
	if releasedDir != catalog.ReleasedDir {
		t.Errorf("releasedDir = %q, want %q", releasedDir, catalog.ReleasedDir)
	}
	want = append([]string(nil), build.CatalogPrograms...)
	sort.Strings(want)
	if got := sortedKeys(catalogPrograms); strings.Join(got, " ") != strings.Join(want, " ") ||
		"./"+catalogPrograms[build.HealthProbe] != build.HealthProbePackage || catalogPrograms[build.OPM] != "" {
		t.Errorf("catalogPrograms = %v, want %v (health probe %s; opm outside this module)", catalogPrograms, build.CatalogPrograms, build.HealthProbePackage)
	}
}
