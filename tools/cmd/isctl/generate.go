package main

// The `bundle` and `catalog` commands: the bundle and catalog steps of
// `isctl build` on their own, with every input named by a flag and the
// image digests read from files. The Bazel layer runs them
// (bundle/BUILD.bazel, catalog/BUILD.bazel) so that it generates the same
// bundle and catalog content as the Go-native build; besides the content
// they write an mtree spec of it for tar.bzl's `tar` rule and, for the
// bundle, the image labels.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/titanml/inference-stack-operator/internal/bundlegen"
	"github.com/titanml/inference-stack-operator/internal/catalogrender"
	"github.com/titanml/inference-stack-operator/internal/imageref"
	"github.com/titanml/inference-stack-operator/internal/versionfile"
)

// Top-level entries of the outputs: an existing -out directory holding only
// these (an earlier run's output, or the empty directory Bazel creates for
// a declared output directory) is replaced; anything else is refused.
var (
	bundleTopLevel  = []string{strings.TrimSuffix(bundlegen.ManifestsDir, "/"), strings.TrimSuffix(bundlegen.MetadataDir, "/")}
	catalogTopLevel = []string{"configs"}
)

// catalogConfigsDir is where the FBC lives in the catalog image (and under
// -out), as in the Go-native build.
const catalogConfigsDir = "configs"

// stringFlags registers required string flags and reports the missing ones.
type stringFlags struct {
	fs    *flag.FlagSet
	order []string
	vals  map[string]*string
}

func newStringFlags(fs *flag.FlagSet) *stringFlags {
	return &stringFlags{fs: fs, vals: map[string]*string{}}
}

func (s *stringFlags) required(name, usage string) *string {
	p := s.fs.String(name, "", usage+" (required)")
	s.order = append(s.order, name)
	s.vals[name] = p
	return p
}

