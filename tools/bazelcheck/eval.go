package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// BUILD and MODULE.bazel files are Starlark with Bazel's restrictions: no
// top-level if/for, no reassignment, no while, no recursion.
var buildFileOptions = &syntax.FileOptions{}

// --- values ---

// selectValue is the result of select(), possibly concatenated with plain
// values (`[...] + select({...})`).
type selectValue struct {
	parts []starlark.Value // *starlark.Dict for a select, anything else verbatim
}

var _ starlark.HasBinary = (*selectValue)(nil)

func (s *selectValue) String() string        { return "select(...)" }
func (s *selectValue) Type() string          { return "select" }
func (s *selectValue) Freeze()               {}
func (s *selectValue) Truth() starlark.Bool  { return true }
func (s *selectValue) Hash() (uint32, error) { return 0, fmt.Errorf("unhashable: select") }

func (s *selectValue) Binary(op syntax.Token, y starlark.Value, side starlark.Side) (starlark.Value, error) {
	if op != syntax.PLUS && op != syntax.PIPE {
		return nil, nil
	}
	var parts []starlark.Value
	add := func(v starlark.Value) {
		if o, ok := v.(*selectValue); ok {
			parts = append(parts, o.parts...)
		} else {
			parts = append(parts, v)
		}
	}
	if side == starlark.Left {
		add(s)
		add(y)
	} else {
		add(y)
		add(s)
	}
	return &selectValue{parts: parts}, nil
}

// labelValue is the result of Label("...").
type labelValue struct{ s string }

func (l labelValue) String() string        { return l.s }
func (l labelValue) Type() string          { return "Label" }
func (l labelValue) Freeze()               {}
func (l labelValue) Truth() starlark.Bool  { return true }
func (l labelValue) Hash() (uint32, error) { return starlark.String(l.s).Hash() }

// alternatives returns every value an attribute may take: the branches of
// its selects (concatenations are expanded part by part).
func alternatives(v starlark.Value) []starlark.Value {
	s, ok := v.(*selectValue)
	if !ok {
		return []starlark.Value{v}
	}
	var out []starlark.Value
	for _, p := range s.parts {
		if d, ok := p.(*starlark.Dict); ok {
			for _, it := range d.Items() {
				out = append(out, it[1])
			}
		} else {
			out = append(out, p)
		}
	}
	return out
}

// selectKeys returns the condition labels of the selects in v.
func selectKeys(v starlark.Value) []string {
	s, ok := v.(*selectValue)
	if !ok {
		return nil
	}
	var out []string
	for _, p := range s.parts {
		if d, ok := p.(*starlark.Dict); ok {
			for _, k := range d.Keys() {
				out = append(out, strOf(k))
			}
		}
	}
	return out
}

func strOf(v starlark.Value) string {
	switch x := v.(type) {
	case starlark.String:
		return string(x)
	case labelValue:
		return x.s
	}
	return v.String()
}

// stringsOf flattens strings, lists of strings, dict values and selects of
// those into a list of strings (an absent attribute gives none).
func stringsOf(v any) []string {
	sv, ok := v.(starlark.Value)
	if !ok || sv == nil {
		return nil
	}
	var out []string
	for _, alt := range alternatives(sv) {
		switch x := alt.(type) {
		case starlark.String:
			out = append(out, string(x))
		case labelValue:
			out = append(out, x.s)
		case *starlark.List:
			if x == nil {
				continue
			}
			for i := 0; i < x.Len(); i++ {
				out = append(out, stringsOf(x.Index(i))...)
			}
		case starlark.Tuple:
			for _, e := range x {
				out = append(out, stringsOf(e)...)
			}
		case *starlark.Dict:
			if x == nil {
				continue
			}
			for _, it := range x.Items() {
				out = append(out, stringsOf(it[1])...)
			}
		}
	}
	return out
}

// --- packages and targets ---

type pkg struct {
	path string // "" for the root package
	file string // BUILD file, relative to the root
	// repo is the apparent name of the repository of a package this
	// repository's own repository rules create (tools/bazel), or of a Go
	// SDK repository; "" for the main repository. canonical is its
	// canonical name, the first component of its runfiles paths.
	repo      string
	canonical string
	targets   map[string]*target
	broken    bool // evaluation stopped early; do not report missing targets
	// defaultVisibility is package(default_visibility = ...).
	defaultVisibility []string
}

