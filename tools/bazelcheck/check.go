package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// Config configures a check.
type Config struct {
	// Root is the repository root (holding MODULE.bazel and go.mod).
	Root string
	// GoModCache is the Go module cache; packages of external Go
	// repositories are looked up there when the module is present.
	GoModCache string
	// GazelleVersion, if set, must equal MODULE.bazel's gazelle bazel_dep.
	GazelleVersion string
}

// Finding is one mistake, positioned in the file that holds it.
type Finding struct {
	Pos string
	Msg string
}

func (f Finding) String() string { return f.Pos + ": " + f.Msg }

type checker struct {
	root string
	cfg  Config

	findings []Finding
	seen     map[string]bool

	gomod        *goMod
	repoToModule map[string]goRequire
	moduleByPath map[string]*goRequire

	mod               *moduleInfo
	goDeps            *extProxy       // the go_deps extension proxy, if used
	usedGoRepos       map[string]bool // go_deps repositories BUILD files reference
	bazelignore       []string
	pkgs              map[string]*pkg
	targets           []*target
	rootBuildComments []syntax.Comment

	// bzls are the evaluated .bzl files of this repository; extPkgs the
	// root packages of the repositories their module extensions create
	// (by apparent name); sdkRepos the Go SDK repositories named in
	// go_sdk tags.
	bzls map[string]*bzlModule
	// macroFiles are the .bzl files of this repository that BUILD files
	// load (macros and constants), by path.
	macroFiles map[string]*macroFile
	extPkgs    map[string]*pkg
	sdkRepos   map[string]*pkg
	// goPkgs caches the Go packages of this module the checker parsed.
	goPkgs map[string]*goPkg
}

// Check evaluates MODULE.bazel, every BUILD file and .bazelrc under
// cfg.Root and returns the mistakes found, sorted by position.
func Check(cfg Config) ([]Finding, error) {
	c, err := newChecker(cfg)
	if err != nil {
		return nil, err
	}
	return c.findings, nil
}

// newChecker runs the checks and returns the checker, which holds the evaluated
// model of the Bazel files as well as the findings.
func newChecker(cfg Config) (*checker, error) {
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, err
	}
	c := &checker{root: root, cfg: cfg, seen: map[string]bool{}, usedGoRepos: map[string]bool{}}
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	if c.gomod, err = parseGoMod(data); err != nil {
		return nil, err
	}
	c.repoToModule = map[string]goRequire{}
	c.moduleByPath = map[string]*goRequire{}
	for i, r := range c.gomod.Requires {
		name := repoName(r.Path)
		if prev, dup := c.repoToModule[name]; dup {
			c.reportAt(fmt.Sprintf("go.mod:%d", r.Line), "modules %s and %s map to the same repository name %q; go_deps rejects that (use go_deps.module_override repo_name)", prev.Path, r.Path, name)
		}
		c.repoToModule[name] = r
		c.moduleByPath[r.Path] = &c.gomod.Requires[i]
	}

	c.evalModule()
	c.readBazelignore()
	c.discoverPackages()
	if _, ok := c.pkgs[""]; !ok {
		c.reportAt("BUILD.bazel", "the repository root has no BUILD file (gazelle target and directives belong there)")
	}
	var paths []string
	for p := range c.pkgs {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		c.evalBuild(c.pkgs[p])
	}
	c.checkModule()
	for _, t := range c.targets {
		c.checkTarget(t)
	}
	c.checkGoDepsRepos()
	c.checkGazelleDirectives()
	c.checkBazelrc()
	c.checkTestInputs()
	c.checkBazelrcTestEnv()
	c.checkBuildSteps()

	sort.SliceStable(c.findings, func(i, j int) bool { return lessPos(c.findings[i].Pos, c.findings[j].Pos) })
	return c, nil
}

func lessPos(a, b string) bool {
	fa, la := splitPos(a)
	fb, lb := splitPos(b)
	if fa != fb {
		return fa < fb
	}
	return la < lb
}

func splitPos(p string) (string, int) {
	parts := strings.Split(p, ":")
	n := 0
	if len(parts) > 1 {
		fmt.Sscanf(parts[1], "%d", &n)
	}
	return parts[0], n
}

