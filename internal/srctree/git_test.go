package srctree

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func runGit(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func TestReadRevision(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	ctx := context.Background()
	dir := t.TempDir()
	if info, err := ReadRevision(ctx, dir); err != nil || info.String() != "unknown" {
		t.Fatalf("outside git: %+v %v", info, err)
	}
	runGit(t, dir, "init", "-q")
	if info, err := ReadRevision(ctx, dir); err != nil || info.String() != "unknown" {
		t.Fatalf("no commit: %+v %v", info, err)
	}
	os.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0o644)
	runGit(t, dir, "add", "a")
	runGit(t, dir, "commit", "-q", "-m", "a")
	info, err := ReadRevision(ctx, dir)
	if err != nil || len(info.Commit) != 40 || info.Dirty || info.String() != info.Commit {
		t.Fatalf("clean: %+v %v", info, err)
	}
	os.WriteFile(filepath.Join(dir, "b"), []byte("b"), 0o644)
	info, err = ReadRevision(ctx, dir)
	if err != nil || !info.Dirty || info.String() != info.Commit+"-dirty" {
		t.Fatalf("untracked file: %+v %v", info, err)
	}
	os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("b\n.gitignore\n"), 0o644)
	if info, _ = ReadRevision(ctx, dir); info.Dirty {
		t.Fatalf("ignored files made the tree dirty")
	}
}
