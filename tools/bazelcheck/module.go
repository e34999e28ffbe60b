package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// moduleInfo is what MODULE.bazel declares.
type moduleInfo struct {
	name      string
	deps      map[string]*bazelDep // by apparent repository name
	proxies   []*extProxy
	useRepos  map[string]syntax.Position // apparent name -> use_repo position
	toolchain []labelRef
}

type bazelDep struct {
	name, version, repoName string
	pos                     syntax.Position
}

type extProxy struct {
	file, name string
	pos        syntax.Position
	tags       []*extTag
	repos      map[string]syntax.Position // use_repo'd names (apparent -> position)
}

type extTag struct {
	tag   string
	attrs map[string]starlark.Value
	pos   syntax.Position
}

type labelRef struct {
	label string
	pos   syntax.Position
}

var _ starlark.HasAttrs = (*extProxy)(nil)

func (e *extProxy) String() string        { return "<extension " + e.name + ">" }
func (e *extProxy) Type() string          { return "module_extension_proxy" }
func (e *extProxy) Freeze()               {}
func (e *extProxy) Truth() starlark.Bool  { return true }
func (e *extProxy) Hash() (uint32, error) { return 0, fmt.Errorf("unhashable") }
func (e *extProxy) AttrNames() []string   { return nil }

func (e *extProxy) Attr(tag string) (starlark.Value, error) {
	return starlark.NewBuiltin(e.name+"."+tag, func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if len(args) > 0 {
			return nil, fmt.Errorf("%s: tags take keyword arguments only", b.Name())
		}
		t := &extTag{tag: tag, attrs: map[string]starlark.Value{}, pos: thread.CallFrame(1).Pos}
		for _, kv := range kwargs {
			t.attrs[string(kv[0].(starlark.String))] = kv[1]
		}
		e.tags = append(e.tags, t)
		return starlark.None, nil
	}), nil
}

// evalModule evaluates MODULE.bazel into c.mod, reporting what Bazel
// would reject.
func (c *checker) evalModule() {
	c.mod = &moduleInfo{deps: map[string]*bazelDep{}, useRepos: map[string]syntax.Position{}}
	file := "MODULE.bazel"
	src, err := os.ReadFile(filepath.Join(c.root, file))
	if err != nil {
		c.reportAt(file, "%v", err)
		return
	}
	f, err := buildFileOptions.Parse(file, src, 0)
	if err != nil {
		c.reportErr(err)
		return
	}
	for _, stmt := range f.Stmts {
		if s, ok := stmt.(*syntax.LoadStmt); ok {
			c.report(s.Load, "load() is not allowed in MODULE.bazel")
		}
	}
	thread := &starlark.Thread{Name: file, Print: func(*starlark.Thread, string) {}}
	if _, err := starlark.ExecFileOptions(buildFileOptions, thread, file, src, c.moduleBuiltins()); err != nil {
		c.reportErr(err)
	}
}

// moduleBuiltins are the functions MODULE.bazel may call: module,
// bazel_dep, use_extension, use_repo and register_toolchains record what
// they declare in c.mod; the overrides and execution platforms are
// accepted and ignored.
func (c *checker) moduleBuiltins() starlark.StringDict {
	ignore := func(name string) *starlark.Builtin {
		return starlark.NewBuiltin(name, func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
			return starlark.None, nil
		})
	}
	return starlark.StringDict{
		"module":                       starlark.NewBuiltin("module", c.builtinModule),
		"bazel_dep":                    starlark.NewBuiltin("bazel_dep", c.builtinBazelDep),
		"use_extension":                starlark.NewBuiltin("use_extension", c.builtinUseExtension),
		"use_repo":                     starlark.NewBuiltin("use_repo", c.builtinUseRepo),
		"register_toolchains":          starlark.NewBuiltin("register_toolchains", c.builtinRegisterToolchains),
		"register_execution_platforms": ignore("register_execution_platforms"),
		"single_version_override":      ignore("single_version_override"),
		"multiple_version_override":    ignore("multiple_version_override"),
		"archive_override":             ignore("archive_override"),
		"git_override":                 ignore("git_override"),
		"local_path_override":          ignore("local_path_override"),
	}
}