func (c *checker) report(pos syntax.Position, format string, args ...any) {
	c.reportAt(fmt.Sprintf("%s:%d:%d", pos.Filename(), pos.Line, pos.Col), format, args...)
}

func (c *checker) reportAt(pos, format string, args ...any) {
	f := Finding{Pos: pos, Msg: fmt.Sprintf(format, args...)}
	if c.seen[f.String()] {
		return
	}
	c.seen[f.String()] = true
	c.findings = append(c.findings, f)
}

func (c *checker) reportErr(err error) {
	var ee *starlark.EvalError
	var se syntax.Error
	switch {
	case errors.As(err, &ee):
		// The innermost frame with a position in a Starlark file.
		var pos syntax.Position
		for i := len(ee.CallStack) - 1; i >= 0; i-- {
			if p := ee.CallStack.At(i).Pos; p.IsValid() {
				pos = p
				break
			}
		}
		c.report(pos, "%s", ee.Msg)
	case errors.As(err, &se):
		c.report(se.Pos, "%s", se.Msg)
	default:
		c.reportAt("", "%v", err)
	}
}

// repoVisible reports whether the apparent repository name is visible
// from the main repository.
func (c *checker) repoVisible(repo string) bool {
	if repo == "" || repo == "bazel_tools" || (c.mod != nil && repo == c.mod.name) {
		return true
	}
	if c.mod == nil {
		return false
	}
	if _, ok := c.mod.deps[repo]; ok {
		return true
	}
	_, ok := c.mod.useRepos[repo]
	return ok
}

// --- labels ---

type label struct {
	repo, pkg, name string
}

func (l label) String() string {
	r := ""
	if l.repo != "" {
		r = "@" + l.repo
	}
	return r + "//" + l.pkg + ":" + l.name
}

// parseLabel resolves s relative to package from (in the main repository).
func parseLabel(from, s string) (label, error) {
	if s == "" {
		return label{}, fmt.Errorf("empty label")
	}
	l := label{}
	rest := s
	if strings.HasPrefix(rest, "@") {
		rest = strings.TrimPrefix(strings.TrimPrefix(rest, "@"), "@")
		i := strings.Index(rest, "//")
		if i < 0 {
			// "@repo" is "@repo//:repo".
			return label{repo: rest, name: rest}, nil
		}
		l.repo, rest = rest[:i], rest[i:]
	}
	switch {
	case strings.HasPrefix(rest, "//"):
		rest = rest[2:]
		pkgPart, name, hasName := strings.Cut(rest, ":")
		l.pkg = pkgPart
		if hasName {
			l.name = name
		} else {
			l.name = path.Base(pkgPart)
			if pkgPart == "" {
				return label{}, fmt.Errorf("label %q names no target", s)
			}
		}
	case strings.HasPrefix(rest, ":"):
		l.pkg, l.name = from, rest[1:]
	default:
		l.pkg, l.name = from, rest
	}
	if l.name == "" || strings.Contains(l.name, "//") || strings.HasPrefix(l.pkg, "/") || strings.HasSuffix(l.pkg, "/") {
		return label{}, fmt.Errorf("malformed label %q", s)
	}
	return l, nil
}

