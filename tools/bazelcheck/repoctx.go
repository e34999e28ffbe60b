package main

// Running the repository rules of this repository's module extensions.
//
// Each repository an extension creates is fetched once here, as Bazel
// would, by calling the rule's implementation with a repository_ctx
// stand-in: file, delete, path, read and the cp/mv commands work on a real
// scratch directory (the repository's directory and an SDK stand-in);
// the go command is recorded, not run, and answers with what the rule needs
// to go on (a module directory for `go mod download -json`, the output
// files of `go build`). Then, for every go command that works in a module
// (`go build`, `go mod download` without a module argument), the checker
// asserts that its working directory holds the go.mod the rule copied
// there, and that the environment pins the toolchain (GOTOOLCHAIN=local)
// and the SDK the rule was given (GOROOT). These are the mistakes a
// static reading misses: a file copied to the wrong place fails only at
// fetch time, after a long download.

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

// repoPath is the path value of repository_ctx.path.
type repoPath struct{ p string }

func (r repoPath) String() string        { return r.p }
func (r repoPath) Type() string          { return "path" }
func (r repoPath) Freeze()               {}
func (r repoPath) Truth() starlark.Bool  { return true }
func (r repoPath) Hash() (uint32, error) { return starlark.String(r.p).Hash() }
func (r repoPath) AttrNames() []string {
	return []string{"basename", "dirname", "exists", "get_child", "is_dir"}
}

func (r repoPath) Attr(name string) (starlark.Value, error) {
	switch name {
	case "basename":
		return starlark.String(filepath.Base(r.p)), nil
	case "dirname":
		return repoPath{filepath.Dir(r.p)}, nil
	case "exists":
		_, err := os.Stat(r.p)
		return starlark.Bool(err == nil), nil
	case "is_dir":
		fi, err := os.Stat(r.p)
		return starlark.Bool(err == nil && fi.IsDir()), nil
	case "get_child":
		return starlark.NewBuiltin("get_child", func(_ *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
			parts := []string{r.p}
			for _, a := range args {
				parts = append(parts, filepath.FromSlash(strOf(a)))
			}
			return repoPath{filepath.Join(parts...)}, nil
		}), nil
	}
	return nil, nil
}

// goCommand is one recorded run of the go command.
type goCommand struct {
	args []string
	env  map[string]string
	dir  string
	// goMod tells whether dir held a go.mod when the command ran (the
	// rule deletes its scratch files before it returns); files lists dir's
	// files then.
	goMod bool
	files string
}

// repoRun is one fetch of a repository against the stand-in.
type repoRun struct {
	c       *checker
	repo    *createdRepo
	dir     string // the repository's directory
	sdk     string // the SDK stand-in's root
	scratch string
	goCalls []goCommand
	// unmodelled are the commands other than go, cp and mv.
	unmodelled []string
}

// runRepoRule fetches repository r of extension e against the stand-in and
// reports what would fail.
func (c *checker) runRepoRule(r *createdRepo) {
	if r.rule.impl == nil {
		return
	}
	scratch, err := os.MkdirTemp("", "bazelcheck-repo-")
	if err != nil {
		c.report(r.pos, "repository @%s: %v", r.name, err)
		return
	}
	defer os.RemoveAll(scratch)
	run := &repoRun{c: c, repo: r, scratch: scratch, dir: filepath.Join(scratch, "external", r.name),
		sdk: filepath.Join(scratch, "external", "go_sdk")}
	for _, d := range []string{run.dir, filepath.Join(run.sdk, "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			c.report(r.pos, "repository @%s: %v", r.name, err)
			return
		}
	}
	if err := os.WriteFile(filepath.Join(run.sdk, "ROOT"), nil, 0o644); err != nil {
		c.report(r.pos, "repository @%s: %v", r.name, err)
		return
	}
	thread := &starlark.Thread{Name: "@" + r.name, Print: func(*starlark.Thread, string) {}}
	if _, err := starlark.Call(thread, r.rule.impl, starlark.Tuple{run.ctx()}, nil); err != nil {
		c.report(r.pos, "repository @%s (%s): fetching it fails: %v", r.name, r.rule.name, err)
		return
	}
	for _, cmd := range run.unmodelled {
		c.report(r.pos, "repository @%s (%s) runs %q, which the checker does not model (it models go, cp and mv)", r.name, r.rule.name, cmd)
	}
	for _, g := range run.goCalls {
		what := strings.ReplaceAll("go "+strings.Join(g.args, " "), run.scratch+string(filepath.Separator), "")
		if len(what) > 80 {
			what = what[:80] + "…"
		}
		if g.env["GOTOOLCHAIN"] != "local" {
			c.report(r.pos, "repository @%s: `%s` runs without GOTOOLCHAIN=local: the go command may download another toolchain", r.name, what)
		}
		if g.env["GOROOT"] != run.sdk {
			c.report(r.pos, "repository @%s: `%s` runs with GOROOT=%q, not the SDK it was given (%s): a GOROOT from the environment would pick another standard library",
				r.name, what, g.env["GOROOT"], run.rel(run.sdk))
		}
		if !needsModule(g.args) {
			continue
		}
		if !g.goMod {
			c.report(r.pos, "repository @%s: `%s` runs in %s, which holds no go.mod (the rule's files there: %s)", r.name, what, run.rel(g.dir), g.files)
		}
	}
}

