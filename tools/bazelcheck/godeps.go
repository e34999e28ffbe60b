package main

// The go-deps check: the BUILD files go_deps would generate for the Go
// modules the build uses, generated here the way the extension does it and
// checked for what breaks loading or compiling.
//
// For every module of `go list -deps -test ./...` (the main module's
// packages, their tests and everything they import), the module is laid
// out as go_repository lays it out (a copy of the module cache's tree, the
// root build file replaced by the module's directives when it has any) and
// gazelle runs over it with go_repository's command line (go_repository
// mode, the module's extra arguments, the repo_config of go.mod's modules).
// The overrides are the project's go_deps.gazelle_override tags, then
// gazelle's own default_gazelle_overrides.bzl, with the extension's
// precedence. Then, from every package `go build` compiles:
//
//   - its go_library must exist in the package's directory, with the
//     package's import path;
//   - every label it (and what it reaches through deps, embed and proto)
//     names must be a target that exists;
//   - every import of the package (as `go list` resolves it for this
//     platform) must be the import path of one of the library's
//     dependencies: what rules_go's strict dependency check requires;
//   - no proto rule may be reached in a module that checks in its
//     generated Go code (*.pb.go): that replaces the module's code with
//     protoc's output, built from source.
//
// Nothing is fetched: the modules come from the Go module cache, which
// `go list` fills from the module proxy.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// GoDepsConfig configures CheckGoDeps.
type GoDepsConfig struct {
	Config
	// Work is a scratch directory for the modules' copies.
	Work string
	// Gazelle is the gazelle binary of MODULE.bazel's version.
	Gazelle string
	// Log receives progress; may be nil.
	Log io.Writer
}

// listedPackage is the part of `go list -json` the check reads.
type listedPackage struct {
	ImportPath string
	Dir        string
	Standard   bool
	ForTest    string
	Imports    []string
	Module     *struct {
		Path    string
		Version string
		Dir     string
		Main    bool
	}
}

// depModule is one go_deps repository.
type depModule struct {
	path, version, repo string
	src, dir            string // the module cache's tree and the laid-out copy
	directives          []string
	generation          string
	extraArgs           []string
	hasPbGo             bool
	pkgs                map[string]map[string]*depRule // package -> target name -> rule
}

// depRule is a rule of a generated BUILD file.
type depRule struct {
	kind, name, importpath string
	deps, embed, proto     []string
	actual                 string
	pos                    string
}

// defaultOverrides are gazelle's per-module defaults
// (internal/bzlmod/default_gazelle_overrides.bzl).
type defaultOverrides struct {
	directives, extraArgs map[string][]string
	generation            map[string]string
}

// CheckGoDeps generates and checks the BUILD files of the Go modules the
// build uses.
func CheckGoDeps(cfg GoDepsConfig) ([]Finding, error) {
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, err
	}
	c, err := evalGoDeps(root, cfg.Config)
	if err != nil {
		return nil, err
	}
	if len(c.findings) > 0 {
		return c.findings, nil
	}
	if c.goDeps == nil {
		return nil, errors.New("MODULE.bazel does not use go_deps")
	}
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", args...)
		}
	}
	tags, pure := bazelGoConfig(root)
	pkgs, err := listPackages(cfg.Root, tags, pure)
	if err != nil {
		return nil, err
	}
	defaults, err := loadDefaultOverrides(cfg.GoModCache, cfg.GazelleVersion)
	if err != nil {
		return nil, err
	}
	mods := listedModules(pkgs, cfg.Work)
	overrides := c.gazelleOverrides()
	if len(c.findings) > 0 {
		return c.findings, nil
	}
	for _, m := range mods {
		configureModule(m, defaults, overrides)
	}
	required := requiredModules(c.gomod, mods, cfg.Work, defaults, overrides)
	repoConfig, err := writeRepoConfig(cfg.Work, c.gomod, mods, required)
	if err != nil {
		return nil, err
	}

	logf("go-deps: generating the BUILD files of %d modules with gazelle %s", len(mods), cfg.GazelleVersion)
	if err := generateModules(mods, cfg.Gazelle, repoConfig); err != nil {
		return nil, err
	}

	g := &goDepsCheck{mods: mods, byRepo: map[string]*depModule{}, seen: map[string]bool{}, reached: map[string]bool{},
		importpaths: map[string]string{}, protoReported: map[string]bool{},
		required: required, gazelle: cfg.Gazelle, repoConfig: repoConfig, logf: logf}
	g.checkPackages(pkgs)
	logf("go-deps: %d packages of %d modules checked", len(g.reached), len(mods))
	return g.findings, nil
}

