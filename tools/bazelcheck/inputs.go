package main

// Checks of what actions and tests read, against what their BUILD files
// give them:
//
//   - every env variable of a go_test is read by the test's code (its
//     package and the packages of this module it imports), and every data
//     entry is read: named by such a variable, a file of the test's own
//     package, or a file whose name the code spells out;
//   - every --test_env of .bazelrc names a variable some code reads;
//   - the Go-native build's steps run as actions (isctl bazel-compile and
//     bazel-image) get every file they read: the build inputs of
//     internal/build (the operator's compile and image: its stamp inputs
//     only), and for a compile go.mod, go.sum and the Go and embedded
//     files of the main package's import graph in this module;
//   - only the catalog image's step takes the catalog image's programs:
//     the operator image is built from the operator's sources alone, and
//     the bundle image pins it.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// buildInputFiles are the files build.LoadInputs reads besides Go
// code (VERSION, catalog.TemplatePath, bundle.BaseCSVPath,
// bundle.OperatorRBACPath; a test checks they agree), plus the released
// entries under catalog/released/ when there are any.
var buildInputFiles = []string{"VERSION", "catalog/operator_catalog.yaml", "bundle/csv.base.yaml", "operator/rbac/role.yaml"}

// stampInputFiles are what build.LoadInputs reads for the operator alone
// (the stamp), plus the released entries: what the operator's compile and
// image steps need.
var stampInputFiles = []string{"VERSION"}

// catalogPrograms are the catalog image's programs (build's
// CatalogPrograms) by the directory of their main package in this module
// ("" for opm, a package of a dependency): bazel-compile -program=NAME
// compiles one, from go.mod, go.sum and that package's import graph, and
// every bazel-image step packages both (-catalog-binary NAME=path).
var catalogPrograms = map[string]string{"opm": "", "grpc_health_probe": "catalog/healthprobe"}

const releasedDir = "catalog/released"

// goPkg is what the checker knows of a Go package directory of this module.
type goPkg struct {
	files    []string // non-test .go files, relative to the root
	imports  map[string]bool
	literals map[string]bool // string literals of the non-test files
	testLits map[string]bool // and of the _test.go files
	testImps map[string]bool
}

func (c *checker) goPackage(dir string) *goPkg {
	if c.goPkgs == nil {
		c.goPkgs = map[string]*goPkg{}
	}
	if p, ok := c.goPkgs[dir]; ok {
		return p
	}
	p := &goPkg{imports: map[string]bool{}, literals: map[string]bool{}, testLits: map[string]bool{}, testImps: map[string]bool{}}
	c.goPkgs[dir] = p
	ents, err := os.ReadDir(filepath.Join(c.root, filepath.FromSlash(dir)))
	if err != nil {
		return p
	}
	fset := token.NewFileSet()
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") {
			continue
		}
		rel := path.Join(dir, name)
		f, err := parser.ParseFile(fset, filepath.Join(c.root, filepath.FromSlash(rel)), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			continue
		}
		if ignoredByBuildTags(f) {
			continue
		}
		test := strings.HasSuffix(name, "_test.go")
		lits, imps := p.literals, p.imports
		if test {
			lits, imps = p.testLits, p.testImps
		} else {
			p.files = append(p.files, rel)
		}
		for _, im := range f.Imports {
			if v, err := strconv.Unquote(im.Path.Value); err == nil {
				imps[v] = true
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if bl, ok := n.(*ast.BasicLit); ok && bl.Kind == token.STRING {
				if v, err := strconv.Unquote(bl.Value); err == nil {
					lits[v] = true
				}
			}
			return true
		})
	}
	sort.Strings(p.files)
	return p
}

// ignoredByBuildTags reports files `go build` skips on Linux whatever the
// tags: //go:build ignore, tools, or another OS.
func ignoredByBuildTags(f *ast.File) bool {
	for _, cg := range f.Comments {
		if cg.Pos() > f.Package {
			break
		}
		for _, cm := range cg.List {
			if expr, ok := strings.CutPrefix(cm.Text, "//go:build "); ok {
				for _, bad := range []string{"ignore", "tools", "darwin", "windows"} {
					if regexp.MustCompile(`(^|[^!\w])` + bad + `\b`).MatchString(expr) {
						return true
					}
				}
			}
		}
	}
	return false
}

// moduleDir maps an import path of this module to its directory.
func (c *checker) moduleDir(imp string) (string, bool) {
	if imp == c.gomod.Module {
		return "", true
	}
	rel, ok := strings.CutPrefix(imp, c.gomod.Module+"/")
	return rel, ok
}