// resolve returns the target a label names, or a description of why it
// names nothing. A nil target with an empty reason means "exists, but
// outside what the checker can see" (external repositories).
func (c *checker) resolve(from, s string) (label, *target, string) {
	l, err := parseLabel(from, s)
	if err != nil {
		return l, nil, err.Error()
	}
	l = c.canonical(l)
	if l.repo != "" {
		t, why := c.resolveExternal(l)
		return l, t, why
	}
	if l.pkg == "visibility" {
		return l, nil, ""
	}
	p, ok := c.pkgs[l.pkg]
	if !ok {
		if owner := c.packageOf(l.pkg); owner != nil && c.fileExists(l.pkg) {
			return l, nil, fmt.Sprintf("//%s is not a package (no BUILD file); the path belongs to //%s", l.pkg, owner.path)
		}
		return l, nil, fmt.Sprintf("no package //%s (no BUILD file there)", l.pkg)
	}
	if t, ok := p.targets[l.name]; ok {
		if !c.visibleFrom(t, from) {
			return l, t, fmt.Sprintf("%s is not visible from //%s (visibility %v)", l, from, c.visibilityOf(t))
		}
		return l, t, ""
	}
	if l.name == "__pkg__" || l.name == "__subpackages__" {
		return l, nil, ""
	}
	rel := path.Join(l.pkg, l.name)
	if c.fileExists(rel) {
		if owner := c.packageOf(rel); owner != nil && owner.path != l.pkg {
			return l, nil, fmt.Sprintf("%s belongs to package //%s, not //%s (crosses a package boundary)", rel, owner.path, l.pkg)
		}
		if from != l.pkg {
			return l, nil, fmt.Sprintf("%s is a source file of //%s used from //%s: list it in exports_files() there", l, l.pkg, from)
		}
		return l, &target{pkg: p, name: l.name, kind: "source file", file: true}, ""
	}
	if p.broken {
		return l, nil, ""
	}
	return l, nil, fmt.Sprintf("%s names no file or target in //%s", l, l.pkg)
}

// visibilityOf returns a target's visibility: its own attribute, that of
// the rule that declares it (outputs and macro-made targets), or the
// package default (private when unset).
func (c *checker) visibilityOf(t *target) []string {
	if t.rule != nil {
		t = t.rule
	}
	if v, ok := t.attrs["visibility"]; ok {
		return stringsOf(v)
	}
	if t.pkg != nil && t.pkg.defaultVisibility != nil {
		return t.pkg.defaultVisibility
	}
	return []string{"//visibility:private"}
}

// visibleFrom applies Bazel's visibility rules for a reference from the
// package from (package groups are not modelled and count as visible).
func (c *checker) visibleFrom(t *target, from string) bool {
	if t.pkg == nil || t.pkg.path == from {
		return true
	}
	for _, v := range c.visibilityOf(t) {
		l, err := parseLabel(t.pkg.path, v)
		if err != nil || l.repo != "" {
			continue
		}
		switch {
		case v == "//visibility:public":
			return true
		case v == "//visibility:private":
		case l.name == "__pkg__":
			if l.pkg == from {
				return true
			}
		case l.name == "__subpackages__":
			if l.pkg == "" || from == l.pkg || strings.HasPrefix(from, l.pkg+"/") {
				return true
			}
		default:
			return true // a package_group
		}
	}
	return false
}

func (c *checker) fileExists(rel string) bool {
	_, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(rel)))
	return err == nil
}

// resolveExternal checks a label into another repository: the repository
// must be visible; targets of stubbed modules must be known; packages of
// go_deps repositories must exist in the module (when it is in the cache);
// targets of repositories this repository's extensions create, and of Go
// SDK repositories, must be declared by their BUILD file. It returns the
// target when the checker knows it.
func (c *checker) resolveExternal(l label) (*target, string) {
	if _, ok := c.repoToModule[l.repo]; ok {
		c.usedGoRepos[l.repo] = true
	}
	if !c.repoVisible(l.repo) {
		return nil, fmt.Sprintf("repository @%s is not visible: no bazel_dep or use_repo in MODULE.bazel brings it in", l.repo)
	}
	for _, pkgs := range []map[string]*pkg{c.extPkgs, c.sdkRepos} {
		p, ok := pkgs[l.repo]
		if !ok {
			continue
		}
		if l.pkg != "" {
			return nil, fmt.Sprintf("%s: the repository has only a root package", l)
		}
		t, ok := p.targets[l.name]
		if !ok {
			return nil, fmt.Sprintf("%s names no target in the repository's BUILD file (%s)", l, p.file)
		}
		return t, ""
	}
	return nil, c.resolveStubbedExternal(l)
}

