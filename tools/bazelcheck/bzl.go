package main

// The module extensions of this repository (.bzl files of the main
// repository used by MODULE.bazel). The checker evaluates such a file with
// stand-ins of what a .bzl may use at load time (attr, tag_class,
// repository_rule, module_extension, Label, json, struct), then runs the
// extension's implementation on the tags MODULE.bazel gives it, with a
// module_ctx that can read this repository's files. The repository rules
// it calls are recorded (their attributes checked against the rule's
// attrs); the BUILD file of each repository comes from the .bzl file's
// REPO_BUILD_FILES, a function of the rule's attributes per rule (the
// repository rules write exactly that), and is evaluated like a BUILD
// file of this repository, so labels into those repositories, and how many
// files their targets provide, are checked like local ones. Nothing is
// fetched; each repository rule's implementation also runs, against a
// repository_ctx stand-in that does the file operations in a scratch
// directory and records the commands (repoctx.go).

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"go.starlark.net/lib/json"
	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/syntax"
)

var bzlFileOptions = &syntax.FileOptions{Set: true, TopLevelControl: true}

// bzlAttr is the value of attr.<kind>(...).
type bzlAttr struct {
	kind      string
	mandatory bool
	def       starlark.Value
}

func (a *bzlAttr) String() string        { return "attr." + a.kind }
func (a *bzlAttr) Type() string          { return "Attribute" }
func (a *bzlAttr) Freeze()               {}
func (a *bzlAttr) Truth() starlark.Bool  { return true }
func (a *bzlAttr) Hash() (uint32, error) { return 0, fmt.Errorf("unhashable") }

func (a *bzlAttr) isLabel() bool { return a.kind == "label" || a.kind == "label_list" }

// bzlTagClass is the value of tag_class(...).
type bzlTagClass struct{ attrs map[string]*bzlAttr }

func (t *bzlTagClass) String() string        { return "tag_class" }
func (t *bzlTagClass) Type() string          { return "tag_class" }
func (t *bzlTagClass) Freeze()               {}
func (t *bzlTagClass) Truth() starlark.Bool  { return true }
func (t *bzlTagClass) Hash() (uint32, error) { return 0, fmt.Errorf("unhashable") }

// bzlExtension is the value of module_extension(...).
type bzlExtension struct {
	impl       starlark.Callable
	tagClasses map[string]*bzlTagClass
}

func (e *bzlExtension) String() string        { return "module_extension" }
func (e *bzlExtension) Type() string          { return "module_extension" }
func (e *bzlExtension) Freeze()               {}
func (e *bzlExtension) Truth() starlark.Bool  { return true }
func (e *bzlExtension) Hash() (uint32, error) { return 0, fmt.Errorf("unhashable") }

// bzlRepoRule is the value of repository_rule(...); calling it (from an
// extension's implementation) records a repository.
type bzlRepoRule struct {
	name  string // its global name in the .bzl file
	attrs map[string]*bzlAttr
	impl  starlark.Callable
	c     *checker
	// created receives the repositories called into being.
	created *[]*createdRepo
}

type createdRepo struct {
	name  string
	rule  *bzlRepoRule
	attrs map[string]starlark.Value
	pos   syntax.Position
}

func (r *bzlRepoRule) String() string        { return "repository_rule " + r.name }
func (r *bzlRepoRule) Type() string          { return "repository_rule" }
func (r *bzlRepoRule) Freeze()               {}
func (r *bzlRepoRule) Truth() starlark.Bool  { return true }
func (r *bzlRepoRule) Hash() (uint32, error) { return 0, fmt.Errorf("unhashable") }
func (r *bzlRepoRule) Name() string          { return r.name }