func (c *checker) builtinModule(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var name, version, repoName string
	var compat int
	var bazelCompat *starlark.List
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "name?", &name, "version?", &version,
		"compatibility_level?", &compat, "repo_name?", &repoName, "bazel_compatibility?", &bazelCompat); err != nil {
		return nil, err
	}
	c.mod.name = name
	return starlark.None, nil
}

func (c *checker) builtinBazelDep(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	d := &bazelDep{pos: thread.CallFrame(1).Pos}
	var maxCompat int
	var dev bool
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "name", &d.name, "version?", &d.version,
		"max_compatibility_level?", &maxCompat, "repo_name?", &d.repoName, "dev_dependency?", &dev); err != nil {
		return nil, err
	}
	apparent := d.name
	if d.repoName != "" {
		apparent = d.repoName
	}
	if prev, dup := c.mod.deps[apparent]; dup {
		c.report(d.pos, "bazel_dep %q declared twice (first at %s)", d.name, prev.pos)
	}
	c.mod.deps[apparent] = d
	return starlark.None, nil
}

func (c *checker) builtinUseExtension(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	e := &extProxy{pos: thread.CallFrame(1).Pos, repos: map[string]syntax.Position{}}
	var dev, isolate bool
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "extension_bzl_file", &e.file, "extension_name", &e.name,
		"dev_dependency?", &dev, "isolate?", &isolate); err != nil {
		return nil, err
	}
	c.mod.proxies = append(c.mod.proxies, e)
	return e, nil
}

func (c *checker) builtinUseRepo(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	pos := thread.CallFrame(1).Pos
	if len(args) == 0 {
		return nil, fmt.Errorf("use_repo: missing extension proxy")
	}
	e, ok := args[0].(*extProxy)
	if !ok {
		return nil, fmt.Errorf("use_repo: first argument must be an extension proxy, got %s", args[0].Type())
	}
	add := func(name string) {
		if prev, dup := c.mod.useRepos[name]; dup {
			c.report(pos, "use_repo: %q is imported twice (first at %s)", name, prev)
		}
		c.mod.useRepos[name] = pos
		e.repos[name] = pos
	}
	for _, a := range args[1:] {
		s, ok := a.(starlark.String)
		if !ok {
			return nil, fmt.Errorf("use_repo: repository names must be strings")
		}
		add(string(s))
	}
	for _, kv := range kwargs {
		add(string(kv[0].(starlark.String)))
	}
	return starlark.None, nil
}

func (c *checker) builtinRegisterToolchains(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	for _, a := range args {
		c.mod.toolchain = append(c.mod.toolchain, labelRef{strOf(a), thread.CallFrame(1).Pos})
	}
	return starlark.None, nil
}

// checkModule validates bazel_deps against the stubbed versions, extension
// usage against the extensions' tag classes, and use_repo against go.mod.
func (c *checker) checkModule() {
	m := c.mod
	var names []string
	for n := range m.deps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d := m.deps[n]
		want, known := pinnedModules[d.name]
		switch {
		case !known:
			c.report(d.pos, "bazel_dep %q: no stubs for this module in tools/bazelcheck/stubs.go; read its docs at the pinned version and add them", d.name)
		case d.version != want:
			c.report(d.pos, "bazel_dep %q version %q: the stubs describe %s %s; re-check the API at the new version and update tools/bazelcheck/stubs.go", d.name, d.version, d.name, want)
		}
	}
	if c.cfg.GazelleVersion != "" {
		if d := m.deps["gazelle"]; d != nil && "v"+d.version != c.cfg.GazelleVersion && d.version != c.cfg.GazelleVersion {
			c.report(d.pos, "bazel_dep gazelle %s differs from the gazelle binary `make bazel-check` runs (%s): BUILD files would be generated by a different version", d.version, c.cfg.GazelleVersion)
		}
	}
	for _, e := range m.proxies {
		c.checkExtension(e)
	}
	for _, t := range m.toolchain {
		c.checkLabel(nil, "", t.label, t.pos, "register_toolchains")
	}
}