type target struct {
	pkg   *pkg
	name  string
	kind  string
	spec  *ruleSpec // nil for file targets and unknown symbols
	attrs map[string]starlark.Value
	pos   syntax.Position
	// rule is the rule that declares this output file or implicit target.
	rule *target
	file bool // exports_files entry
	// files, when not zero, is the number of files the target provides,
	// known without looking at a rule (targets of known repositories):
	// a count, manyFiles or unknownFiles.
	files int
}

const (
	manyFiles    = 1 << 20 // more than one, how many is not known
	unknownFiles = -1
)

// discoverPackages finds every BUILD/BUILD.bazel file under root, skipping
// .bazelignore'd directories, bazel-* output symlinks and .git.
func (c *checker) discoverPackages() {
	c.pkgs = map[string]*pkg{}
	_ = filepath.WalkDir(c.root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(c.root, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			rel = ""
		}
		if d.IsDir() {
			if rel != "" && (d.Name() == ".git" || strings.HasPrefix(d.Name(), "bazel-") || c.ignored(rel)) {
				return filepath.SkipDir
			}
			if f := buildFileIn(p); f != "" {
				c.pkgs[rel] = &pkg{path: rel, file: path.Join(rel, f), targets: map[string]*target{}}
			}
		}
		return nil
	})
}

func buildFileIn(dir string) string {
	for _, n := range []string{"BUILD.bazel", "BUILD"} {
		if fi, err := os.Stat(filepath.Join(dir, n)); err == nil && fi.Mode().IsRegular() {
			return n
		}
	}
	return ""
}

func (c *checker) ignored(rel string) bool {
	for _, ig := range c.bazelignore {
		if rel == ig || strings.HasPrefix(rel, ig+"/") {
			return true
		}
	}
	return false
}

func (c *checker) readBazelignore() {
	data, err := os.ReadFile(filepath.Join(c.root, ".bazelignore"))
	if err != nil {
		return
	}
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		c.bazelignore = append(c.bazelignore, strings.Trim(l, "/"))
	}
}

// packageOf returns the package that owns the path rel (a file or
// directory, relative to the root): the closest enclosing package.
func (c *checker) packageOf(rel string) *pkg {
	for d := rel; ; d = path.Dir(d) {
		if d == "." {
			d = ""
		}
		if p, ok := c.pkgs[d]; ok {
			return p
		}
		if d == "" {
			return nil
		}
	}
}

// --- BUILD file evaluation ---

type loadReq struct {
	module string
	names  []string // symbols as exported by the module
	pos    syntax.Position
}

func (c *checker) evalBuild(p *pkg) {
	src, err := os.ReadFile(filepath.Join(c.root, p.file))
	if err != nil {
		c.reportAt(p.file, "%v", err)
		p.broken = true
		return
	}
	c.evalBuildSource(p, src)
}

// evalBuildSource evaluates src as the BUILD file of p.
func (c *checker) evalBuildSource(p *pkg, src []byte) {
	f, err := buildFileOptions.Parse(p.file, src, syntax.RetainComments)
	if err != nil {
		c.reportErr(err)
		p.broken = true
		return
	}
	loads := loadRequests(f)
	for _, stmt := range f.Stmts {
		if s, ok := stmt.(*syntax.DefStmt); ok {
			c.report(s.Def, "function definitions are not allowed in BUILD files")
		}
	}
	if p.path == "" && p.repo == "" {
		c.rootBuildComments = commentsOf(f)
	}
	thread := &starlark.Thread{
		Name:  p.file,
		Print: func(_ *starlark.Thread, msg string) {},
		Load: func(_ *starlark.Thread, module string) (starlark.StringDict, error) {
			if p.repo == "" && c.isLocalBzl(module) {
				return c.loadLocal(p.path, loads[module]), nil
			}
			return c.loadStub(loads[module]), nil
		},
	}
	thread.SetLocal("pkg", p)
	predeclared := c.buildBuiltins(p)
	if _, err := starlark.ExecFileOptions(buildFileOptions, thread, p.file, src, predeclared); err != nil {
		c.reportErr(err)
		p.broken = true
	}
}

// loadRequests groups the load statements of f by the file they load.
func loadRequests(f *syntax.File) map[string]*loadReq {
	loads := map[string]*loadReq{}
	for _, stmt := range f.Stmts {
		if s, ok := stmt.(*syntax.LoadStmt); ok {
			r := loads[s.ModuleName()]
			if r == nil {
				r = &loadReq{module: s.ModuleName(), pos: s.Load}
				loads[s.ModuleName()] = r
			}
			for _, from := range s.From {
				r.names = append(r.names, from.Name)
			}
		}
	}
	return loads
}