func (r *bzlRepoRule) CallInternal(thread *starlark.Thread, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if len(args) > 0 {
		return nil, fmt.Errorf("repository rule %s: keyword arguments only", r.name)
	}
	cr := &createdRepo{rule: r, attrs: map[string]starlark.Value{}, pos: thread.CallFrame(1).Pos}
	for _, kv := range kwargs {
		k := string(kv[0].(starlark.String))
		if k == "name" {
			cr.name = strOf(kv[1])
			continue
		}
		if _, ok := r.attrs[k]; !ok {
			return nil, fmt.Errorf("repository rule %s has no attribute %q", r.name, k)
		}
		cr.attrs[k] = kv[1]
	}
	if cr.name == "" {
		return nil, fmt.Errorf("repository rule %s: missing name", r.name)
	}
	for k, a := range r.attrs {
		if _, ok := cr.attrs[k]; !ok {
			if a.mandatory {
				return nil, fmt.Errorf("repository rule %s: missing mandatory attribute %q", r.name, k)
			}
			cr.attrs[k] = a.def
		}
	}
	*r.created = append(*r.created, cr)
	return starlark.None, nil
}

// bzlModule is an evaluated .bzl file of this repository.
type bzlModule struct {
	file    string // relative to the root
	globals starlark.StringDict
	created []*createdRepo
}

// loadBzl evaluates the .bzl file named by label (a label of this
// repository) once.
func (c *checker) loadBzl(label string, pos syntax.Position) (*bzlModule, error) {
	l, err := parseLabel("", label)
	if err != nil {
		return nil, err
	}
	if l.repo != "" && (c.mod == nil || l.repo != c.mod.name) {
		return nil, fmt.Errorf("%s is not a file of this repository", label)
	}
	if _, ok := c.pkgs[l.pkg]; !ok {
		return nil, fmt.Errorf("%s: no package //%s (a .bzl file needs a BUILD file in its directory)", label, l.pkg)
	}
	file := path.Join(l.pkg, l.name)
	if m, ok := c.bzls[file]; ok {
		return m, nil
	}
	src, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(file)))
	if err != nil {
		return nil, err
	}
	m := &bzlModule{file: file}
	thread := &starlark.Thread{Name: file, Print: func(*starlark.Thread, string) {}}
	thread.Load = func(_ *starlark.Thread, module string) (starlark.StringDict, error) {
		return nil, fmt.Errorf("load(%q): the checker evaluates only self-contained .bzl files", module)
	}
	globals, err := starlark.ExecFileOptions(bzlFileOptions, thread, file, src, c.bzlPredeclared(m))
	if err != nil {
		return nil, err
	}
	for name, v := range globals {
		if r, ok := v.(*bzlRepoRule); ok {
			r.name = name
		}
	}
	m.globals = globals
	if c.bzls == nil {
		c.bzls = map[string]*bzlModule{}
	}
	c.bzls[file] = m
	return m, nil
}

// bzlPredeclared is what the .bzl file m may use at load time; its
// repository rules record the repositories they create in m.
func (c *checker) bzlPredeclared(m *bzlModule) starlark.StringDict {
	return starlark.StringDict{
		"attr":             bzlAttrModule(),
		"json":             json.Module,
		"struct":           starlark.NewBuiltin("struct", starlarkstruct.Make),
		"Label":            starlark.NewBuiltin("Label", builtinLabel),
		"fail":             starlark.NewBuiltin("fail", builtinFail),
		"tag_class":        starlark.NewBuiltin("tag_class", builtinTagClass),
		"module_extension": starlark.NewBuiltin("module_extension", builtinModuleExtension),
		"repository_rule":  starlark.NewBuiltin("repository_rule", c.repositoryRuleBuiltin(m)),
	}
}

// bzlAttrModule is the attr module: attr.<kind>(mandatory=, default=).
func bzlAttrModule() *starlarkstruct.Module {
	attrModule := &starlarkstruct.Module{Name: "attr", Members: starlark.StringDict{}}
	for _, kind := range []string{"label", "label_list", "string", "string_list", "string_dict", "string_list_dict", "bool", "int", "int_list", "output", "output_list", "label_keyed_string_dict"} {
		kind := kind
		attrModule.Members[kind] = starlark.NewBuiltin("attr."+kind, func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			a := &bzlAttr{kind: kind, def: defaultOf(kind)}
			for _, kv := range kwargs {
				switch string(kv[0].(starlark.String)) {
				case "mandatory":
					a.mandatory = bool(kv[1].Truth())
				case "default":
					a.def = kv[1]
				}
			}
			return a, nil
		})
	}
	return attrModule
}