// evalGoDeps evaluates MODULE.bazel for its go_deps tags (the rest of the
// Bazel files is the main check's); findings are left in the checker.
func evalGoDeps(root string, cfg Config) (*checker, error) {
	c := &checker{root: root, cfg: cfg, seen: map[string]bool{}}
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	if c.gomod, err = parseGoMod(data); err != nil {
		return nil, err
	}
	c.evalModule()
	for _, e := range c.mod.proxies {
		if e.name == "go_deps" {
			c.goDeps = e
		}
	}
	return c, nil
}

// listedModules are the modules of the listed packages that go_deps
// creates (not the main module, not those a bazel_dep provides), to be
// laid out under work.
func listedModules(pkgs []listedPackage, work string) map[string]*depModule {
	mods := map[string]*depModule{}
	for _, p := range pkgs {
		m := p.Module
		if m == nil || m.Main || mods[m.Path] != nil {
			continue
		}
		if _, ok := bazelGoModules[m.Path]; ok {
			continue
		}
		mods[m.Path] = &depModule{path: m.Path, version: m.Version, repo: repoName(m.Path), src: m.Dir,
			dir: filepath.Join(work, "repos", repoName(m.Path))}
	}
	return mods
}

// gazelleOverrides returns the go_deps.gazelle_override tags by module
// path, reporting a second override of a module and the tags the check
// does not model.
func (c *checker) gazelleOverrides() map[string]*extTag {
	overrides := map[string]*extTag{}
	for _, t := range c.goDeps.tags {
		switch t.tag {
		case "gazelle_override":
			p := stringsOf(t.attrs["path"])
			if len(p) != 1 {
				continue
			}
			if overrides[p[0]] != nil {
				c.report(t.pos, "go_deps.gazelle_override: a second override of %q (go_deps fails on that)", p[0])
			}
			overrides[p[0]] = t
		case "gazelle_default_attributes", "module_override", "archive_override":
			// Not modelled: they would change what is generated.
			c.report(t.pos, "go_deps.%s: the go-deps check does not model this tag; extend tools/bazelcheck/godeps.go before using it", t.tag)
		}
	}
	return overrides
}

// configureModule sets how gazelle generates m: gazelle's defaults for
// the module, or the project's gazelle_override of it.
func configureModule(m *depModule, defaults defaultOverrides, overrides map[string]*extTag) {
	m.generation, m.directives, m.extraArgs = "auto", defaults.directives[m.path], defaults.extraArgs[m.path]
	if g, ok := defaults.generation[m.path]; ok {
		m.generation = g
	}
	if t, ok := overrides[m.path]; ok {
		// A gazelle_override applies all of its attributes, defaults
		// included (go_deps.bzl, _get_override_or_default).
		m.generation, m.directives, m.extraArgs = "on", stringsOf(t.attrs["directives"]), stringsOf(t.attrs["build_extra_args"])
		if g := stringsOf(t.attrs["build_file_generation"]); len(g) == 1 {
			m.generation = g[0]
		}
	}
}

// requiredModules are go.mod's modules that go_deps creates, by repository
// name. The repo_config names every one of them, so those go list did not
// list are configured too, for their naming conventions and for
// on-demand layout.
func requiredModules(gomod *goMod, mods map[string]*depModule, work string, defaults defaultOverrides, overrides map[string]*extTag) map[string]*depModule {
	required := map[string]*depModule{}
	for _, r := range gomod.Requires {
		if _, ok := bazelGoModules[r.Path]; ok {
			continue
		}
		m := mods[r.Path]
		if m == nil {
			m = &depModule{path: r.Path, version: r.Version, repo: repoName(r.Path), dir: filepath.Join(work, "repos", repoName(r.Path))}
			configureModule(m, defaults, overrides)
		}
		required[m.repo] = m
	}
	return required
}