func commentsOf(f *syntax.File) []syntax.Comment {
	var out []syntax.Comment
	syntax.Walk(f, func(n syntax.Node) bool {
		if n == nil {
			return false
		}
		if cs := n.Comments(); cs != nil {
			out = append(out, cs.Before...)
			out = append(out, cs.Suffix...)
			out = append(out, cs.After...)
		}
		return true
	})
	return out
}

// loadStub returns the symbols a load statement asks for: the stub of each
// known symbol, and for unknown files or symbols a reported mistake plus a
// placeholder (so evaluation continues and later findings stay precise).
func (c *checker) loadStub(r *loadReq) starlark.StringDict {
	out := starlark.StringDict{}
	if r == nil {
		return out
	}
	repo := ""
	if strings.HasPrefix(r.module, "@") {
		repo = strings.TrimPrefix(r.module[:strings.Index(r.module+"//", "//")], "@")
	}
	syms, known := bzlFiles[r.module]
	switch {
	case repo != "" && !c.repoVisible(repo):
		c.report(r.pos, "load(%q): repository @%s is not visible (no bazel_dep or use_repo brings it in)", r.module, repo)
	case !known:
		c.report(r.pos, "load(%q): unknown .bzl file (not part of the pinned rule sets' public API as stubbed in tools/bazelcheck/stubs.go)", r.module)
	}
	for _, n := range r.names {
		spec := syms[n]
		if known && spec == nil {
			c.report(r.pos, "load(%q): %q is not exported by that file", r.module, n)
		}
		out[n] = c.ruleBuiltin(n, spec)
	}
	return out
}

func (c *checker) buildBuiltins(p *pkg) starlark.StringDict {
	d := starlark.StringDict{
		"select": starlark.NewBuiltin("select", builtinSelect),
		"Label":  starlark.NewBuiltin("Label", builtinLabel),
		"glob":   starlark.NewBuiltin("glob", c.builtinGlob(p)),
		"package": starlark.NewBuiltin("package", func(_ *starlark.Thread, _ *starlark.Builtin, _ starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			for _, kv := range kwargs {
				if string(kv[0].(starlark.String)) == "default_visibility" {
					p.defaultVisibility = stringsOf(kv[1])
				}
			}
			return starlark.None, nil
		}),
		"licenses": starlark.NewBuiltin("licenses", func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
			return starlark.None, nil
		}),
		"package_name": starlark.NewBuiltin("package_name", func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
			return starlark.String(p.path), nil
		}),
		"repository_name": starlark.NewBuiltin("repository_name", func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
			return starlark.String("@"), nil
		}),
		"exports_files": starlark.NewBuiltin("exports_files", c.builtinExportsFiles(p)),
	}
	for name, spec := range nativeRules {
		d[name] = c.ruleBuiltin(name, spec)
	}
	return d
}

func builtinSelect(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var d *starlark.Dict
	var msg string
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "x", &d, "no_match_error?", &msg); err != nil {
		return nil, err
	}
	return &selectValue{parts: []starlark.Value{d}}, nil
}

func builtinLabel(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var s string
	if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 1, &s); err != nil {
		return nil, err
	}
	return labelValue{s}, nil
}

func (c *checker) builtinExportsFiles(p *pkg) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
	return func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var srcs *starlark.List
		var vis, lic starlark.Value
		if err := starlark.UnpackArgs(b.Name(), args, kwargs, "srcs", &srcs, "visibility?", &vis, "licenses?", &lic); err != nil {
			return nil, err
		}
		pos := callSite(thread)
		attrs := map[string]starlark.Value{"visibility": starlark.NewList([]starlark.Value{starlark.String("//visibility:public")})}
		if vis != nil && vis != starlark.None {
			attrs["visibility"] = vis
		}
		for _, s := range stringsOf(srcs) {
			if p.repo == "" && !c.fileExists(path.Join(p.path, s)) {
				c.report(pos, "exports_files: %q names no file in package //%s", s, p.path)
			}
			if _, dup := p.targets[s]; !dup {
				p.targets[s] = &target{pkg: p, name: s, kind: "source file", pos: pos, file: true, attrs: attrs}
			}
		}
		return starlark.None, nil
	}
}