// builtinFail is fail(...): an error with its arguments.
func builtinFail(_ *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
	var parts []string
	for _, a := range args {
		parts = append(parts, strOf(a))
	}
	return nil, fmt.Errorf("fail: %s", strings.Join(parts, " "))
}

// builtinTagClass is tag_class(attrs=, doc=).
func builtinTagClass(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var attrs *starlark.Dict
	var doc string
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "attrs?", &attrs, "doc?", &doc); err != nil {
		return nil, err
	}
	tc := &bzlTagClass{attrs: map[string]*bzlAttr{}}
	if err := attrsOf(attrs, tc.attrs); err != nil {
		return nil, err
	}
	return tc, nil
}

// builtinModuleExtension is module_extension(...): its implementation
// and tag classes.
func builtinModuleExtension(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var impl starlark.Callable
	var tags *starlark.Dict
	var doc string
	var environ *starlark.List
	var osDep, archDep bool
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "implementation", &impl, "tag_classes?", &tags, "doc?", &doc,
		"environ?", &environ, "os_dependent?", &osDep, "arch_dependent?", &archDep); err != nil {
		return nil, err
	}
	e := &bzlExtension{impl: impl, tagClasses: map[string]*bzlTagClass{}}
	if tags != nil {
		for _, it := range tags.Items() {
			tc, ok := it[1].(*bzlTagClass)
			if !ok {
				return nil, fmt.Errorf("module_extension: tag class %s is not a tag_class", it[0])
			}
			e.tagClasses[strOf(it[0])] = tc
		}
	}
	return e, nil
}

// repositoryRuleBuiltin is repository_rule(...) of the .bzl file m.
func (c *checker) repositoryRuleBuiltin(m *bzlModule) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
	return func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var impl starlark.Callable
		var attrs *starlark.Dict
		var doc string
		var environ *starlark.List
		var local, configure bool
		if err := starlark.UnpackArgs(b.Name(), args, kwargs, "implementation", &impl, "attrs?", &attrs, "doc?", &doc,
			"environ?", &environ, "local?", &local, "configure?", &configure); err != nil {
			return nil, err
		}
		r := &bzlRepoRule{attrs: map[string]*bzlAttr{}, impl: impl, c: c, created: &m.created}
		if err := attrsOf(attrs, r.attrs); err != nil {
			return nil, err
		}
		return r, nil
	}
}

func defaultOf(kind string) starlark.Value {
	switch kind {
	case "string":
		return starlark.String("")
	case "bool":
		return starlark.False
	case "int":
		return starlark.MakeInt(0)
	case "string_list", "label_list", "int_list", "output_list":
		return starlark.NewList(nil)
	case "string_dict", "string_list_dict", "label_keyed_string_dict":
		return starlark.NewDict(0)
	}
	return starlark.None
}

func attrsOf(d *starlark.Dict, into map[string]*bzlAttr) error {
	if d == nil {
		return nil
	}
	for _, it := range d.Items() {
		a, ok := it[1].(*bzlAttr)
		if !ok {
			return fmt.Errorf("attribute %s is not an attr.* value", it[0])
		}
		into[strOf(it[0])] = a
	}
	return nil
}

// checkOwnExtension checks a use_extension of a .bzl file of this
// repository: tags against the tag classes, then the implementation run on
// them, the repositories it creates against use_repo, and the BUILD file of
// each created repository.
func (c *checker) checkOwnExtension(e *extProxy) {
	m, err := c.loadBzl(e.file, e.pos)
	if err != nil {
		c.report(e.pos, "use_extension(%q): %v", e.file, err)
		return
	}
	ext, ok := m.globals[e.name].(*bzlExtension)
	if !ok {
		c.report(e.pos, "use_extension(%q, %q): the file defines no module_extension %q", e.file, e.name, e.name)
		return
	}
	module := starlarkstruct.FromStringDict(starlark.String("module"), starlark.StringDict{
		"name":    starlark.String(c.mod.name),
		"version": starlark.String(""),
		"is_root": starlark.True,
		"tags":    starlarkstruct.FromStringDict(starlark.String("tags"), c.extensionTags(e, ext)),
	})
	m.created = nil
	thread := &starlark.Thread{Name: e.file, Print: func(*starlark.Thread, string) {}}
	if _, err := starlark.Call(thread, ext.impl, starlark.Tuple{c.fakeModuleCtx(module)}, nil); err != nil {
		c.report(e.pos, "the %s extension's implementation fails on MODULE.bazel's tags: %v", e.name, err)
		return
	}
	created := c.createdRepos(e, m.created)
	for _, name := range sortedKeys(created) {
		c.runRepoRule(created[name])
	}
	for name, pos := range e.repos {
		if _, ok := created[name]; !ok {
			c.report(pos, "use_repo(%s, %q): the extension creates no such repository (it creates %s)", e.name, name, strings.Join(sortedKeys(created), ", "))
		}
	}
	builders, _ := m.globals["REPO_BUILD_FILES"].(*starlark.Dict)
	for _, name := range sortedKeys(created) {
		if _, used := e.repos[name]; !used {
			continue
		}
		c.evalRepoBuildFile(e, thread, builders, created[name])
	}
}

