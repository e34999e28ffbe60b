// Command cp copies files and directory trees, as much of cp(1) as OLM v0's
// bundle-unpacking Jobs use: their first init container runs
// `/bin/cp -Rv /bin/cpb /util/cpb` in OLM's own image, which upstream is a
// distroless image with busybox's cp linked in. The harness's OLM image has
// no shell or coreutils, so it carries this instead.
//
//	cp [-R] [-v] SRC... DST
package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cp:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	recursive, verbose := false, false
	var paths []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			for _, f := range a[1:] {
				switch f {
				case 'R', 'r':
					recursive = true
				case 'v':
					verbose = true
				default:
					return fmt.Errorf("unsupported option -%c (only -R and -v)", f)
				}
			}
			continue
		}
		paths = append(paths, a)
	}
	if len(paths) < 2 {
		return errors.New("usage: cp [-R] [-v] SRC... DST")
	}
	dst := paths[len(paths)-1]
	srcs := paths[:len(paths)-1]
	dstIsDir := false
	if st, err := os.Stat(dst); err == nil && st.IsDir() {
		dstIsDir = true
	}
	if len(srcs) > 1 && !dstIsDir {
		return fmt.Errorf("target %s is not a directory", dst)
	}
	for _, src := range srcs {
		target := dst
		if dstIsDir {
			target = filepath.Join(dst, filepath.Base(src))
		}
		if err := copyPath(src, target, recursive, verbose); err != nil {
			return err
		}
	}
	return nil
}

func copyPath(src, dst string, recursive, verbose bool) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return copyFile(src, dst, st.Mode().Perm(), verbose)
	}
	if !recursive {
		return fmt.Errorf("%s is a directory (not copied without -R)", src)
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			if verbose {
				fmt.Printf("'%s' -> '%s'\n", p, target)
			}
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		}
		return copyFile(p, target, info.Mode().Perm(), verbose)
	})
}

func copyFile(src, dst string, mode fs.FileMode, verbose bool) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if verbose {
		fmt.Printf("'%s' -> '%s'\n", src, dst)
	}
	return nil
}