func (c *checker) checkExtension(e *extProxy) {
	if strings.HasPrefix(e.file, "//") || (c.mod != nil && c.mod.name != "" && strings.HasPrefix(e.file, "@"+c.mod.name+"//")) {
		c.checkOwnExtension(e)
		return
	}
	repo := ""
	if strings.HasPrefix(e.file, "@") {
		repo = strings.TrimPrefix(e.file[:strings.Index(e.file+"//", "//")], "@")
		if !c.repoVisible(repo) {
			c.report(e.pos, "use_extension(%q): repository @%s is not a bazel_dep", e.file, repo)
		}
	}
	exts, ok := extensions[e.file]
	if !ok {
		c.report(e.pos, "use_extension(%q): unknown extension file", e.file)
		return
	}
	tags, ok := exts[e.name]
	if !ok {
		c.report(e.pos, "use_extension(%q, %q): the file defines no extension %q", e.file, e.name, e.name)
		return
	}
	for _, t := range e.tags {
		spec, ok := tags[t.tag]
		if !ok {
			c.report(t.pos, "%s.%s: %s has no tag class %q", e.name, t.tag, e.name, t.tag)
			continue
		}
		for a, v := range t.attrs {
			as, ok := spec[a]
			if !ok {
				c.report(t.pos, "%s.%s: unknown attribute %q", e.name, t.tag, a)
				continue
			}
			c.checkType(t.pos, e.name+"."+t.tag, a, as.kind, v)
			if as.kind == kLabel || as.kind == kLabelList {
				for _, l := range stringsOf(v) {
					c.checkLabel(nil, "", l, t.pos, e.name+"."+t.tag+" "+a)
				}
			}
		}
		for a, as := range spec {
			if _, ok := t.attrs[a]; as.mandatory && !ok {
				c.report(t.pos, "%s.%s: missing mandatory attribute %q", e.name, t.tag, a)
			}
		}
	}
	switch e.name {
	case "go_deps":
		c.checkGoDeps(e)
	default:
		allowed := map[string]bool{}
		for _, r := range extensionRepos[e.name] {
			allowed[r] = true
		}
		if e.name == "go_sdk" {
			// from_file, download, host and wrap create an SDK repository
			// named by their name attribute.
			for _, t := range e.tags {
				if l := stringsOf(t.attrs["go_mod"]); t.tag == "from_file" && len(l) == 1 && (l[0] == "//:go.mod" || l[0] == "@//:go.mod") {
					c.checkGoToolchain(t.pos)
				}
				if n := stringsOf(t.attrs["name"]); len(n) == 1 {
					allowed[n[0]] = true
					c.addSDKRepo(n[0], t.pos)
				}
			}
		}
		for r, pos := range e.repos {
			if !allowed[r] {
				c.report(pos, "use_repo(%s, %q): the extension creates no such repository for this module", e.name, r)
			}
		}
	}
}

// checkGoDeps verifies go_deps' tags against go.mod and the use_repo list
// against go.mod's direct requirements: go_deps reports exactly those as the
// root module's direct dependencies, so Bazel warns (and `bazel mod tidy`
// rewrites the list) if they differ.
func (c *checker) checkGoDeps(e *extProxy) {
	if c.gomod == nil {
		return
	}
	for _, t := range e.tags {
		switch t.tag {
		case "from_file":
			if l := stringsOf(t.attrs["go_mod"]); len(l) == 1 && l[0] != "//:go.mod" {
				c.report(t.pos, "go_deps.from_file: go_mod is %q, but the root module's go.mod is //:go.mod", l[0])
			}
		case "gazelle_override", "module_override", "archive_override":
			p := stringsOf(t.attrs["path"])
			if len(p) == 1 && c.moduleByPath[p[0]] == nil {
				c.report(t.pos, "go_deps.%s: %q is not a module in go.mod", t.tag, p[0])
			}
			for _, d := range stringsOf(t.attrs["directives"]) {
				if !strings.HasPrefix(d, "gazelle:") || len(strings.Fields(d)) < 2 {
					c.report(t.pos, "go_deps.%s: directive %q must be of the form \"gazelle:key value\"", t.tag, d)
				}
			}
		}
	}
	c.goDeps = e
}