// extensionTags returns module.tags of the extension e: its tags by tag
// class, checked against ext's tag classes.
func (c *checker) extensionTags(e *extProxy, ext *bzlExtension) starlark.StringDict {
	tags := map[string][]starlark.Value{}
	for _, t := range e.tags {
		tc, ok := ext.tagClasses[t.tag]
		if !ok {
			c.report(t.pos, "%s.%s: %s has no tag class %q", e.name, t.tag, e.name, t.tag)
			continue
		}
		tags[t.tag] = append(tags[t.tag], c.tagValue(e, t, tc))
	}
	tagFields := starlark.StringDict{}
	for name := range ext.tagClasses {
		tagFields[name] = starlark.NewList(tags[name])
	}
	return tagFields
}

// tagValue returns the tag t of extension e as its implementation sees it:
// tc's attributes, given or defaulted, labels as Label values.
func (c *checker) tagValue(e *extProxy, t *extTag, tc *bzlTagClass) starlark.Value {
	fields := starlark.StringDict{}
	for k, a := range tc.attrs {
		v, given := t.attrs[k]
		switch {
		case !given && a.mandatory:
			c.report(t.pos, "%s.%s: missing mandatory attribute %q", e.name, t.tag, k)
			continue
		case !given:
			v = a.def
		case a.isLabel():
			for _, l := range stringsOf(v) {
				c.checkFetchLabel(l, t.pos, e.name+"."+t.tag+" "+k)
			}
			v = toLabels(v)
		}
		fields[k] = v
	}
	for k := range t.attrs {
		if _, ok := tc.attrs[k]; !ok {
			c.report(t.pos, "%s.%s: unknown attribute %q", e.name, t.tag, k)
		}
	}
	return starlarkstruct.FromStringDict(starlark.String("tag"), fields)
}

// createdRepos returns the repositories the extension e created, by name,
// reporting duplicates and checking their label attributes.
func (c *checker) createdRepos(e *extProxy, repos []*createdRepo) map[string]*createdRepo {
	created := map[string]*createdRepo{}
	for _, r := range repos {
		if prev, dup := created[r.name]; dup {
			c.report(e.pos, "the %s extension creates repository %q twice (%s, %s)", e.name, r.name, prev.rule.name, r.rule.name)
		}
		created[r.name] = r
		for k, a := range r.rule.attrs {
			if a.isLabel() {
				for _, l := range stringsOf(r.attrs[k]) {
					c.checkFetchLabel(l, e.pos, fmt.Sprintf("%s: repository %s, attribute %s", e.name, r.name, k))
				}
			}
		}
	}
	return created
}