// closure returns the package directories of this module that dir imports,
// transitively, dir included; withTests follows dir's test imports too.
func (c *checker) closure(dir string, withTests bool) []string {
	seen := map[string]bool{}
	var walk func(d string, tests bool)
	walk = func(d string, tests bool) {
		if seen[d] {
			return
		}
		seen[d] = true
		p := c.goPackage(d)
		imps := []map[string]bool{p.imports}
		if tests {
			imps = append(imps, p.testImps)
		}
		for _, m := range imps {
			for imp := range m {
				if sub, ok := c.moduleDir(imp); ok {
					walk(sub, false)
				}
			}
		}
	}
	walk(dir, withTests)
	return sortedKeys(seen)
}

// checkTestInputs checks the env and data of every go_test.
func (c *checker) checkTestInputs() {
	for _, t := range c.targets {
		if t.kind != "go_test" || t.pkg.repo != "" {
			continue
		}
		lits := map[string]bool{}
		for _, d := range c.closure(t.pkg.path, true) {
			p := c.goPackage(d)
			for l := range p.literals {
				lits[l] = true
			}
			if d == t.pkg.path {
				for l := range p.testLits {
					lits[l] = true
				}
			}
		}
		what := fmt.Sprintf("go_test %q", t.name)
		readRefs := map[label]bool{}
		envs := stringMap(t.attrs["env"])
		for _, k := range sortedKeys(envs) {
			if !lits[k] {
				c.report(t.pos, "%s: env %q is read by no Go code of the test (its package and the packages of this module it imports): drop it, or read it", what, k)
				continue
			}
			for _, m := range expansionRe.FindAllStringSubmatch(envs[k], -1) {
				if l, err := parseLabel(t.pkg.path, strings.TrimSpace(m[2])); err == nil {
					readRefs[c.canonical(l)] = true
				}
			}
		}
		for _, s := range stringsOf(t.attrs["data"]) {
			l, err := parseLabel(t.pkg.path, s)
			if err != nil {
				continue
			}
			l = c.canonical(l)
			switch {
			case readRefs[l]:
			case l.repo == "" && l.pkg == t.pkg.path && c.fileExists(path.Join(l.pkg, l.name)):
				// The test's own source files (testdata, a chart directory),
				// read by relative paths; what its package builds is read
				// through env.
			case l.repo == "" && c.fileExists(path.Join(l.pkg, l.name)) && strings.Contains(path.Base(l.name), ".") && spelledOut(lits, path.Base(l.name)):
			default:
				c.report(t.pos, "%s: data %s is read by no Go code of the test: no env variable the code reads names it, and no string of the code names its file; drop it, or pass it through env", what, l)
			}
		}
	}
}

// stringMap returns a dict attribute (not a select) as a map.
func stringMap(v starlark.Value) map[string]string {
	out := map[string]string{}
	if d, ok := v.(*starlark.Dict); ok {
		for _, it := range d.Items() {
			out[strOf(it[0])] = strOf(it[1])
		}
	}
	return out
}

// spelledOut reports whether a string literal is base or ends in /base.
func spelledOut(lits map[string]bool, base string) bool {
	if lits[base] {
		return true
	}
	for l := range lits {
		if strings.HasSuffix(l, "/"+base) {
			return true
		}
	}
	return false
}

// checkBazelrcTestEnv checks that each --test_env of .bazelrc names a
// variable some Go code of this module reads (system variables aside).
func (c *checker) checkBazelrcTestEnv() {
	data, err := os.ReadFile(filepath.Join(c.root, ".bazelrc"))
	if err != nil {
		return
	}
	system := map[string]bool{"PATH": true, "HOME": true, "TMPDIR": true, "USER": true, "LANG": true, "LC_ALL": true}
	var all map[string]bool
	for i, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || !(fields[0] == "test" || strings.HasPrefix(fields[0], "test:")) {
			continue
		}
		for _, f := range fields[1:] {
			v, ok := strings.CutPrefix(f, "--test_env=")
			if !ok {
				continue
			}
			name, _, _ := strings.Cut(v, "=")
			if system[name] {
				continue
			}
			if all == nil {
				all = c.moduleLiterals()
			}
			if !all[name] {
				c.reportAt(fmt.Sprintf(".bazelrc:%d", i+1), "--test_env=%s: no Go code of this module reads %s", v, name)
			}
		}
	}
}