func (c *checker) resolveStubbedExternal(l label) string {
	if d, ok := c.mod.deps[l.repo]; ok || l.repo == "bazel_tools" {
		module := "bazel_tools"
		if ok {
			module = d.name
		}
		known, stubbed := knownTargets[module]
		if !stubbed {
			return fmt.Sprintf("no targets of @%s are stubbed in tools/bazelcheck/stubs.go (knownTargets); check the label in the module's sources and add it", l.repo)
		}
		for _, k := range known {
			kl, _ := parseLabel("", k)
			if kl.pkg == l.pkg && kl.name == l.name {
				return ""
			}
		}
		return fmt.Sprintf("%s is not a known target of %s %s (tools/bazelcheck/stubs.go knownTargets)", l, module, pinnedModules[module])
	}
	r, ok := c.repoToModule[l.repo]
	if !ok {
		return ""
	}
	if c.cfg.GoModCache == "" {
		return ""
	}
	dir := filepath.Join(c.cfg.GoModCache, escapeModulePath(r.Path)+"@"+r.Version)
	if _, err := os.Stat(dir); err != nil {
		return "" // not downloaded here; nothing to compare against
	}
	pkgDir := filepath.Join(dir, filepath.FromSlash(l.pkg))
	if !hasGoFiles(pkgDir) {
		return fmt.Sprintf("%s: %s@%s has no Go package %q", l, r.Path, r.Version, l.pkg)
	}
	imp := r.Path
	if l.pkg != "" {
		imp += "/" + l.pkg
	}
	if want := goLibName(imp); l.name != want && l.name != "go_default_library" {
		return fmt.Sprintf("%s: the library of %s is named %q (gazelle's import naming convention)", l, imp, want)
	}
	return ""
}

func hasGoFiles(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".go") {
			return true
		}
	}
	return false
}

// checkLabel reports a label that names nothing. t may be nil.
func (c *checker) checkLabel(t *target, from, s string, pos syntax.Position, what string) {
	if _, _, why := c.resolve(from, s); why != "" {
		c.report(pos, "%s: %s", what, why)
	}
}

// --- targets ---

func (c *checker) checkTarget(t *target) {
	if t.spec == nil || t.pkg.repo != "" {
		// Unknown symbols are reported at their load; the BUILD files of
		// repositories made at fetch time are only looked up.
		return
	}
	what := fmt.Sprintf("%s %q", t.kind, t.name)
	for name, v := range t.attrs {
		a, ok := t.spec.attr(name)
		if !ok {
			c.report(t.pos, "%s: unknown attribute %q (not an attribute of %s in the pinned version)", what, name, t.kind)
			continue
		}
		c.checkType(t.pos, what, name, a.kind, v)
		for _, k := range selectKeys(v) {
			if k != "//conditions:default" {
				c.checkLabel(t, t.pkg.path, k, t.pos, fmt.Sprintf("%s: select condition in %q", what, name))
			}
		}
		for _, l := range c.labelsOf(a.kind, v) {
			c.checkLabel(t, t.pkg.path, l, t.pos, fmt.Sprintf("%s: attribute %q", what, name))
		}
	}
	for name, a := range t.spec.attrs {
		if _, ok := t.attrs[name]; a.mandatory && !ok && name != "name" {
			c.report(t.pos, "%s: missing mandatory attribute %q", what, name)
		}
	}
	c.checkExpansions(t)
	if t.kind == "test_suite" {
		for _, s := range stringsOf(t.attrs["tests"]) {
			if _, dep, why := c.resolve(t.pkg.path, s); why == "" && dep != nil && (dep.spec == nil || (dep.spec.class != "test" && dep.kind != "test_suite")) {
				c.report(t.pos, "%s: %q is a %s, not a test", what, s, dep.kind)
			}
		}
	}
	if t.spec.check != nil {
		t.spec.check(c, t)
	}
}

// labelsOf returns the labels an attribute value names.
func (c *checker) labelsOf(k attrKind, v starlark.Value) []string {
	var out []string
	for _, alt := range alternatives(v) {
		switch k {
		case kLabel, kLabelList:
			out = append(out, stringsOf(alt)...)
		case kLabelKeyedStringDict:
			if d, ok := alt.(*starlark.Dict); ok {
				for _, key := range d.Keys() {
					out = append(out, strOf(key))
				}
			}
		case kStringListOrLabel, kStringDictOrLabel, kTemplate:
			if s, ok := alt.(starlark.String); ok {
				out = append(out, string(s))
			}
			if l, ok := alt.(labelValue); ok {
				out = append(out, l.s)
			}
		case kMtree:
			if s, ok := alt.(starlark.String); ok && s != "auto" {
				out = append(out, string(s))
			}
		case kVisibility:
			// Package specifications (//pkg:__pkg__, __subpackages__) need
			// not name existing packages; package_group labels must exist.
			for _, s := range stringsOf(alt) {
				if !strings.HasPrefix(s, "//visibility:") && !strings.HasSuffix(s, ":__pkg__") && !strings.HasSuffix(s, ":__subpackages__") {
					out = append(out, s)
				}
			}
		}
	}
	return out
}