// ruleBuiltin records a call of a rule or macro as a target.
func (c *checker) ruleBuiltin(name string, spec *ruleSpec) *starlark.Builtin {
	return starlark.NewBuiltin(name, func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		pos := callSite(thread)
		if len(args) > 0 {
			c.report(pos, "%s: rules take keyword arguments only", name)
		}
		t := &target{kind: name, spec: spec, attrs: map[string]starlark.Value{}, pos: pos}
		for _, kv := range kwargs {
			t.attrs[string(kv[0].(starlark.String))] = kv[1]
		}
		n, ok := t.attrs["name"].(starlark.String)
		if !ok || n == "" {
			c.report(pos, "%s: missing or non-string \"name\"", name)
			return starlark.None, nil
		}
		t.name = string(n)
		p, _ := thread.Local("pkg").(*pkg)
		if p == nil {
			return nil, fmt.Errorf("%s: called outside a BUILD file", name)
		}
		t.pkg = p
		c.declare(p, t)
		if spec != nil {
			for _, o := range c.outputsOf(t) {
				c.declare(p, &target{pkg: p, name: o, kind: "output of " + name, pos: pos, rule: t})
			}
		}
		c.targets = append(c.targets, t)
		return starlark.None, nil
	})
}

func (c *checker) declare(p *pkg, t *target) {
	if prev, dup := p.targets[t.name]; dup && !prev.file {
		c.report(t.pos, "target %q is declared twice in //%s (first at %s)", t.name, p.path, prev.pos)
		return
	}
	p.targets[t.name] = t
}

// outputsOf returns the output files and implicit targets a call declares.
func (c *checker) outputsOf(t *target) []string {
	var out []string
	for name, v := range t.attrs {
		a, ok := t.spec.attr(name)
		if !ok {
			continue
		}
		switch a.kind {
		case kOutput, kOutputList:
			out = append(out, stringsOf(v)...)
		}
	}
	if t.spec.implicit != nil {
		m := map[string]any{}
		for k, v := range t.attrs {
			m[k] = v
		}
		out = append(out, t.spec.implicit(t.name, m)...)
	}
	return out
}

// --- glob ---

func (c *checker) builtinGlob(p *pkg) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
	return func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var include, exclude *starlark.List
		var excludeDirs = 1
		var allowEmpty = false
		if err := starlark.UnpackArgs(b.Name(), args, kwargs, "include", &include, "exclude?", &exclude,
			"exclude_directories?", &excludeDirs, "allow_empty?", &allowEmpty); err != nil {
			return nil, err
		}
		if p.repo != "" {
			// A repository written at fetch time: its files are unknown
			// here, so a glob matches what the BUILD file names only.
			return starlark.NewList(nil), nil
		}
		files := c.packageFiles(p)
		var res []string
		for _, f := range files {
			if matchAny(stringsOf(include), f) && !matchAny(stringsOf(exclude), f) {
				res = append(res, f)
			}
		}
		sort.Strings(res)
		if len(res) == 0 && !allowEmpty {
			c.report(callSite(thread), "glob(%v) matches no files (an error from Bazel 8 on; set allow_empty = True if intended)", stringsOf(include))
		}
		var vals []starlark.Value
		for _, r := range res {
			vals = append(vals, starlark.String(r))
		}
		return starlark.NewList(vals), nil
	}
}

// packageFiles lists the files of p, relative to its directory, without
// descending into subpackages.
func (c *checker) packageFiles(p *pkg) []string {
	dir := filepath.Join(c.root, filepath.FromSlash(p.path))
	var out []string
	_ = filepath.WalkDir(dir, func(fp string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, fp)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." {
				full := path.Join(p.path, rel)
				if _, sub := c.pkgs[full]; sub || c.ignored(full) || d.Name() == ".git" {
					return filepath.SkipDir
				}
			}
			return nil
		}
		out = append(out, rel)
		return nil
	})
	return out
}

func matchAny(patterns []string, f string) bool {
	for _, p := range patterns {
		if globRegexp(p).MatchString(f) {
			return true
		}
	}
	return false
}

func globRegexp(pattern string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	segs := strings.Split(pattern, "/")
	for i, s := range segs {
		last := i == len(segs)-1
		if s == "**" {
			if last {
				b.WriteString(".*")
			} else {
				b.WriteString("(?:[^/]+/)*")
			}
			continue
		}
		for _, r := range s {
			switch r {
			case '*':
				b.WriteString("[^/]*")
			case '?':
				b.WriteString("[^/]")
			default:
				b.WriteString(regexp.QuoteMeta(string(r)))
			}
		}
		if !last {
			b.WriteString("/")
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}