// needsModule tells whether a go command works in the module of its
// directory.
func needsModule(args []string) bool {
	switch {
	case len(args) > 0 && args[0] == "build":
		return true
	case len(args) > 1 && args[0] == "mod" && args[1] == "download":
		for _, a := range args[2:] {
			if !strings.HasPrefix(a, "-") {
				return false // a module argument: works outside any module
			}
		}
		return true
	}
	return false
}

func (run *repoRun) rel(p string) string {
	if r, err := filepath.Rel(run.dir, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	if r, err := filepath.Rel(run.scratch, p); err == nil {
		return r
	}
	return p
}

// files lists the files under dir, relative to it.
func (run *repoRun) files(dir string) string {
	var out []string
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			r, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(r))
		}
		return nil
	})
	if len(out) == 0 {
		return "none"
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// resolve turns a path argument (a string relative to the repository, a
// label or a path) into a file name.
func (run *repoRun) resolve(v starlark.Value) (string, error) {
	switch x := v.(type) {
	case repoPath:
		return x.p, nil
	case labelValue:
		l, err := parseLabel("", x.s)
		if err != nil {
			return "", err
		}
		switch l.repo {
		case "", run.c.mod.name:
			return filepath.Join(run.c.root, filepath.FromSlash(path.Join(l.pkg, l.name))), nil
		case "go_sdk":
			return filepath.Join(run.sdk, filepath.FromSlash(path.Join(l.pkg, l.name))), nil
		}
		return "", fmt.Errorf("path(%s): the stand-in knows this repository and @go_sdk only", x.s)
	case starlark.String:
		if filepath.IsAbs(string(x)) {
			return string(x), nil
		}
		return filepath.Join(run.dir, filepath.FromSlash(string(x))), nil
	}
	return "", fmt.Errorf("not a path: %s", v.Type())
}

func (run *repoRun) ctx() starlark.Value {
	attrs := starlark.StringDict{"name": starlark.String(run.repo.name)}
	for k, v := range run.repo.attrs {
		if a := run.repo.rule.attrs[k]; a != nil && a.isLabel() {
			v = toLabels(v)
		}
		attrs[k] = v
	}
	return starlarkstruct.FromStringDict(starlark.String("repository_ctx"), starlark.StringDict{
		"name":   starlark.String(run.repo.name),
		"attr":   starlarkstruct.FromStringDict(starlark.String("attr"), attrs),
		"path":   ctxBuiltin("path", run.path),
		"file":   ctxBuiltin("file", run.file),
		"read":   ctxBuiltin("read", run.read),
		"delete": ctxBuiltin("delete", run.delete),
		"getenv": ctxBuiltin("getenv", ctxGetenv),
		"report_progress": ctxBuiltin("report_progress", func(starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
			return starlark.None, nil
		}),
		"execute":       ctxBuiltin("execute", run.execute),
		"repo_metadata": ctxBuiltin("repo_metadata", ctxRepoMetadata),
	})
}

// ctxBuiltin makes fn, which needs no thread, a builtin of repository_ctx.
func ctxBuiltin(name string, fn func(args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error)) *starlark.Builtin {
	return starlark.NewBuiltin(name, func(_ *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		return fn(args, kwargs)
	})
}

// path is repository_ctx.path.
func (run *repoRun) path(args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var v starlark.Value
	if err := starlark.UnpackPositionalArgs("path", args, kwargs, 1, &v); err != nil {
		return nil, err
	}
	p, err := run.resolve(v)
	return repoPath{p}, err
}

// file is repository_ctx.file.
func (run *repoRun) file(args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var v starlark.Value
	var content string
	executable, legacy := true, true
	if err := starlark.UnpackArgs("file", args, kwargs, "path", &v, "content?", &content, "executable?", &executable, "legacy_utf8?", &legacy); err != nil {
		return nil, err
	}
	p, err := run.resolve(v)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, err
	}
	return starlark.None, os.WriteFile(p, []byte(content), 0o644)
}

// read is repository_ctx.read.
func (run *repoRun) read(args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var v starlark.Value
	if err := starlark.UnpackPositionalArgs("read", args, kwargs, 1, &v); err != nil {
		return nil, err
	}
	p, err := run.resolve(v)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(p)
	return starlark.String(data), err
}

// delete is repository_ctx.delete.
func (run *repoRun) delete(args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var v starlark.Value
	if err := starlark.UnpackPositionalArgs("delete", args, kwargs, 1, &v); err != nil {
		return nil, err
	}
	p, err := run.resolve(v)
	if err != nil {
		return nil, err
	}
	_, statErr := os.Lstat(p)
	return starlark.Bool(statErr == nil), os.RemoveAll(p)
}