// checkType reports values of the wrong type (Bazel fails at load time).
func (c *checker) checkType(pos syntax.Position, what, name string, k attrKind, v starlark.Value) {
	for _, alt := range alternatives(v) {
		if !typeOK(k, alt) {
			c.report(pos, "%s: attribute %q must be a %s, got %s", what, name, kindNames[k], alt.Type())
		}
	}
}

func typeOK(k attrKind, v starlark.Value) bool {
	if v == starlark.None {
		return k != kString && k != kBool
	}
	isStr := func(v starlark.Value) bool {
		switch v.(type) {
		case starlark.String, labelValue:
			return true
		}
		return false
	}
	isList := func(v starlark.Value) bool {
		l, ok := v.(*starlark.List)
		if !ok {
			return false
		}
		for i := 0; i < l.Len(); i++ {
			if !isStr(l.Index(i)) {
				return false
			}
		}
		return true
	}
	isDict := func(v starlark.Value) bool {
		d, ok := v.(*starlark.Dict)
		if !ok {
			return false
		}
		for _, it := range d.Items() {
			if !isStr(it[0]) || !isStr(it[1]) {
				return false
			}
		}
		return true
	}
	switch k {
	case kAny:
		return true
	case kString, kLabel, kOutput:
		return isStr(v)
	case kStringList, kLabelList, kOutputList, kVisibility:
		return isList(v)
	case kStringDict, kLabelKeyedStringDict:
		return isDict(v)
	case kBool:
		_, b := v.(starlark.Bool)
		_, i := v.(starlark.Int)
		return b || i
	case kInt:
		_, i := v.(starlark.Int)
		_, b := v.(starlark.Bool)
		return i || b
	case kStringListOrLabel, kTemplate, kMtree:
		return isStr(v) || isList(v)
	case kStringDictOrLabel:
		return isStr(v) || isDict(v)
	}
	return true
}

var expansionRe = regexp.MustCompile(`\$\((location|locations|execpath|execpaths|rootpath|rootpaths|rlocationpath|rlocationpaths)\s+([^)]*)\)`)

// checkExpansions verifies that every $(location X) (and execpath,
// rootpath, rlocationpath, plural forms) in an expanded attribute names a
// label listed in one of the attributes the rule expands against.
func (c *checker) checkExpansions(t *target) {
	if len(t.spec.expand) == 0 {
		return
	}
	deps := map[label]bool{}
	for _, d := range t.spec.deps {
		a, _ := t.spec.attr(d)
		v, ok := t.attrs[d]
		if !ok {
			continue
		}
		var ls []string
		if a.kind == kOutput || a.kind == kOutputList {
			ls = stringsOf(v)
		} else {
			ls = c.labelsOf(a.kind, v)
		}
		for _, s := range ls {
			if l, err := parseLabel(t.pkg.path, s); err == nil {
				deps[c.canonical(l)] = true
			}
		}
	}
	for _, attr := range t.spec.expand {
		v, ok := t.attrs[attr]
		if !ok {
			continue
		}
		for _, s := range stringsOf(v) {
			for _, m := range expansionRe.FindAllStringSubmatch(s, -1) {
				ref := strings.TrimSpace(m[2])
				l, dep, why := c.resolve(t.pkg.path, ref)
				switch {
				case why != "":
					c.report(t.pos, "%s %q: $(%s %s) in %q: %s", t.kind, t.name, m[1], ref, attr, why)
				case !deps[c.canonical(l)]:
					c.report(t.pos, "%s %q: $(%s %s) in %q names %s, which is not in %s of this rule (Bazel expands only dependencies listed there)",
						t.kind, t.name, m[1], ref, attr, describe(l, dep), strings.Join(t.spec.deps, "/"))
				default:
					n, how := c.fileCount(dep, 0)
					plural := strings.HasSuffix(m[1], "s")
					switch {
					case n == unknownFiles:
					case !plural && n != 1:
						c.report(t.pos, "%s %q: $(%s %s) in %q: %s provides %s; Bazel refuses a singular expansion of anything but one file (\"expands to more than one file\"): name the file or directory itself, or use $(%ss ...)",
							t.kind, t.name, m[1], ref, attr, describe(l, dep), how, m[1])
					case plural && n == 0:
						c.report(t.pos, "%s %q: $(%s %s) in %q: %s provides no files", t.kind, t.name, m[1], ref, attr, describe(l, dep))
					}
				}
			}
		}
	}
}

