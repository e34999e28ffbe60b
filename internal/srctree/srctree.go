// Package srctree is the source tree as a commit holds it: its files, copied
// the way a fresh clone holds them (for builds that must not see a
// developer's outputs and caches), and its git revision.
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

// Files lists the regular files and symbolic links of the tree at root,
// relative and slash-separated: tracked and untracked-but-not-ignored files
// when root is in a git work tree (what a commit of the tree and its clone
// would hold), else every file outside .git and out/.
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
			if err != nil || !(st.Mode().IsRegular() || st.Mode()&fs.ModeSymlink != 0) {
				continue // deleted, or a submodule
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
			if d.Type().IsRegular() || d.Type()&fs.ModeSymlink != 0 {
				files = append(files, rel)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("listing the files of %s: %w", root, err)
		}
	}
	sort.Strings(files)
	return files, nil
}

// Copy copies the files of root (see Files) into dst, keeping the
// executable bit, and recreates symbolic links with their target as
// written (as git stores them).
func Copy(ctx context.Context, root, dst string) error {
	files, err := Files(ctx, root)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return errors.New("no files to copy")
	}
	for _, f := range files {
		if err := copyEntry(filepath.Join(root, filepath.FromSlash(f)), filepath.Join(dst, filepath.FromSlash(f))); err != nil {
			return fmt.Errorf("copy %s: %w", f, err)
		}
	}
	return nil
}

func copyEntry(src, dst string) error {
	st, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		link, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(link, dst)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, st.Mode().Perm())
}
