package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/titanml/inference-stack-operator/internal/srctree"
)

// bazelFirstRun is what a first Bazel run leaves in the workspace: the
// output symlinks and the lockfile Bzlmod writes.
func bazelFirstRun(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "MODULE.bazel.lock"), []byte("{\n  \"lockFileVersion\": 18\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"bazel-bin", "bazel-out", "bazel-testlogs", "bazel-" + filepath.Base(dir)} {
		if err := os.Symlink(t.TempDir(), filepath.Join(dir, l)); err != nil {
			t.Fatal(err)
		}
	}
}

// stampIn commits the repository's status script, VERSION and the given
// .gitignore in a fresh git repository, lets Bazel's first run happen, and
// returns what --config=release would stamp and what the Go-native build
// would.
func stampIn(t *testing.T, gitignore string) (commit, bazel, native string) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{".gitignore": gitignore}
	for _, f := range []string{"VERSION", "tools/bazelcheck/status.sh"} {
		data, err := os.ReadFile(filepath.Join("..", "..", f))
		if err != nil {
			t.Fatal(err)
		}
		files[f] = string(data)
	}
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t",
			"GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "release")
	commit = git("rev-parse", "HEAD")
	bazelFirstRun(t, dir)

	cmd := exec.Command("bash", "tools/bazelcheck/status.sh")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("status.sh: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "STABLE_GIT_COMMIT "); ok {
			bazel = v
		}
	}
	info, err := srctree.ReadRevision(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return commit, bazel, info.String()
}

// TestStampAfterBazelRun: in a clean checkout of a commit, what a first
// Bazel run writes does not make --config=release stamp "-dirty", and the
// stamp is the Go-native build's, so `bazel build --config=release` and
// `make images` give the same digests at that commit.
func TestStampAfterBazelRun(t *testing.T) {
	gitignore, err := os.ReadFile("../../.gitignore")
	if err != nil {
		t.Fatal(err)
	}
	commit, bazel, native := stampIn(t, string(gitignore))
	if bazel != commit || native != commit {
		t.Errorf("after a first Bazel run in a clean checkout of %s, --config=release stamps %q and the Go-native build %q; want the commit (is MODULE.bazel.lock or a bazel-* link not ignored by .gitignore?)", commit, bazel, native)
	}

	// The planted mistake: without the lockfile in .gitignore, both say
	// dirty, which is what this test exists to see.
	var kept []string
	for _, l := range strings.Split(string(gitignore), "\n") {
		if !strings.Contains(l, "MODULE.bazel.lock") {
			kept = append(kept, l)
		}
	}
	commit, bazel, _ = stampIn(t, strings.Join(kept, "\n"))
	if bazel != commit+"-dirty" {
		t.Errorf("with MODULE.bazel.lock not ignored, the stamp is %q; want %s-dirty (the check cannot see the lockfile)", bazel, commit)
	}
}