func (s *stringFlags) parse(args []string) error {
	if err := s.fs.Parse(args); err != nil {
		return err
	}
	if s.fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q (every input is a flag)", s.fs.Name(), s.fs.Args())
	}
	var missing []string
	for _, n := range s.order {
		if strings.TrimSpace(*s.vals[n]) == "" {
			missing = append(missing, "-"+n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: missing %s", s.fs.Name(), strings.Join(missing, ", "))
	}
	return nil
}

func cmdBundle(_ context.Context, args []string, _ io.Writer) error {
	fs := flag.NewFlagSet("isctl bundle", flag.ContinueOnError)
	sf := newStringFlags(fs)
	versionFile := sf.required("version-file", "the VERSION file")
	csvBase := sf.required("csv-base", "the hand-written part of the CSV ("+bundlegen.BaseCSVPath+")")
	rbac := sf.required("rbac", "the operator's RBAC ("+bundlegen.OperatorRBACPath+")")
	opRepo := sf.required("operator-repo", "operator image repository, e.g. docker.io/tytn/operator")
	opDigestFile := sf.required("operator-digest-file", "file holding the operator image (index) digest: sha256:<64 hex digits> and a newline")
	out := sf.required("out", "output directory: the bundle (manifests/, metadata/); replaced as a whole")
	mtreeFile := sf.required("mtree", "output: mtree spec of the bundle for tar.bzl's tar rule")
	labelsFile := sf.required("labels", "output: the bundle image labels, key=value lines")
	if err := sf.parse(args); err != nil {
		return err
	}

	v, err := versionfile.Read(*versionFile)
	if err != nil {
		return err
	}
	var in bundlegen.Inputs
	if in.BaseCSV, err = readInput("-csv-base", *csvBase); err != nil {
		return err
	}
	if in.RBAC, err = readInput("-rbac", *rbac); err != nil {
		return err
	}
	opRef, err := readDigestRef("-operator-repo", *opRepo, "-operator-digest-file", *opDigestFile)
	if err != nil {
		return err
	}
	b, err := bundlegen.Generate(in, bundlegen.Options{Version: v.Version, OperatorImage: opRef.String()})
	if err != nil {
		return err
	}
	if err := validateBundle(b); err != nil {
		return err
	}

	o := &outputs{dir: *out, topLevel: bundleTopLevel, files: b.Files}
	o.side = []sideFile{
		{flag: "-mtree", path: *mtreeFile, data: o.mtree()},
		{flag: "-labels", path: *labelsFile, data: labelLines(bundlegen.Annotations(v.Version))},
	}
	return o.publish()
}

func cmdCatalog(ctx context.Context, args []string, _ io.Writer) error {
	fs := flag.NewFlagSet("isctl catalog", flag.ContinueOnError)
	sf := newStringFlags(fs)
	versionFile := sf.required("version-file", "the VERSION file")
	template := sf.required("template", "the semver catalog template ("+catalogrender.TemplatePath+")")
	released := fs.String("released", "", "directory of the released entries ("+catalogrender.ReleasedDir+"); empty: no released bundles")
	channels := fs.String("channels", "stable,fast", "channel archetypes the bundle joins while its version is not released (candidate, fast, stable)")
	bundleDir := sf.required("bundle-dir", "the bundle directory of VERSION (written by `isctl bundle`)")
	bundleRepo := sf.required("bundle-repo", "bundle image repository, e.g. docker.io/tytn/operator-bundle")
	bundleDigestFile := sf.required("bundle-digest-file", "file holding the bundle image digest: sha256:<64 hex digits> and a newline")
	out := sf.required("out", "output directory: the catalog ("+catalogConfigsDir+"/); replaced as a whole")
	mtreeFile := sf.required("mtree", "output: mtree spec of the catalog for tar.bzl's tar rule")
	if err := sf.parse(args); err != nil {
		return err
	}

	v, err := versionfile.Read(*versionFile)
	if err != nil {
		return err
	}
	arch, err := catalogrender.ParseArchetypes(*channels)
	if err != nil {
		return fmt.Errorf("-channels: %w", err)
	}
	tmpl, err := readInput("-template", *template)
	if err != nil {
		return err
	}
	var rels []catalogrender.Release
	if *released != "" {
		if st, err := os.Stat(*released); err != nil || !st.IsDir() {
			return fmt.Errorf("-released %s: not a directory", *released)
		}
		if rels, err = catalogrender.LoadReleases(*released); err != nil {
			return err
		}
	}
	if st, err := os.Stat(*bundleDir); err != nil || !st.IsDir() {
		return fmt.Errorf("-bundle-dir %s: not a directory (the output of `isctl bundle`)", *bundleDir)
	}
	bundleRef, err := readDigestRef("-bundle-repo", *bundleRepo, "-bundle-digest-file", *bundleDigestFile)
	if err != nil {
		return err
	}
	cat, err := catalogrender.Render(ctx, catalogrender.Inputs{Template: tmpl, Released: rels}, catalogrender.Current{
		Dir: *bundleDir, Image: bundleRef, Version: v.Version, Archetypes: arch,
	})
	if err != nil {
		return err
	}

	o := &outputs{dir: *out, topLevel: catalogTopLevel, files: map[string][]byte{
		catalogConfigsDir + "/" + catalogrender.FBCPath: cat.FBC,
	}}
	o.side = []sideFile{{flag: "-mtree", path: *mtreeFile, data: o.mtree()}}
	return o.publish()
}

func readInput(flagName, p string) ([]byte, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flagName, err)
	}
	return data, nil
}