// evalRepoBuildFile evaluates the BUILD file of repository r, which the
// extension e created, as builders (the .bzl file's REPO_BUILD_FILES)
// writes it.
func (c *checker) evalRepoBuildFile(e *extProxy, thread *starlark.Thread, builders *starlark.Dict, r *createdRepo) {
	name := r.name
	var fn starlark.Value
	found := false
	if builders != nil {
		fn, found, _ = builders.Get(starlark.String(r.rule.name))
	}
	if !found {
		c.report(e.pos, "%s: no REPO_BUILD_FILES[%q] in %s: the checker cannot see the targets of @%s", e.name, r.rule.name, e.file, name)
		return
	}
	attrs := starlark.StringDict{"name": starlark.String(name)}
	for k, v := range r.attrs {
		attrs[k] = v
	}
	callable, ok := fn.(starlark.Callable)
	if !ok {
		c.report(e.pos, "REPO_BUILD_FILES[%q] in %s is not a function", r.rule.name, e.file)
		return
	}
	content, err := starlark.Call(thread, callable, starlark.Tuple{starlarkstruct.FromStringDict(starlark.String("attr"), attrs)}, nil)
	if err != nil {
		c.report(e.pos, "REPO_BUILD_FILES[%q] for @%s: %v", r.rule.name, name, err)
		return
	}
	// Bazel 8 names a repository of the root module's extension
	// "+<extension>+<repository>".
	p := &pkg{repo: name, canonical: "+" + e.name + "+" + name, file: "@" + name + "//:BUILD.bazel", targets: map[string]*target{}}
	if c.extPkgs == nil {
		c.extPkgs = map[string]*pkg{}
	}
	c.extPkgs[name] = p
	c.evalBuildSource(p, []byte(strOf(content)))
}

func toLabels(v starlark.Value) starlark.Value {
	switch x := v.(type) {
	case starlark.String:
		return labelValue{string(x)}
	case *starlark.List:
		var out []starlark.Value
		for i := 0; i < x.Len(); i++ {
			out = append(out, toLabels(x.Index(i)))
		}
		return starlark.NewList(out)
	}
	return v
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// fakeModuleCtx is the module_ctx an extension implementation gets: the
// root module's tags, and reads of this repository's files.
func (c *checker) fakeModuleCtx(module starlark.Value) starlark.Value {
	read := starlark.NewBuiltin("read", func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if len(args) != 1 {
			return nil, fmt.Errorf("module_ctx.read: want one path")
		}
		l, ok := args[0].(labelValue)
		if !ok {
			return nil, fmt.Errorf("module_ctx.read(%s): the checker reads labels of this repository only", args[0])
		}
		pl, err := parseLabel("", l.s)
		if err != nil || pl.repo != "" {
			return nil, fmt.Errorf("module_ctx.read(%s): not a file of this repository", l.s)
		}
		data, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(path.Join(pl.pkg, pl.name))))
		if err != nil {
			return nil, fmt.Errorf("module_ctx.read(%s): %w", l.s, err)
		}
		return starlark.String(data), nil
	})
	noop := starlark.NewBuiltin("noop", func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
		return starlark.None, nil
	})
	return starlarkstruct.FromStringDict(starlark.String("module_ctx"), starlark.StringDict{
		"modules":            starlark.NewList([]starlark.Value{module}),
		"read":               read,
		"report_progress":    noop,
		"extension_metadata": noop,
		"is_dev_dependency": starlark.NewBuiltin("is_dev_dependency", func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
			return starlark.False, nil
		}),
	})
}

// Label values of a .bzl file have .name (used by repository rules).
func (l labelValue) Attr(name string) (starlark.Value, error) {
	pl, err := parseLabel("", l.s)
	if err != nil {
		return nil, err
	}
	switch name {
	case "name":
		return starlark.String(pl.name), nil
	case "package":
		return starlark.String(pl.pkg), nil
	case "repo_name":
		return starlark.String(pl.repo), nil
	}
	return nil, nil
}

func (l labelValue) AttrNames() []string { return []string{"name", "package", "repo_name"} }

// checkFetchLabel checks a label that a module extension or repository
// rule reads at fetch time: no visibility applies, but a file of this
// repository must exist in the package the label names.
func (c *checker) checkFetchLabel(s string, pos syntax.Position, what string) {
	l, err := parseLabel("", s)
	if err != nil {
		c.report(pos, "%s: %v", what, err)
		return
	}
	l = c.canonical(l)
	if l.repo != "" {
		if _, why := c.resolveExternal(l); why != "" {
			c.report(pos, "%s: %s", what, why)
		}
		return
	}
	rel := path.Join(l.pkg, l.name)
	switch owner := c.packageOf(rel); {
	case !c.fileExists(rel):
		c.report(pos, "%s: %s names no file", what, l)
	case owner == nil || owner.path != l.pkg:
		c.report(pos, "%s: %s is not a file of package //%s", what, rel, l.pkg)
	}
}