// fileCount returns how many files t provides (its DefaultInfo files, what
// $(location) and friends expand), with a description, as each rule of the
// pinned versions defines it: run_binary its outs and out_dirs; genrule
// its outs; filegroup and platform_transition_filegroup the files of their
// srcs; binaries, tests and the single-output rules (write_file,
// copy_file, expand_template, tar, oci_image, oci_image_index, oci_push,
// oci_load) one file. unknownFiles when the checker cannot tell.
func (c *checker) fileCount(t *target, depth int) (int, string) {
	if t == nil || depth > 20 {
		return unknownFiles, ""
	}
	if t.files != 0 {
		switch t.files {
		case manyFiles:
			return manyFiles, "several files"
		case unknownFiles:
			return unknownFiles, ""
		}
		return t.files, plural(t.files, "file")
	}
	if t.file || t.rule != nil || t.spec == nil && t.kind == "source file" {
		return 1, "one file"
	}
	if t.spec == nil {
		return unknownFiles, ""
	}
	switch t.kind {
	case "run_binary":
		outs, ok1 := attrLen(t, "outs")
		dirs, ok2 := attrLen(t, "out_dirs")
		if !ok1 || !ok2 {
			return unknownFiles, ""
		}
		return outs + dirs, fmt.Sprintf("%s (%d in outs, %d in out_dirs)", plural(outs+dirs, "file"), outs, dirs)
	case "genrule":
		outs, ok := attrLen(t, "outs")
		if !ok {
			return unknownFiles, ""
		}
		return outs, plural(outs, "file") + " (its outs)"
	case "filegroup", "platform_transition_filegroup":
		return c.filegroupCount(t, depth)
	case "go_binary", "go_test", "sh_binary", "sh_test", "write_file", "copy_file", "expand_template",
		"tar", "oci_image", "oci_image_index", "oci_push", "oci_load", "gazelle":
		return 1, "one file"
	}
	return unknownFiles, ""
}

// attrLen returns the length of t's list attribute name; false when a
// select() makes it unknown.
func attrLen(t *target, name string) (int, bool) {
	v, ok := t.attrs[name]
	if !ok {
		return 0, true
	}
	if _, sel := v.(*selectValue); sel {
		return 0, false
	}
	return len(stringsOf(v)), true
}

// filegroupCount is fileCount of a filegroup or
// platform_transition_filegroup: the files of its srcs.
func (c *checker) filegroupCount(t *target, depth int) (int, string) {
	if _, ok := t.attrs["output_group"]; ok {
		return unknownFiles, ""
	}
	v, ok := t.attrs["srcs"]
	if !ok {
		return 0, "no files"
	}
	if _, sel := v.(*selectValue); sel {
		return unknownFiles, ""
	}
	total := 0
	for _, s := range stringsOf(v) {
		var dep *target
		if t.pkg.repo != "" {
			// A file or target of the fetched repository itself.
			if l, err := parseLabel("", s); err == nil && l.repo == "" && l.pkg == "" {
				if dep = t.pkg.targets[l.name]; dep == nil {
					total++ // a file the repository rule writes
					continue
				}
			} else if !strings.HasPrefix(s, "@") && !strings.HasPrefix(s, "//") {
				total++
				continue
			}
		}
		if dep == nil {
			_, d, why := c.resolve(t.pkg.path, s)
			if why != "" || d == nil {
				return unknownFiles, ""
			}
			dep = d
		}
		n, _ := c.fileCount(dep, depth+1)
		if n == unknownFiles {
			return unknownFiles, ""
		}
		total += n
	}
	if total >= manyFiles {
		return manyFiles, "several files (its srcs)"
	}
	return total, plural(total, "file") + " (its srcs)"
}

