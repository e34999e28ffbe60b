package main

// Macros: a BUILD file of this repository may load a .bzl file of this
// repository (load("//tools/bazel:defs.bzl", "go_srcs")) whose functions
// declare targets through the `native` module or the rules of the pinned
// rule sets, or whose constants a BUILD file uses. The checker evaluates
// such a file once, with the stand-ins a .bzl file has at load time
// (native, select, Label, struct, json, fail); its loads are either the
// pinned rule sets' stubs (stubs.go) or further .bzl files of this
// repository. A macro runs on the thread of the BUILD file that calls it,
// so the targets it declares belong to that package and are reported at
// the call in the BUILD file.

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"go.starlark.net/lib/json"
	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/syntax"
)

// macroFile is an evaluated .bzl file loaded by a BUILD file.
type macroFile struct {
	globals starlark.StringDict
	err     error
	loading bool // being evaluated: a load of it now is a cycle
}

// isLocalBzl reports whether module, as written in a load statement of a
// BUILD file of this repository, names a file of this repository.
func (c *checker) isLocalBzl(module string) bool {
	if strings.HasPrefix(module, "//") || strings.HasPrefix(module, ":") || strings.HasPrefix(module, "@@//") {
		return true
	}
	return c.mod != nil && c.mod.name != "" && strings.HasPrefix(module, "@"+c.mod.name+"//")
}

// loadLocal returns the symbols a load statement of a .bzl file of this
// repository asks for, reporting unknown files and symbols.
func (c *checker) loadLocal(from string, r *loadReq) starlark.StringDict {
	out := starlark.StringDict{}
	m, err := c.loadMacroFile(from, r.module)
	if err != nil {
		c.report(r.pos, "load(%q): %v", r.module, err)
	}
	for _, n := range r.names {
		var v starlark.Value
		if m != nil {
			v = m.globals[n]
			if v == nil {
				c.report(r.pos, "load(%q): %q is not exported by that file", r.module, n)
			}
		}
		if v == nil {
			// A placeholder, so evaluation continues.
			v = c.ruleBuiltin(n, nil)
		}
		out[n] = v
	}
	return out
}

// loadMacroFile evaluates the .bzl file module (a label relative to the
// package from) once.
func (c *checker) loadMacroFile(from, module string) (*macroFile, error) {
	l, err := parseLabel(from, strings.TrimPrefix(module, "@@"))
	if err != nil {
		return nil, err
	}
	if _, ok := c.pkgs[l.pkg]; !ok {
		return nil, fmt.Errorf("no package //%s (a .bzl file needs a BUILD file in its directory)", l.pkg)
	}
	if !strings.HasSuffix(l.name, ".bzl") {
		return nil, fmt.Errorf("not a .bzl file")
	}
	file := path.Join(l.pkg, l.name)
	if c.macroFiles == nil {
		c.macroFiles = map[string]*macroFile{}
	}
	if m, ok := c.macroFiles[file]; ok {
		if m.loading {
			return nil, fmt.Errorf("%s loads itself (a cycle of loads)", file)
		}
		return m, m.err
	}
	m := &macroFile{loading: true}
	c.macroFiles[file] = m
	m.globals, m.err = c.evalMacroFile(file, l.pkg)
	m.loading = false
	return m, m.err
}

func (c *checker) evalMacroFile(file, pkgPath string) (starlark.StringDict, error) {
	src, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(file)))
	if err != nil {
		return nil, fmt.Errorf("no such file: %s", file)
	}
	f, err := bzlFileOptions.Parse(file, src, 0)
	if err != nil {
		return nil, err
	}
	loads := loadRequests(f)
	thread := &starlark.Thread{
		Name:  file,
		Print: func(*starlark.Thread, string) {},
		Load: func(_ *starlark.Thread, module string) (starlark.StringDict, error) {
			if c.isLocalBzl(module) {
				return c.loadLocal(pkgPath, loads[module]), nil
			}
			return c.loadStub(loads[module]), nil
		},
	}
	predeclared := starlark.StringDict{
		"native": c.nativeModule(),
		"select": starlark.NewBuiltin("select", builtinSelect),
		"Label":  starlark.NewBuiltin("Label", builtinLabel),
		"struct": starlark.NewBuiltin("struct", starlarkstruct.Make),
		"json":   json.Module,
		"fail":   starlark.NewBuiltin("fail", builtinFail),
	}
	return starlark.ExecFileOptions(bzlFileOptions, thread, file, src, predeclared)
}

// nativeModule is the `native` module of a .bzl file: the native rules and
// the package functions of the BUILD file whose thread calls them.
func (c *checker) nativeModule() *starlarkstruct.Module {
	m := &starlarkstruct.Module{Name: "native", Members: starlark.StringDict{}}
	for name, spec := range nativeRules {
		m.Members[name] = c.ruleBuiltin(name, spec)
	}
	// The package functions take the package from the calling thread: a
	// .bzl file is evaluated once, for every BUILD file that loads it.
	perPackage := func(name string, fn func(p *pkg) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error)) {
		m.Members[name] = starlark.NewBuiltin("native."+name, func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			p, _ := thread.Local("pkg").(*pkg)
			if p == nil {
				return nil, fmt.Errorf("native.%s: called while loading a .bzl file, not from a BUILD file", name)
			}
			return fn(p)(thread, b, args, kwargs)
		})
	}
	perPackage("glob", c.builtinGlob)
	perPackage("exports_files", c.builtinExportsFiles)
	perPackage("package_name", func(p *pkg) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
		return func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
			return starlark.String(p.path), nil
		}
	})
	perPackage("repository_name", func(p *pkg) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
		return func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
			return starlark.String("@"), nil
		}
	})
	return m
}

// callSite is the position, in the BUILD file, of the call being run: the
// call of a rule, or of the macro that calls it (the outermost frame is
// the BUILD file's top level).
func callSite(thread *starlark.Thread) syntax.Position {
	stack := thread.CallStack()
	if len(stack) < 2 {
		return thread.CallFrame(1).Pos
	}
	return stack[0].Pos
}