// readDigestRef reads a digest file ("sha256:<hex>", optionally followed by
// one newline, as rules_oci's <image>.digest holds it) and returns
// repo@digest.
func readDigestRef(repoFlag, repo, fileFlag, file string) (imageref.Digest, error) {
	if err := imageref.CheckRepository(repo); err != nil {
		return imageref.Digest{}, fmt.Errorf("%s: %w", repoFlag, err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return imageref.Digest{}, fmt.Errorf("%s: %w", fileFlag, err)
	}
	d := strings.TrimSuffix(string(data), "\n")
	hex, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return imageref.Digest{}, fmt.Errorf("%s %s: want sha256:<64 lowercase hex digits> and a newline, got %q", fileFlag, file, shorten(string(data)))
	}
	ref, err := imageref.ParseDigest(repo + "@" + d)
	if err != nil {
		return imageref.Digest{}, fmt.Errorf("%s %s: %w", fileFlag, file, err)
	}
	return ref, nil
}

func shorten(s string) string {
	if len(s) > 100 {
		return s[:100] + "..."
	}
	return s
}

// validateBundle writes b into a scratch directory and validates it as
// `isctl build` does.
func validateBundle(b *bundlegen.Bundle) error {
	dir, err := os.MkdirTemp("", "isctl-bundle-")
	if err != nil {
		return fmt.Errorf("validating the bundle: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := b.WriteDir(dir); err != nil {
		return fmt.Errorf("validating the bundle: %w", err)
	}
	return bundlegen.ValidateDir(dir).Err()
}

func labelLines(labels map[string]string) []byte {
	lines := make([]string, 0, len(labels))
	for k, v := range labels {
		lines = append(lines, k+"="+v+"\n")
	}
	sort.Strings(lines)
	return []byte(strings.Join(lines, ""))
}

// outputs is what one command writes: a directory of files plus side files
// (mtree, labels), published together or not at all.
type outputs struct {
	// dir is the output directory, as given (the mtree's content= paths are
	// relative to the working directory, like Bazel's execution paths).
	dir string
	// topLevel are the entries an earlier output of dir may hold.
	topLevel []string
	// files maps slash-separated paths under dir to their content.
	files map[string][]byte
	side  []sideFile
}

type sideFile struct {
	flag, path string
	data       []byte
}

// mtree returns the mtree spec of the files for tar.bzl's tar rule (BSD tar
// reading `@spec`): one line per directory and file, sorted, with fixed
// owner, mode and time, files taking their content from dir. Directories
// end with "/": libarchive reads a name without a slash as relative to the
// last directory entry, so "manifests" followed by "metadata" would give
// manifests/metadata.
func (o *outputs) mtree() []byte {
	dirs := map[string]bool{}
	var lines []string
	for p := range o.files {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
		lines = append(lines, mtreeEscape(p)+" uid=0 gid=0 mode=0644 time=0 type=file content="+
			mtreeEscape(path.Join(filepath.ToSlash(o.dir), p)))
	}
	for d := range dirs {
		lines = append(lines, mtreeEscape(d)+"/ uid=0 gid=0 mode=0755 time=0 type=dir")
	}
	sort.Strings(lines)
	return []byte(strings.Join(lines, "\n") + "\n")
}

// mtreeEscape encodes s as mtree(5) requires: backslash, '#', spaces and
// anything outside printable ASCII as a backslash and three octal digits.
func mtreeEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '\\' || c == '#' {
			fmt.Fprintf(&b, "\\%03o", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// publish writes everything next to its destination under a temporary name,
// then renames it into place. When anything fails, the destinations are
// left as they were (the previous output, or nothing).
func (o *outputs) publish() (err error) {
	dir := filepath.Clean(o.dir)
	if err := o.checkPaths(dir); err != nil {
		return err
	}
	var cleanup []string
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				os.RemoveAll(cleanup[i])
			}
		}
	}()
	parent := filepath.Dir(dir)
	if err := mkdirAll(parent, &cleanup); err != nil {
		return fmt.Errorf("-out: %w", err)
	}

	stage, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("staging %s: %w", dir, err)
	}
	cleanup = append(cleanup, stage)
	if err := os.Chmod(stage, 0o755); err != nil {
		return fmt.Errorf("staging %s: %w", dir, err)
	}
	paths := make([]string, 0, len(o.files))
	for p := range o.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		full := filepath.Join(stage, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("staging %s: %w", dir, err)
		}
		if err := os.WriteFile(full, o.files[p], 0o644); err != nil {
			return fmt.Errorf("staging %s: %w", dir, err)
		}
	}
	tmps := make([]string, len(o.side))
	for i, s := range o.side {
		if err := mkdirAll(filepath.Dir(s.path), &cleanup); err != nil {
			return fmt.Errorf("%s: %w", s.flag, err)
		}
		if tmps[i], err = writeTemp(s.path, s.data); err != nil {
			return fmt.Errorf("%s: %w", s.flag, err)
		}
		cleanup = append(cleanup, tmps[i])
	}

	// Swap the directory in, keeping the previous one until the end.
	var old string
	if _, err := os.Lstat(dir); err == nil {
		old = stage + ".old"
		if err := os.Rename(dir, old); err != nil {
			return fmt.Errorf("replacing %s: %w", dir, err)
		}
	}
	if err := os.Rename(stage, dir); err != nil {
		if old != "" {
			os.Rename(old, dir)
		}
		return err
	}
	for i, s := range o.side {
		if err := os.Rename(tmps[i], s.path); err != nil {
			// Undo: no output rather than a directory without its spec.
			os.RemoveAll(dir)
			if old != "" {
				os.Rename(old, dir)
			}
			for _, done := range o.side[:i] {
				os.Remove(done.path)
			}
			return fmt.Errorf("%s: %w", s.flag, err)
		}
	}
	if old != "" {
		return os.RemoveAll(old)
	}
	return nil
}

