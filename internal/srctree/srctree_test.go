package srctree

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestCopyFollowsGitignore(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	src := t.TempDir()
	for p, c := range map[string]string{
		".gitignore":       "/out/\n*.test\n",
		"go.mod":           "module x\n",
		"a/b.go":           "package a\n",
		"out/images/x":     "built",
		"tool.test":        "binary",
		"scripts/run.sh":   "#!/bin/sh\n",
		"untracked/new.go": "package untracked\n",
	} {
		os.MkdirAll(filepath.Join(src, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(src, p), []byte(c), 0o644)
	}
	os.Chmod(filepath.Join(src, "scripts/run.sh"), 0o755)
	os.Symlink("../go.mod", filepath.Join(src, "a/link"))
	cmd := exec.Command("git", "init", "-q")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	dst := filepath.Join(t.TempDir(), "copy")
	if err := Copy(context.Background(), src, dst); err != nil {
		t.Fatal(err)
	}
	files, _ := Files(context.Background(), dst) // not a git tree: walks
	got := strings.Join(files, " ")
	if got != ".gitignore a/b.go a/link go.mod scripts/run.sh untracked/new.go" {
		t.Errorf("copied %s", got)
	}
	if st, _ := os.Stat(filepath.Join(dst, "scripts/run.sh")); st.Mode().Perm()&0o100 == 0 {
		t.Error("executable bit lost")
	}
	if link, err := os.Readlink(filepath.Join(dst, "a/link")); err != nil || link != "../go.mod" {
		t.Errorf("symbolic link copied as %q, %v; want a link to ../go.mod", link, err)
	}
}