// writeRepoConfig writes the WORKSPACE of go_deps' repo_config in work,
// naming the listed and the required modules, and returns its path.
func writeRepoConfig(work string, gomod *goMod, mods, required map[string]*depModule) (string, error) {
	if err := os.MkdirAll(work, 0o755); err != nil {
		return "", err
	}
	repoConfig := filepath.Join(work, "WORKSPACE")
	all := map[string]*depModule{}
	for _, m := range required {
		all[m.path] = m
	}
	for p, m := range mods {
		all[p] = m
	}
	if err := os.WriteFile(repoConfig, []byte(goDepsRepoConfig(gomod, all)), 0o644); err != nil {
		return "", err
	}
	return repoConfig, nil
}

// generateModules lays out and generates the modules, two at a time.
func generateModules(mods map[string]*depModule, gazelle, repoConfig string) error {
	order := sortedKeys(mods)
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for i, p := range order {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = generateModule(mods[p], gazelle, repoConfig)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// checkPackages checks the library of every package go build compiles
// from a module go_deps creates, and sorts the findings.
func (g *goDepsCheck) checkPackages(pkgs []listedPackage) {
	for _, m := range g.mods {
		g.byRepo[m.repo] = m
	}
	for _, p := range pkgs {
		if p.Module == nil || p.Module.Main || p.Standard || p.ForTest != "" || strings.Contains(p.ImportPath, " [") {
			continue
		}
		if m := g.mods[p.Module.Path]; m != nil {
			g.checkPackage(m, p)
		}
	}
	sort.Slice(g.findings, func(i, j int) bool {
		return g.findings[i].Pos+g.findings[i].Msg < g.findings[j].Pos+g.findings[j].Msg
	})
}

// bazelGoConfig reads the Go build settings .bazelrc gives every build:
// the tags (--@rules_go//go/config:tags, comma-separated) and whether cgo
// is off (--@rules_go//go/config:pure).
func bazelGoConfig(root string) (tags string, pure bool) {
	data, err := os.ReadFile(filepath.Join(root, ".bazelrc"))
	if err != nil {
		return "", false
	}
	var all []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || (f[0] != "build" && f[0] != "common") {
			continue
		}
		for _, flag := range f[1:] {
			if v, ok := strings.CutPrefix(flag, "--@rules_go//go/config:tags="); ok {
				all = append(all, v)
			}
			if flag == "--@rules_go//go/config:pure" || flag == "--@rules_go//go/config:pure=true" {
				pure = true
			}
		}
	}
	return strings.Join(all, ","), pure
}

// listPackages runs `go list -deps -test -json ./...` in root, with the
// build tags and cgo setting of the Bazel build, so that the imports are
// the ones its packages compile with.
func listPackages(root, tags string, pure bool) ([]listedPackage, error) {
	cmd := exec.Command("go", "list", "-tags="+tags, "-deps", "-test", "-json=ImportPath,Dir,Standard,ForTest,Imports,Module", "./...")
	cmd.Dir = root
	if pure {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps -test ./...: %w\n%s", err, stderr.String())
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listedPackage
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("reading go list's output: %w", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// loadDefaultOverrides evaluates gazelle's default_gazelle_overrides.bzl
// from the module cache.
func loadDefaultOverrides(modCache, version string) (defaultOverrides, error) {
	d := defaultOverrides{directives: map[string][]string{}, extraArgs: map[string][]string{}, generation: map[string]string{}}
	if version == "" {
		return d, errors.New("the gazelle version is needed to read its default overrides")
	}
	file := filepath.Join(modCache, "github.com", "bazelbuild", "bazel-gazelle@"+version, "internal", "bzlmod", "default_gazelle_overrides.bzl")
	// visibility() is the only builtin the file calls.
	predeclared := starlark.StringDict{"visibility": starlark.NewBuiltin("visibility", func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
		return starlark.None, nil
	})}
	globals, err := starlark.ExecFileOptions(bzlFileOptions, &starlark.Thread{Name: "default overrides"}, file, nil, predeclared)
	if err != nil {
		return d, fmt.Errorf("evaluating gazelle's default overrides (go mod download github.com/bazelbuild/bazel-gazelle@%s): %w", version, err)
	}
	for name, into := range map[string]map[string][]string{
		"DEFAULT_DIRECTIVES_BY_PATH": d.directives, "DEFAULT_BUILD_EXTRA_ARGS_BY_PATH": d.extraArgs,
	} {
		dict, ok := globals[name].(*starlark.Dict)
		if !ok {
			return d, fmt.Errorf("%s: no dict %s", file, name)
		}
		for _, kv := range dict.Items() {
			into[strOf(kv[0])] = stringsOf(kv[1])
		}
	}
	dict, ok := globals["DEFAULT_BUILD_FILE_GENERATION_BY_PATH"].(*starlark.Dict)
	if !ok {
		return d, fmt.Errorf("%s: no dict DEFAULT_BUILD_FILE_GENERATION_BY_PATH", file)
	}
	for _, kv := range dict.Items() {
		d.generation[strOf(kv[0])] = strOf(kv[1])
	}
	return d, nil
}

// goDepsRepoConfig is the WORKSPACE of the go_repository_config repository
// go_deps declares: every module's repository, with its naming convention
// when a directive sets one.
func goDepsRepoConfig(gomod *goMod, mods map[string]*depModule) string {
	var b strings.Builder
	paths := map[string]bool{}
	for _, r := range gomod.Requires {
		paths[r.Path] = true
	}
	for p := range mods {
		paths[p] = true
	}
	for _, p := range sortedKeys(paths) {
		if mod, ok := bazelGoModules[p]; ok {
			fmt.Fprintf(&b, "go_repository(name = %q, importpath = %q, module_name = %q)\n", mod, p, mod)
			continue
		}
		convention := ""
		if m := mods[p]; m != nil {
			for _, d := range m.directives {
				if v, ok := strings.CutPrefix(d, "gazelle:go_naming_convention "); ok {
					convention = fmt.Sprintf(", build_naming_convention = %q", strings.TrimSpace(v))
				}
			}
		}
		fmt.Fprintf(&b, "go_repository(name = %q, importpath = %q%s)\n", repoName(p), p, convention)
	}
	return b.String()
}

// buildFileNames are go_repository's default build_file_name.
var buildFileNames = []string{"BUILD.bazel", "BUILD"}

// generateModule lays the module out and runs gazelle over it as
// go_repository does (internal/go_repository.bzl).
func generateModule(m *depModule, gazelle, repoConfig string) error {
	if err := os.RemoveAll(m.dir); err != nil {
		return err
	}
	var err error
	if m.hasPbGo, err = linkTree(m.src, m.dir); err != nil {
		return fmt.Errorf("laying out %s: %w", m.path, err)
	}
	existing := ""
	for _, n := range buildFileNames {
		if fi, err := os.Stat(filepath.Join(m.dir, n)); err == nil && !fi.IsDir() {
			existing = n
			break
		}
	}
	switch m.generation {
	case "off":
		return nil
	case "auto":
		if existing != "" {
			return nil
		}
	case "clean":
		if err := filepath.WalkDir(m.dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && (d.Name() == "BUILD" || d.Name() == "BUILD.bazel") {
				return os.Remove(p)
			}
			return err
		}); err != nil {
			return err
		}
		existing = ""
	}
	if len(m.directives) > 0 {
		name := existing
		if name == "" {
			name = buildFileNames[0]
		}
		lines := make([]string, len(m.directives))
		for i, d := range m.directives {
			lines[i] = "# " + d
		}
		if err := os.WriteFile(filepath.Join(m.dir, name), []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			return err
		}
	}
	args := []string{"-go_repository_mode", "-go_prefix", m.path, "-mode", "fix", "-repo_root", m.dir,
		"-repo_config", repoConfig, "-go_repository_module_mode", "-build_file_name", strings.Join(buildFileNames, ","),
		"-external", "static", "-go_naming_convention", "import_alias", "-bzlmod"}
	args = append(append(args, m.extraArgs...), m.dir)
	cmd := exec.Command(gazelle, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("gazelle over %s@%s (as go_deps runs it): %w\n%s", m.path, m.version, err, out.String())
	}
	return nil
}

// linkTree copies the tree at src to dst with hard links (the module
// cache's files are read-only and never written here); build files, which
// gazelle rewrites, are copied. pbGo tells whether the tree holds
// generated protobuf code (*.pb.go).
func linkTree(src, dst string) (pbGo bool, err error) {
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case !d.Type().IsRegular():
			return nil
		case d.Name() == "BUILD" || d.Name() == "BUILD.bazel":
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(target, data, 0o644)
		}
		pbGo = pbGo || strings.HasSuffix(d.Name(), ".pb.go")
		if err := os.Link(p, target); err != nil {
			data, rerr := os.ReadFile(p)
			if rerr != nil {
				return err
			}
			return os.WriteFile(target, data, 0o644)
		}
		return nil
	})
	return pbGo, err
}