// checkPaths refuses an output directory that holds something this command
// did not write, and side files that would land inside it or on each other.
func (o *outputs) checkPaths(dir string) error {
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("checking the output paths: %w", err)
	}
	seen := map[string]string{absDir: "-out"}
	for _, s := range o.side {
		abs, err := filepath.Abs(s.path)
		if err != nil {
			return fmt.Errorf("checking the output paths: %w", err)
		}
		if prev, dup := seen[abs]; dup {
			return fmt.Errorf("%s and %s name the same path %s", prev, s.flag, s.path)
		}
		seen[abs] = s.flag
		if rel, err := filepath.Rel(absDir, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return fmt.Errorf("%s %s is inside -out %s, which is replaced as a whole", s.flag, s.path, o.dir)
		}
		if st, err := os.Lstat(s.path); err == nil && !st.Mode().IsRegular() {
			return fmt.Errorf("%s %s exists and is not a regular file", s.flag, s.path)
		}
	}
	st, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking %s: %w", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("-out %s exists and is not a directory", o.dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("checking %s: %w", dir, err)
	}
	var foreign []string
	for _, e := range ents {
		known := false
		for _, t := range o.topLevel {
			known = known || (e.Name() == t && e.IsDir())
		}
		if !known {
			foreign = append(foreign, e.Name())
		}
	}
	if len(foreign) > 0 {
		return fmt.Errorf("refusing to replace -out %s: it holds %s, which is not an earlier output of this command (want only %s)",
			o.dir, strings.Join(foreign, ", "), strings.Join(o.topLevel, ", "))
	}
	return nil
}

// mkdirAll creates dir and its missing parents, recording the topmost
// directory it created in created.
func mkdirAll(dir string, created *[]string) error {
	top := ""
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		top = d
		if filepath.Dir(d) == d {
			break
		}
	}
	if top == "" {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		os.RemoveAll(top)
		return err
	}
	*created = append(*created, top)
	return nil
}

// writeTemp writes data to a new file next to p and returns its name.
func writeTemp(p string, data []byte) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp-")
	if err != nil {
		return "", fmt.Errorf("writing %s: %w", p, err)
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(f.Name(), 0o644)); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}