// checkGoDepsRepos compares use_repo(go_deps, ...) with go.mod once every
// BUILD file has been checked (c.usedGoRepos holds the repositories they
// reference).
func (c *checker) checkGoDepsRepos() {
	e := c.goDeps
	if e == nil || c.gomod == nil {
		return
	}
	var used []string
	for name := range c.usedGoRepos {
		used = append(used, name)
	}
	sort.Strings(used)
	for _, name := range used {
		if r := c.repoToModule[name]; r.Indirect {
			c.reportAt(fmt.Sprintf("go.mod:%d", r.Line), "%s is imported by this module (BUILD files reference @%s) but go.mod marks it // indirect: run go mod tidy, so that go_deps reports it as a direct dependency", r.Path, name)
		}
	}
	direct := map[string]goRequire{}
	for _, r := range c.gomod.Requires {
		if mod, ok := bazelGoModules[r.Path]; ok {
			if d := c.mod.deps[mod]; d == nil {
				c.reportAt(fmt.Sprintf("go.mod:%d", r.Line), "%s is provided by the Bazel module %s, which MODULE.bazel does not bazel_dep", r.Path, mod)
			} else if "v"+d.version != r.Version {
				// go_deps prefers the bazel_dep and reports the mismatch.
				c.reportAt(fmt.Sprintf("go.mod:%d", r.Line), "%s %s differs from bazel_dep(name = %q, version = %q): go_deps builds the bazel_dep's version", r.Path, r.Version, mod, d.version)
			}
			continue
		}
		if !r.Indirect {
			direct[repoName(r.Path)] = r
		}
	}
	for name, pos := range e.repos {
		r, ok := c.repoToModule[name]
		switch {
		case !ok:
			c.report(pos, "use_repo(go_deps, %q): no module in go.mod has this repository name", name)
		case r.Indirect && !c.usedGoRepos[name]:
			c.report(pos, "use_repo(go_deps, %q): %s is an indirect requirement in go.mod and no BUILD file uses it (`bazel mod tidy` drops it)", name, r.Path)
		}
	}
	var missing []string
	for name, r := range direct {
		if _, ok := e.repos[name]; !ok {
			missing = append(missing, fmt.Sprintf("%q (%s)", name, r.Path))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		c.report(e.pos, "use_repo(go_deps, ...) lacks direct requirements of go.mod: %s", strings.Join(missing, ", "))
	}
}

// addSDKRepo records the Go SDK repository name with the targets of
// rules_go's go/private/BUILD.sdk.bazel (and sdk_build_defs.bzl) at the
// pinned version, and how many files each provides.
func (c *checker) addSDKRepo(name string, pos syntax.Position) {
	if c.sdkRepos == nil {
		c.sdkRepos = map[string]*pkg{}
	}
	p := &pkg{repo: name, canonical: "rules_go++go_sdk+" + name, file: "@" + name + "//:BUILD.bazel (rules_go go/private/BUILD.sdk.bazel)", targets: map[string]*target{}}
	for n, files := range map[string]int{
		"ROOT": 1, "bin/go": 1, "host_compatible_root_file": 1, "package_list": 1,
		"files": manyFiles, "srcs": manyFiles, "libs": manyFiles, "headers": manyFiles, "tools": manyFiles,
		"config": unknownFiles, "go_sdk": unknownFiles, "builder": 1,
	} {
		p.targets[n] = &target{pkg: p, name: n, kind: "Go SDK target", pos: pos, files: files, attrs: map[string]starlark.Value{}}
	}
	c.sdkRepos[name] = p
}