func plural(n int, what string) string {
	if n == 1 {
		return "one " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func describe(l label, t *target) string {
	if t != nil {
		return fmt.Sprintf("%s (%s)", l, t.kind)
	}
	return l.String()
}

// canonical normalizes a label for comparison ("@main" spelled as "").
func (c *checker) canonical(l label) label {
	if c.mod != nil && l.repo == c.mod.name {
		l.repo = ""
	}
	return l
}

// checkGoRule verifies x_defs keys of the form importpath.Var name a
// package-level string variable of this module.
func checkGoRule(c *checker, t *target) {
	d, ok := t.attrs["x_defs"].(*starlark.Dict)
	if !ok {
		return
	}
	for _, k := range d.Keys() {
		key := strOf(k)
		i := strings.LastIndex(key, ".")
		if i < 0 {
			continue // a variable of the rule's own package
		}
		imp, name := key[:i], key[i+1:]
		rel, ok := strings.CutPrefix(imp, c.gomod.Module)
		if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
			continue
		}
		rel = strings.TrimPrefix(rel, "/")
		if !hasStringVar(filepath.Join(c.root, filepath.FromSlash(rel)), name) {
			c.report(t.pos, "%s %q: x_defs key %q: package %s declares no package-level string variable %s (the linker would ignore the -X)", t.kind, t.name, key, imp, name)
		}
	}
}

func hasStringVar(dir, name string) bool {
	fset := token.NewFileSet()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			continue
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if n.Name != name {
						continue
					}
					if id, ok := vs.Type.(*ast.Ident); ok {
						return id.Name == "string"
					}
					if vs.Type == nil && i < len(vs.Values) {
						if bl, ok := vs.Values[i].(*ast.BasicLit); ok {
							return bl.Kind == token.STRING
						}
					}
					return false
				}
			}
		}
	}
	return false
}

// --- root BUILD directives and .bazelrc ---

// checkGazelleDirectives verifies the root BUILD file's gazelle:prefix
// against go.mod's module path.
func (c *checker) checkGazelleDirectives() {
	prefix := ""
	for _, cm := range c.rootBuildComments {
		text := strings.TrimSpace(strings.TrimPrefix(cm.Text, "#"))
		key, val, ok := strings.Cut(text, " ")
		if !ok || !strings.HasPrefix(key, "gazelle:") {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "gazelle:prefix":
			prefix = val
			if val != c.gomod.Module {
				c.report(cm.Start, "gazelle:prefix %q differs from go.mod's module path %q", val, c.gomod.Module)
			}
		}
	}
	if prefix == "" && c.pkgs[""] != nil {
		c.reportAt(c.pkgs[""].file, "no `# gazelle:prefix %s` directive in the root BUILD file", c.gomod.Module)
	}
}

// checkBazelrc resolves the Starlark flags (--@repo//pkg:flag) and the
// workspace status command named in .bazelrc.
func (c *checker) checkBazelrc() {
	file := ".bazelrc"
	data, err := os.ReadFile(filepath.Join(c.root, file))
	if err != nil {
		return
	}
	flagRe := regexp.MustCompile(`--(?:no)?(@[^=\s]*//[^=\s]*|//[^=\s]*)`)
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pos := fmt.Sprintf("%s:%d", file, i+1)
		for _, m := range flagRe.FindAllStringSubmatch(line, -1) {
			if _, _, why := c.resolve("", m[1]); why != "" {
				c.reportAt(pos, "flag %s: %s", m[1], why)
			}
		}
		for _, f := range strings.Fields(line) {
			if cmd, ok := strings.CutPrefix(f, "--workspace_status_command="); ok {
				fi, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(cmd)))
				switch {
				case err != nil:
					c.reportAt(pos, "--workspace_status_command: %s does not exist", cmd)
				case fi.Mode()&0o111 == 0:
					c.reportAt(pos, "--workspace_status_command: %s is not executable", cmd)
				}
			}
		}
	}
}