// moduleLiterals are the string literals of every Go file of this module.
func (c *checker) moduleLiterals() map[string]bool {
	out := map[string]bool{}
	_ = filepath.WalkDir(c.root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(c.root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || strings.HasPrefix(d.Name(), "bazel-") || c.ignored(rel) || rel == "e2e/binaries") {
				return filepath.SkipDir
			}
			if rel == "." {
				rel = ""
			}
			gp := c.goPackage(rel)
			for _, m := range []map[string]bool{gp.literals, gp.testLits} {
				for l := range m {
					out[l] = true
				}
			}
		}
		return nil
	})
	return out
}

// checkBuildSteps checks the inputs of the run_binary actions that run
// the Go-native build's steps (isctl bazel-compile, bazel-image).
func (c *checker) checkBuildSteps() {
	for _, t := range c.targets {
		if t.kind != "run_binary" || t.pkg.repo != "" {
			continue
		}
		args := stringsOf(t.attrs["args"])
		if len(args) == 0 || (args[0] != "bazel-compile" && args[0] != "bazel-image") {
			continue
		}
		c.checkBuildStep(t, args)
	}
}

// checkBuildStep checks the run_binary t running isctl with args (args[0]
// the step): its flags, and that its srcs hold every file the step reads.
func (c *checker) checkBuildStep(t *target, args []string) {
	files := map[string]bool{}
	for _, s := range stringsOf(t.attrs["srcs"]) {
		c.collectFiles(t.pkg.path, s, files, 0)
	}
	program, main, image := buildStepFlags(args)
	need, ok := c.buildStepInputs(t, args[0], program, image)
	if !ok {
		return
	}
	if args[0] == "bazel-image" && image != "catalog" {
		c.checkNoCatalogPrograms(t, image, args)
	}
	if args[0] == "bazel-image" && image == "catalog" {
		c.checkCatalogBinaries(t, args)
	}
	if args[0] == "bazel-compile" && program == "operator" {
		need = append(need, "go.mod", "go.sum")
		need = append(need, c.operatorSources(main)...)
	}
	var missing []string
	for _, n := range need {
		if !files[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		c.report(t.pos, "run_binary %q (isctl %s): srcs lack %s, which the step reads (the action sees only its declared inputs)", t.name, args[0], strings.Join(missing, ", "))
	}
}

// buildStepFlags returns the -program, -package (the main package's
// directory) and -image flags of an isctl step, with their defaults.
func buildStepFlags(args []string) (program, main, image string) {
	program, main, image = "operator", "operator", ""
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "-program="); ok {
			program = v
		}
		if v, ok := strings.CutPrefix(a, "-image="); ok {
			image = v
		}
		if v, ok := strings.CutPrefix(a, "-package="); ok {
			main = strings.TrimPrefix(path.Clean(v), "./")
		}
	}
	return program, main, image
}

// buildStepInputs returns the files step (of run_binary t) reads besides
// the operator's sources: a catalog program's module and sources, or the
// build's input files and the released catalog entries. false when
// -program names no program (reported).
func (c *checker) buildStepInputs(t *target, step, program, image string) ([]string, bool) {
	var need []string
	if step == "bazel-compile" && program != "operator" {
		pkg, ok := catalogPrograms[program]
		if !ok {
			c.report(t.pos, "run_binary %q (isctl bazel-compile): -program=%s is neither operator nor a program of the catalog image", t.name, program)
			return nil, false
		}
		// No stamp of this repository: go.mod, go.sum and the sources.
		need = []string{"go.mod", "go.sum"}
		if pkg != "" {
			for _, d := range c.closure(pkg, false) {
				need = append(need, c.goPackage(d).files...)
			}
		}
		return need, true
	}
	if program == "operator" && (step == "bazel-compile" || image == "operator") {
		need = append(need, stampInputFiles...)
	} else {
		need = append(need, buildInputFiles...)
	}
	if ents, err := os.ReadDir(filepath.Join(c.root, releasedDir)); err == nil {
		for _, e := range ents {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".yaml") {
				need = append(need, path.Join(releasedDir, e.Name()))
			}
		}
	}
	return need, true
}

// checkCatalogBinaries reports the catalog image's programs that the
// catalog image step t is not given as -catalog-binary.
func (c *checker) checkCatalogBinaries(t *target, args []string) {
	for _, p := range sortedKeys(catalogPrograms) {
		found := false
		for _, a := range args {
			found = found || strings.HasPrefix(a, "-catalog-binary="+p+"=")
		}
		if !found {
			c.report(t.pos, "run_binary %q (isctl bazel-image): no -catalog-binary=%s=...: the step packages the catalog image's programs compiled by an action (bazel-compile -program=%s); it has no go command", t.name, p, p)
		}
	}
}