type goDepsCheck struct {
	mods     map[string]*depModule
	byRepo   map[string]*depModule
	findings []Finding
	seen     map[string]bool
	// reached are the targets visited, by canonical label.
	reached map[string]bool
	// importpaths are the Go libraries reached, by import path.
	importpaths   map[string]string
	protoReported map[string]bool
	// required are go.mod's modules by repository name: a label into one
	// that `go list` did not list (gazelle adds edges go build does not
	// have, such as files of the negation of a build_tags directive's tag)
	// is laid out when reached.
	required            map[string]*depModule
	gazelle, repoConfig string
	logf                func(string, ...any)
}

// bazelDepRepos are repositories that BUILD files generated by go_deps may
// name without go_deps creating them: rules_go's and protobuf's (proto
// rules, well-known types) and the modules of bazelGoModules.
var bazelDepRepos = map[string]bool{"io_bazel_rules_go": true, "rules_go": true, "com_google_protobuf": true,
	"protobuf": true, "gazelle": true, "bazel_gazelle": true, "bazel_skylib": true, "platforms": true}

// onDemand lays out and generates a module of go.mod that go list did not
// list; nil if repo is none of go.mod's.
func (g *goDepsCheck) onDemand(repo string) (*depModule, error) {
	m := g.required[repo]
	if m == nil {
		return nil, nil
	}
	cmd := exec.Command("go", "mod", "download", "-json", m.path+"@"+m.version)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go mod download %s@%s: %w\n%s", m.path, m.version, err, stderr.String())
	}
	var info struct{ Dir string }
	if err := json.Unmarshal(out, &info); err != nil {
		return nil, err
	}
	m.src = info.Dir
	g.logf("go-deps: laying out %s@%s, named by a generated label but not compiled by go build", m.path, m.version)
	if err := generateModule(m, g.gazelle, g.repoConfig); err != nil {
		return nil, err
	}
	g.mods[m.path], g.byRepo[m.repo] = m, m
	return m, nil
}