// ctxGetenv is repository_ctx.getenv.
func ctxGetenv(args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var name string
	var def starlark.Value = starlark.None
	if err := starlark.UnpackArgs("getenv", args, kwargs, "name", &name, "default?", &def); err != nil {
		return nil, err
	}
	return def, nil // a clean environment
}

// ctxRepoMetadata is repository_ctx.repo_metadata.
func ctxRepoMetadata(args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var reproducible bool
	var forRepro *starlark.Dict
	if err := starlark.UnpackArgs("repo_metadata", args, kwargs, "reproducible?", &reproducible, "attrs_for_reproducibility?", &forRepro); err != nil {
		return nil, err
	}
	return starlark.None, nil
}

// execute is repository_ctx.execute: cp and mv run, go is recorded.
func (run *repoRun) execute(args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var argv *starlark.List
	var timeout int
	var env *starlark.Dict
	var quiet bool
	var dir string
	if err := starlark.UnpackArgs("execute", args, kwargs, "arguments", &argv, "timeout?", &timeout, "environment?", &env,
		"quiet?", &quiet, "working_directory?", &dir); err != nil {
		return nil, err
	}
	var words []string
	for i := 0; i < argv.Len(); i++ {
		words = append(words, strOf(argv.Index(i)))
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("execute: no arguments")
	}
	cwd := run.dir
	if dir != "" {
		cwd = dir
		if !filepath.IsAbs(dir) {
			cwd = filepath.Join(run.dir, dir)
		}
	}
	environment := map[string]string{}
	if env != nil {
		for _, kv := range env.Items() {
			environment[strOf(kv[0])] = strOf(kv[1])
		}
	}
	result := func(code int, stdout, stderr string) starlark.Value {
		return starlarkstruct.FromStringDict(starlark.String("exec_result"), starlark.StringDict{
			"return_code": starlark.MakeInt(code), "stdout": starlark.String(stdout), "stderr": starlark.String(stderr)})
	}
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(cwd, p)
	}
	switch {
	case words[0] == filepath.Join(run.sdk, "bin", "go"):
		_, err := os.Stat(filepath.Join(cwd, "go.mod"))
		run.goCalls = append(run.goCalls, goCommand{args: words[1:], env: environment, dir: cwd, goMod: err == nil, files: run.files(cwd)})
		out, err := run.simulateGo(words[1:], environment, cwd)
		if err != nil {
			return result(1, "", err.Error()), nil
		}
		return result(0, out, ""), nil
	case words[0] == "cp" && len(words) == 3:
		if err := copyRepoFile(abs(words[1]), abs(words[2])); err != nil {
			return result(1, "", err.Error()), nil
		}
		return result(0, "", ""), nil
	case words[0] == "mv" && len(words) == 3:
		if err := os.Rename(abs(words[1]), abs(words[2])); err != nil {
			return result(1, "", err.Error()), nil
		}
		return result(0, "", ""), nil
	}
	run.unmodelled = append(run.unmodelled, strings.Join(words, " "))
	return result(0, "", ""), nil
}

// simulateGo makes the files a go command would make, enough for the rule
// to go on.
func (run *repoRun) simulateGo(args []string, env map[string]string, cwd string) (string, error) {
	if _, err := os.Stat(cwd); err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	switch {
	case len(args) > 1 && args[0] == "mod" && args[1] == "download":
		ref := ""
		for _, a := range args[2:] {
			if !strings.HasPrefix(a, "-") {
				ref = a
			}
		}
		if ref == "" {
			// Into GOMODCACHE, whose cache/download the proxy rule moves.
			return "", os.MkdirAll(filepath.Join(env["GOMODCACHE"], "cache", "download"), 0o755)
		}
		// One module: its directory, with go.mod and the files the
		// repository's source says it reads.
		mod, version, _ := strings.Cut(ref, "@")
		dir := filepath.Join(run.scratch, "modcache", mod+"@"+version)
		var source struct {
			Sum   string
			Files []string
		}
		if s, ok := run.repo.attrs["source"].(starlark.String); ok {
			_ = json.Unmarshal([]byte(s), &source)
		}
		for _, f := range append([]string{"go.mod"}, source.Files...) {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
				return "", err
			}
			if err := os.WriteFile(filepath.Join(dir, f), []byte("module "+mod+"\n"), 0o644); err != nil {
				return "", err
			}
		}
		out, err := json.Marshal(map[string]string{"Path": mod, "Version": version, "Dir": dir, "Sum": source.Sum})
		return string(out), err
	case len(args) > 0 && args[0] == "build":
		for i, a := range args {
			if a != "-o" || i+1 >= len(args) {
				continue
			}
			out := args[i+1]
			if strings.HasSuffix(out, "/") {
				return "", os.MkdirAll(out, 0o755)
			}
			if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
				return "", err
			}
			return "", os.WriteFile(out, nil, 0o755)
		}
	}
	return "", nil
}

func copyRepoFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