// operatorSources returns the Go files and embedded files of the packages
// the main package in directory main imports (itself included).
func (c *checker) operatorSources(main string) []string {
	var need []string
	for _, d := range c.closure(main, false) {
		need = append(need, c.goPackage(d).files...)
		if p, ok := c.pkgs[d]; ok {
			for _, lib := range p.targets {
				if lib.kind == "go_library" {
					for _, e := range stringsOf(lib.attrs["embedsrcs"]) {
						need = append(need, path.Join(d, e))
					}
				}
			}
		}
	}
	return need
}

// checkNoCatalogPrograms reports the catalog image's programs among the
// inputs of the image step t of another image: its flags
// (-catalog-binary) and its srcs (the actions compiling them). The
// operator image is built from the operator's sources alone; the bundle
// pins it and holds no program either.
func (c *checker) checkNoCatalogPrograms(t *target, image string, args []string) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "-catalog-binary="); ok {
			c.report(t.pos, "run_binary %q (isctl bazel-image -image=%s): -catalog-binary=%s: the %s image holds none of the catalog image's programs; only the catalog's step takes them", t.name, image, v, image)
		}
	}
	for _, s := range stringsOf(t.attrs["srcs"]) {
		_, dep, why := c.resolve(t.pkg.path, s)
		if why != "" || dep == nil || dep.kind != "run_binary" {
			continue
		}
		depArgs := stringsOf(dep.attrs["args"])
		if len(depArgs) == 0 || depArgs[0] != "bazel-compile" {
			continue
		}
		for _, a := range depArgs {
			if p, ok := strings.CutPrefix(a, "-program="); ok && p != "operator" {
				c.report(t.pos, "run_binary %q (isctl bazel-image -image=%s): srcs take %s, which compiles the catalog image's %s: the %s image's action must not depend on it", t.name, image, s, p, image)
			}
		}
	}
}

// collectFiles adds the source files of this repository that the label s
// (relative to package from) stands for: a file, or the srcs of
// filegroups, recursively.
func (c *checker) collectFiles(from, s string, into map[string]bool, depth int) {
	if depth > 20 {
		return
	}
	l, dep, why := c.resolve(from, s)
	if why != "" || l.repo != "" {
		return
	}
	if dep == nil || dep.file {
		into[path.Join(l.pkg, l.name)] = true
		return
	}
	if dep.kind == "filegroup" {
		for _, src := range stringsOf(dep.attrs["srcs"]) {
			c.collectFiles(dep.pkg.path, src, into, depth+1)
		}
	}
}

// checkGoToolchain: the image digests depend on the Go that compiles the
// operator, so the SDK rules_go downloads (go_sdk.from_file reads go.mod's
// toolchain line, else its go line, a minimum) must be pinned as the Go the
// Go-native build uses: go.mod's toolchain line.
//
// A released VERSION is rebuilt with its record's revision; its operator
// digest reproduces only with the Go its record names, so that must be the
// toolchain line too (or a release commit fails to render under Bazel).
func (c *checker) checkGoToolchain(pos syntax.Position) {
	if c.gomod.Toolchain == "" {
		c.report(pos, "go_sdk.from_file reads //:go.mod, which has no toolchain line: rules_go would download the go line's version (%s, a minimum) while the Go-native build uses whatever go is installed, and the image digests would differ; pin the Go both use with `go mod edit -toolchain=go1.X.Y`", c.gomod.Go)
		return
	}
	data, err := os.ReadFile(filepath.Join(c.root, "VERSION"))
	if err != nil {
		return
	}
	version := strings.TrimSpace(string(data))
	ents, _ := os.ReadDir(filepath.Join(c.root, releasedDir))
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		rel := path.Join(releasedDir, e.Name())
		rec, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(rel)))
		if err != nil {
			continue
		}
		v := topLevelYAML(rec, "version")
		if v != version {
			continue
		}
		if gv := topLevelYAML(rec, "goVersion"); gv != c.gomod.Toolchain {
			c.reportAt(rel, "VERSION %s is released with %s, but go.mod's toolchain line (the Go Bazel builds with) is %s: the operator digest would not reproduce under Bazel; release with the toolchain line's Go", version, gv, c.gomod.Toolchain)
		}
	}
}

// topLevelYAML is the value of a top-level key of a YAML document.
func topLevelYAML(doc []byte, key string) string {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + `:\s*"?([^"\s]*)"?\s*$`).FindSubmatch(doc)
	if m == nil {
		return ""
	}
	return string(m[1])
}