func (g *goDepsCheck) report(pos, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if g.seen[pos+msg] {
		return
	}
	g.seen[pos+msg] = true
	g.findings = append(g.findings, Finding{Pos: pos, Msg: msg})
}

// rules returns the rules of a package of the module's laid-out copy.
func (g *goDepsCheck) rules(m *depModule, pkg string) (map[string]*depRule, error) {
	if m.pkgs == nil {
		m.pkgs = map[string]map[string]*depRule{}
	}
	if r, ok := m.pkgs[pkg]; ok {
		return r, nil
	}
	var rules map[string]*depRule
	for _, n := range buildFileNames {
		file := filepath.Join(m.dir, filepath.FromSlash(pkg), n)
		data, err := os.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		display := fmt.Sprintf("@%s//%s:%s", m.repo, pkg, n)
		if rules, err = parseBuildRules(display, data); err != nil {
			return nil, err
		}
		break
	}
	m.pkgs[pkg] = rules
	return rules, nil
}

// parseBuildRules reads the rule calls of a generated BUILD file: kind,
// name, importpath and the labels of deps, embed, proto and actual (every
// branch of a select).
func parseBuildRules(file string, data []byte) (map[string]*depRule, error) {
	f, err := bzlFileOptions.Parse(file, data, 0)
	if err != nil {
		return nil, err
	}
	rules := map[string]*depRule{}
	for _, stmt := range f.Stmts {
		e, ok := stmt.(*syntax.ExprStmt)
		if !ok {
			continue
		}
		call, ok := e.X.(*syntax.CallExpr)
		if !ok {
			continue
		}
		fn, ok := call.Fn.(*syntax.Ident)
		if !ok {
			continue
		}
		start, _ := call.Span()
		r := &depRule{kind: fn.Name, pos: fmt.Sprintf("%s:%d", file, start.Line)}
		for _, a := range call.Args {
			bin, ok := a.(*syntax.BinaryExpr)
			if !ok || bin.Op != syntax.EQ {
				continue
			}
			key, _ := bin.X.(*syntax.Ident)
			if key == nil {
				continue
			}
			values := literalStrings(bin.Y)
			switch key.Name {
			case "name":
				r.name = first(values)
			case "importpath":
				r.importpath = first(values)
			case "actual":
				r.actual = first(values)
			case "deps":
				r.deps = values
			case "embed":
				r.embed = values
			case "proto":
				r.proto = values
			}
		}
		if r.name != "" {
			rules[r.name] = r
		}
	}
	return rules, nil
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// literalStrings collects the string literals of an attribute value: a
// string, a list, a select's branches (not its conditions) and sums of
// these.
func literalStrings(e syntax.Expr) []string {
	switch t := e.(type) {
	case *syntax.Literal:
		if s, ok := t.Value.(string); ok {
			return []string{s}
		}
	case *syntax.ListExpr:
		var out []string
		for _, x := range t.List {
			out = append(out, literalStrings(x)...)
		}
		return out
	case *syntax.BinaryExpr:
		return append(literalStrings(t.X), literalStrings(t.Y)...)
	case *syntax.DictExpr:
		var out []string
		for _, x := range t.List {
			if entry, ok := x.(*syntax.DictEntry); ok {
				out = append(out, literalStrings(entry.Value)...)
			}
		}
		return out
	case *syntax.CallExpr:
		var out []string
		for _, a := range t.Args {
			out = append(out, literalStrings(a)...)
		}
		return out
	case *syntax.ParenExpr:
		return literalStrings(t.X)
	}
	return nil
}

// resolve finds the rule a label names, relative to a package of m.
func (g *goDepsCheck) resolve(m *depModule, pkg, label string) (*depModule, string, *depRule, error) {
	repo, rest := "", label
	if strings.HasPrefix(label, "@") {
		var hasPkg bool
		repo, rest, hasPkg = strings.Cut(strings.TrimPrefix(label[1:], "@"), "//")
		if hasPkg {
			rest = "//" + rest
		} else {
			rest = "//:" + repo // @repo is @repo//:repo
		}
	}
	target := m
	if repo != "" && repo != m.repo {
		target = g.byRepo[repo]
		if target == nil {
			var err error
			if target, err = g.onDemand(repo); err != nil {
				return nil, "", nil, err
			}
		}
		if target == nil {
			if bazelDepRepos[repo] {
				return nil, "", nil, nil
			}
			return nil, "", nil, fmt.Errorf("names repository @%s, which go_deps does not create (no module of go.mod has that name)", repo)
		}
	}
	p, name := pkg, ""
	switch {
	case strings.HasPrefix(rest, ":"):
		name = rest[1:]
	case strings.HasPrefix(rest, "//"):
		var hasName bool
		p, name, hasName = strings.Cut(rest[2:], ":")
		if !hasName {
			name = path.Base(p)
		}
	default:
		name = rest
	}
	rules, err := g.rules(target, p)
	if err != nil {
		return nil, "", nil, err
	}
	return target, p, rules[name], nil
}

// checkPackage checks the go_library of one package `go build` compiles.
func (g *goDepsCheck) checkPackage(m *depModule, p listedPackage) {
	rel, err := filepath.Rel(m.src, p.Dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		g.report(m.path, "package %s is not inside its module's directory %s", p.ImportPath, m.src)
		return
	}
	pkg := filepath.ToSlash(rel)
	if pkg == "." {
		pkg = ""
	}
	where := fmt.Sprintf("@%s//%s (%s@%s)", m.repo, pkg, m.path, m.version)
	rules, err := g.rules(m, pkg)
	if err != nil {
		g.report(where, "reading the generated BUILD file: %v", err)
		return
	}
	var lib *depRule
	for _, n := range sortedKeys(rules) {
		r := rules[n]
		if r.importpath == p.ImportPath && (r.kind == "go_library" || r.kind == "go_proto_library") {
			lib = r
			break
		}
	}
	if lib == nil {
		g.report(where, "no go_library with importpath %q: gazelle generated %s", p.ImportPath, ruleList(rules))
		return
	}
	g.visit(m, pkg, lib)
	provided := map[string]bool{}
	g.directImports(m, pkg, lib, provided)
	for _, imp := range p.Imports {
		imp, _, _ = strings.Cut(imp, " ")
		if imp == "C" || imp == p.ImportPath || !strings.Contains(strings.Split(imp, "/")[0], ".") {
			continue // the standard library, cgo
		}
		if !provided[imp] {
			g.report(lib.pos, "%s imports %s, which no dependency of :%s provides (strict deps): %s", p.ImportPath, imp, lib.name, importList(provided))
		}
	}
}

// visit marks rule r reached and visits every target it names through
// deps, embed, proto and actual, reporting labels that name nothing and
// proto rules of modules with checked-in generated code.
func (g *goDepsCheck) visit(m *depModule, pkg string, r *depRule) {
	key := fmt.Sprintf("@%s//%s:%s", m.repo, pkg, r.name)
	if g.reached[key] {
		return
	}
	g.reached[key] = true
	// A go_proto_library is embedded by the go_library of its import path.
	if r.importpath != "" && r.kind == "go_library" {
		if other, ok := g.importpaths[r.importpath]; ok && other != key {
			g.report(r.pos, "%s and %s both have importpath %q and both are in the build: the package would be linked twice", other, key, r.importpath)
		} else {
			g.importpaths[r.importpath] = key
		}
	}
	if (r.kind == "proto_library" || r.kind == "go_proto_library") && !g.protoReported[m.path] {
		if m.hasPbGo {
			g.protoReported[m.path] = true
			g.report(fmt.Sprintf("%s@%s", m.path, m.version), "gazelle generates proto rules (%s) for a module that checks in its generated Go code (*.pb.go); "+
				"the build would compile protoc's output instead: add go_deps.gazelle_override(path = %q, directives = [\"gazelle:proto disable\"]) to MODULE.bazel", key, m.path)
		}
	}
	labels := append(append(append([]string{}, r.deps...), r.embed...), r.proto...)
	if r.actual != "" {
		labels = append(labels, r.actual)
	}
	for _, l := range labels {
		if tm, tp, t := g.target(m, pkg, r, l); t != nil {
			g.visit(tm, tp, t)
		}
	}
}

// target resolves a label of rule r, reporting one that names nothing; nil
// for a label into a repository go_deps does not create (a bazel_dep's,
// such as protobuf's).
func (g *goDepsCheck) target(m *depModule, pkg string, r *depRule, label string) (*depModule, string, *depRule) {
	tm, tp, t, err := g.resolve(m, pkg, label)
	switch {
	case err != nil:
		g.report(r.pos, "%s: %v", label, err)
	case tm != nil && t == nil:
		g.report(r.pos, "%s (in :%s) names no target: @%s//%s has %s", label, r.name, tm.repo, tp, ruleList(g.pkgRules(tm, tp)))
	}
	return tm, tp, t
}

// directImports collects the import paths r's direct dependencies provide,
// with those of the libraries r embeds (whose deps are r's), following
// aliases.
func (g *goDepsCheck) directImports(m *depModule, pkg string, r *depRule, provided map[string]bool) {
	for _, l := range r.deps {
		tm, tp, t, err := g.resolve(m, pkg, l)
		for i := 0; err == nil && t != nil && t.actual != "" && i < 10; i++ {
			tm, tp, t, err = g.resolve(tm, tp, t.actual)
		}
		if err == nil && t != nil && t.importpath != "" {
			provided[t.importpath] = true
		}
	}
	for _, l := range r.embed {
		if em, ep, e, err := g.resolve(m, pkg, l); err == nil && e != nil {
			g.directImports(em, ep, e, provided)
		}
	}
}

func (g *goDepsCheck) pkgRules(m *depModule, pkg string) map[string]*depRule {
	r, _ := g.rules(m, pkg)
	return r
}

func ruleList(rules map[string]*depRule) string {
	if len(rules) == 0 {
		return "no rules"
	}
	var out []string
	for _, n := range sortedKeys(rules) {
		r := rules[n]
		s := r.kind + " :" + n
		if r.importpath != "" {
			s += " (" + r.importpath + ")"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

func importList(provided map[string]bool) string {
	if len(provided) == 0 {
		return "it has no Go dependencies"
	}
	return "its dependencies provide " + strings.Join(sortedKeys(provided), ", ")
}
