// Package srctree copies a source tree the way a fresh clone holds it, for
// builds that must not see a developer's outputs and caches.
package srctree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Files lists the regular files of the tree at root, relative and
// slash-separated: tracked and untracked-but-not-ignored files when root is
// in a git work tree (what a commit of the tree and its clone would hold),
// else every file outside .git and out/.
func Files(ctx context.Context, root string) ([]string, error) {
	cmd := exec.CommandContext(ctx, "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var files []string
	if err == nil {
		for _, f := range strings.Split(string(out), "\x00") {
			if f == "" {
				continue
			}
			st, err := os.Lstat(filepath.Join(root, filepath.FromSlash(f)))
			if err != nil || !st.Mode().IsRegular() {
				continue // deleted, or a symlink/submodule
			}
			files = append(files, f)
		}
	} else {
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			rel = filepath.ToSlash(rel)
			if d.IsDir() && (rel == ".git" || rel == "out" || rel == "bin" || rel == ".cache") {
				return filepath.SkipDir
			}
			if d.Type().IsRegular() {
				files = append(files, rel)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Strings(files)
	return files, nil
}

// Copy copies the files of root (see Files) into dst, keeping the
// executable bit.
func Copy(ctx context.Context, root, dst string) error {
	files, err := Files(ctx, root)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return errors.New("no files to copy")
	}
	for _, f := range files {
		src := filepath.Join(root, filepath.FromSlash(f))
		st, err := os.Stat(src)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(target, data, st.Mode().Perm()); err != nil {
			return fmt.Errorf("copy %s: %w", f, err)
		}
	}
	return nil
}
