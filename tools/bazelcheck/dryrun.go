package main

// The dry run: each end-to-end go_test (tag "e2e") is run the way `bazel
// test` runs it, as far as that is possible without Bazel, to prove that
// it finds every input it reads from what its BUILD file gives it.
//
// For each test the dry run compiles the test binary (`go test -c`, the
// only use of the go command), lays out a runfiles tree from the test's
// data as the checker models it (source files as links to the source tree;
// what Bazel would build or fetch, such as go_binary targets and the
// binaries of the go_fetch repositories, as stand-in files at the paths
// Bazel gives them), writes its MANIFEST, and runs the binary with
// -test.run=^TestBazelInputs$ in <runfiles>/_main/<package>, with an
// environment built like Bazel's and nothing else: TEST_SRCDIR,
// RUNFILES_DIR, RUNFILES_MANIFEST_FILE, TEST_WORKSPACE, TEST_TMPDIR, HOME,
// GO_TEST_RUN_FROM_BAZEL, the --test_env of .bazelrc (PATH included), and
// the BUILD file's env with $(rlocationpath(s) ...) expanded. The tree
// lives in a scratch directory outside any git work tree, and the PATH
// starts with stand-ins for go and git that record any use. The test must
// pass, not skip; see e2e/harness/testinputs.
//
// What it does not prove: that the stand-ins' real counterparts build (that
// needs Bazel), or that the test passes once it has its inputs.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// DryRunConfig configures DryRun.
type DryRunConfig struct {
	Config
	// Work is a scratch directory; it must not be inside a git work tree.
	Work string
	// Targets are the go_test labels to run; empty means every go_test
	// tagged "e2e".
	Targets []string
	// Env adds to (or, with an empty value, removes from) every target's
	// BUILD env, before expansion; the planted mistakes use it.
	Env map[string]string
	// DropData removes labels from every target's data (planted mistakes).
	DropData []string
	// BinDir holds the compiled test binaries; default Work/bin.
	BinDir string
	// Compiled caches test binaries by package across runs; may be nil.
	Compiled map[string]string
	// Log receives progress and the test binaries' output; may be nil.
	Log io.Writer
}

// runfile is one entry of a runfiles tree.
type runfile struct {
	rloc string // runfiles path, e.g. _main/operator/operator_/operator
	src  string // the file it links to; "" for a stand-in
	exec bool   // a stand-in executable
	dir  bool   // a stand-in directory
}

// DryRun runs the end-to-end tests' TestBazelInputs as described above and
// returns what went wrong, one finding per test.
func DryRun(ctx context.Context, cfg DryRunConfig) ([]Finding, error) {
	log := cfg.Log
	if log == nil {
		log = io.Discard
	}
	c, err := newChecker(cfg.Config)
	if err != nil {
		return nil, err
	}
	if len(c.findings) > 0 {
		return nil, fmt.Errorf("the Bazel files have mistakes (first: %s); fix them before the dry run", c.findings[0])
	}
	work, err := filepath.Abs(cfg.Work)
	if err != nil {
		return nil, err
	}
	if g := gitAbove(work); g != "" {
		return nil, fmt.Errorf("the dry run's scratch directory %s is inside the git work tree %s; Bazel's runfiles are not", work, g)
	}
	tests := cfg.Targets
	if len(tests) == 0 {
		for _, t := range c.targets {
			if t.kind == "go_test" && t.pkg.repo == "" && contains(stringsOf(t.attrs["tags"]), "e2e") {
				tests = append(tests, "//"+t.pkg.path+":"+t.name)
			}
		}
	}
	if len(tests) == 0 {
		return nil, fmt.Errorf("no go_test is tagged e2e")
	}
	sort.Strings(tests)
	var findings []Finding
	for _, label := range tests {
		f, err := c.dryRunTest(ctx, cfg, work, label, log)
		if err != nil {
			return findings, fmt.Errorf("%s: %w", label, err)
		}
		findings = append(findings, f...)
	}
	return findings, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// gitAbove returns the first directory at or above dir holding .git.
func gitAbove(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}

func (c *checker) dryRunTest(ctx context.Context, cfg DryRunConfig, work, label string, log io.Writer) ([]Finding, error) {
	pl, err := parseLabel("", label)
	if err != nil {
		return nil, err
	}
	l, t, why := c.resolve(pl.pkg, label) // from its own package: no visibility applies
	if why != "" || t == nil || t.kind != "go_test" {
		return nil, fmt.Errorf("not a go_test of this repository (%s)", why)
	}
	at := func(format string, args ...any) Finding {
		return Finding{Pos: fmt.Sprintf("%s:%d (dry run of %s)", t.pos.Filename(), t.pos.Line, l), Msg: fmt.Sprintf(format, args...)}
	}
	if !c.hasTestFunc(t.pkg.path, "TestBazelInputs") {
		return []Finding{at("package %s has no TestBazelInputs: nothing proves that the test finds its inputs under Bazel (see e2e/harness/testinputs)", t.pkg.path)}, nil
	}
	name := strings.ReplaceAll(t.pkg.path+"_"+t.name, "/", "_")
	dir := filepath.Join(work, name)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	bin, err := c.testBinary(ctx, cfg, work, l, t, log)
	if err != nil {
		return nil, err
	}
	files, testRloc, err := c.testRunfiles(cfg, t, bin)
	if err != nil {
		return nil, err
	}
	runfiles := filepath.Join(dir, "test.runfiles")
	if err := layRunfiles(runfiles, files); err != nil {
		return nil, err
	}
	tmp, shim, used, err := scratchOfTest(dir)
	if err != nil {
		return nil, err
	}
	env := c.bazelTestEnv(runfiles, tmp, shim, l)
	for k, v := range testBuildEnv(cfg, t) {
		expanded, err := c.expandRunfiles(t.pkg.path, v, files)
		if err != nil {
			return []Finding{at("env %s: %v", k, err)}, nil
		}
		env[k] = expanded
	}
	var envList []string
	for _, k := range sortedKeys(env) {
		envList = append(envList, k+"="+env[k])
	}

	fmt.Fprintf(log, "dry run of %s: TestBazelInputs in its runfiles tree\n", l)
	exe := filepath.Join(runfiles, filepath.FromSlash(testRloc))
	out, runErr := runBazelInputs(ctx, exe, filepath.Join(runfiles, "_main", filepath.FromSlash(t.pkg.path)), envList)
	fmt.Fprint(log, out.String())
	var findings []Finding
	if data, err := os.ReadFile(used); err == nil {
		findings = append(findings, at("the test ran commands a Bazel test must not need: %s", strings.Join(strings.Fields(strings.ReplaceAll(string(data), "\n", "; ")), " ")))
	}
	switch {
	case runErr != nil:
		findings = append(findings, at("TestBazelInputs fails in the test's runfiles (%v):\n%s", runErr, tail(out.String(), 20)))
	case !regexp.MustCompile(`(?m)^--- PASS: TestBazelInputs\b`).MatchString(out.String()):
		findings = append(findings, at("TestBazelInputs did not pass (skipped?):\n%s", tail(out.String(), 10)))
	}
	return findings, nil
}

// runBazelInputs runs TestBazelInputs of the test binary exe in dir with
// env alone, for three minutes at most, and returns its output.
func runBazelInputs(ctx context.Context, exe, dir string, env []string) (*bytes.Buffer, error) {
	runCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	run := exec.CommandContext(runCtx, exe, "-test.run=^TestBazelInputs$", "-test.v", "-test.count=1")
	run.Dir = dir
	run.Env = env
	var out bytes.Buffer
	run.Stdout, run.Stderr = &out, &out
	return &out, run.Run()
}

// testBinary returns the compiled binary of the go_test t (label l),
// compiling it unless cfg.Compiled has it.
func (c *checker) testBinary(ctx context.Context, cfg DryRunConfig, work string, l label, t *target, log io.Writer) (string, error) {
	bin := cfg.Compiled[t.pkg.path]
	if bin != "" {
		return bin, nil
	}
	binDir := cfg.BinDir
	if binDir == "" {
		binDir = filepath.Join(work, "bin")
	}
	bin = filepath.Join(binDir, strings.ReplaceAll(t.pkg.path, "/", "_")+".test")
	fmt.Fprintf(log, "dry run of %s: compiling the test binary\n", l)
	build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, "./"+t.pkg.path)
	build.Dir = c.root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go test -c ./%s: %w\n%s", t.pkg.path, err, out)
	}
	if cfg.Compiled != nil {
		cfg.Compiled[t.pkg.path] = bin
	}
	return bin, nil
}

// testRunfiles returns the runfiles of the go_test t, its data (less
// cfg.DropData) and its binary bin, with the binary's runfiles path.
func (c *checker) testRunfiles(cfg DryRunConfig, t *target, bin string) ([]runfile, string, error) {
	var files []runfile
	var problems []string
	for _, d := range stringsOf(t.attrs["data"]) {
		if contains(cfg.DropData, d) {
			continue
		}
		rf, err := c.runfilesOf(t.pkg.path, d, 0)
		if err != nil {
			problems = append(problems, err.Error())
		}
		files = append(files, rf...)
	}
	testRloc := path.Join("_main", t.pkg.path, t.name+"_", t.name)
	files = append(files, runfile{rloc: testRloc, src: bin})
	if len(problems) > 0 {
		return nil, "", fmt.Errorf("laying out the runfiles: %s", strings.Join(problems, "; "))
	}
	return files, testRloc, nil
}

// scratchOfTest makes, in the test's scratch directory dir, its
// TEST_TMPDIR (tmp) and a directory shim of stand-ins for go and git that
// record any run in the file used.
func scratchOfTest(dir string) (tmp, shim, used string, err error) {
	tmp = filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", "", "", err
	}
	shim = filepath.Join(dir, "forbidden-bin")
	used = filepath.Join(dir, "forbidden-used")
	for _, cmd := range []string{"go", "git"} {
		script := fmt.Sprintf("#!/bin/sh\necho \"%s $*\" >> %q\necho 'dry run: the test ran %s' >&2\nexit 127\n", cmd, used, cmd)
		if err := writeExec(filepath.Join(shim, cmd), script); err != nil {
			return "", "", "", err
		}
	}
	return tmp, shim, used, nil
}

// bazelTestEnv is the environment Bazel gives the test l, before its
// BUILD env: the strict PATH (the stand-ins in shim first) and .bazelrc's
// --test_env, and the test variables.
func (c *checker) bazelTestEnv(runfiles, tmp, shim string, l label) map[string]string {
	env := map[string]string{
		"PATH": "/bin:/usr/bin:/usr/local/bin", // Bazel's strict action PATH
	}
	for k, v := range c.bazelrcTestEnv() {
		env[k] = v
	}
	env["PATH"] = shim + ":.:" + env["PATH"]
	env["TEST_SRCDIR"] = runfiles
	env["RUNFILES_DIR"] = runfiles
	env["RUNFILES_MANIFEST_FILE"] = filepath.Join(runfiles, "MANIFEST")
	env["TEST_WORKSPACE"] = "_main"
	env["TEST_TMPDIR"] = tmp
	env["HOME"] = tmp
	env["TEST_TARGET"] = l.String()
	env["GO_TEST_RUN_FROM_BAZEL"] = "1"
	return env
}

// testBuildEnv is the env of the go_test t with cfg.Env's changes, before
// expansion.
func testBuildEnv(cfg DryRunConfig, t *target) map[string]string {
	buildEnv := map[string]string{}
	for k, v := range stringMap(t.attrs["env"]) {
		buildEnv[k] = v
	}
	for k, v := range cfg.Env {
		if v == "" {
			delete(buildEnv, k)
		} else {
			buildEnv[k] = v
		}
	}
	return buildEnv
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func writeExec(p, content string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(content), 0o755)
}

// hasTestFunc reports whether a _test.go file of the package dir declares
// func name(t *testing.T).
func (c *checker) hasTestFunc(dir, name string) bool {
	ents, err := os.ReadDir(filepath.Join(c.root, filepath.FromSlash(dir)))
	if err != nil {
		return false
	}
	re := regexp.MustCompile(`(?m)^func ` + name + `\(`)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), "_test.go") {
			data, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(dir), e.Name()))
			if err == nil && re.Match(data) {
				return true
			}
		}
	}
	return false
}

// runfilesOf returns the runfiles a data entry s (relative to package
// from) contributes, with the paths Bazel gives them.
func (c *checker) runfilesOf(from, s string, depth int) ([]runfile, error) {
	if depth > 20 {
		return nil, fmt.Errorf("%s: too deep", s)
	}
	l, t, why := c.resolve(from, s)
	if why != "" {
		return nil, fmt.Errorf("%s: %s", s, why)
	}
	if l.repo != "" {
		return c.externalRunfiles(l, t, depth)
	}
	rel := path.Join(l.pkg, l.name)
	if t == nil || t.file {
		if !c.fileExists(rel) {
			return nil, fmt.Errorf("%s: no such file", l)
		}
		return []runfile{{rloc: path.Join("_main", rel), src: filepath.Join(c.root, filepath.FromSlash(rel))}}, nil
	}
	switch t.kind {
	case "filegroup":
		var out []runfile
		for _, src := range stringsOf(t.attrs["srcs"]) {
			rf, err := c.runfilesOf(t.pkg.path, src, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, rf...)
		}
		return out, nil
	case "go_binary":
		// rules_go writes <package>/<name>_/<name>.
		return []runfile{{rloc: path.Join("_main", t.pkg.path, t.name+"_", t.name), exec: true}}, nil
	case "run_binary":
		// What isctl bazel-compile writes is a program (`go build`).
		args := stringsOf(t.attrs["args"])
		compiled := len(args) > 0 && args[0] == "bazel-compile"
		var out []runfile
		for _, o := range stringsOf(t.attrs["outs"]) {
			out = append(out, runfile{rloc: path.Join("_main", t.pkg.path, o), exec: compiled})
		}
		for _, d := range stringsOf(t.attrs["out_dirs"]) {
			out = append(out, runfile{rloc: path.Join("_main", t.pkg.path, d), dir: true})
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: the dry run does not know the runfiles of a %s", l, t.kind)
}

// externalRunfiles are the runfiles of a target of a repository the
// checker knows the BUILD file of: stand-ins under its canonical name.
func (c *checker) externalRunfiles(l label, t *target, depth int) ([]runfile, error) {
	p := c.extPkgs[l.repo]
	if p == nil || t == nil {
		return nil, fmt.Errorf("%s: the dry run knows only the repositories of this repository's extensions", l)
	}
	if t.kind == "filegroup" {
		var out []runfile
		for _, src := range stringsOf(t.attrs["srcs"]) {
			if dep, ok := p.targets[src]; ok && !dep.file {
				rf, err := c.externalRunfiles(label{repo: l.repo, name: src}, dep, depth+1)
				if err != nil {
					return nil, err
				}
				out = append(out, rf...)
				continue
			}
			out = append(out, standIn(p, src))
		}
		return out, nil
	}
	if t.file {
		return []runfile{standIn(p, t.name)}, nil
	}
	return nil, fmt.Errorf("%s: the dry run does not know the runfiles of a %s", l, t.kind)
}

// standIn is a stand-in for a file of a fetched repository: executable
// under bin/ (where go_fetch puts binaries), plain otherwise.
func standIn(p *pkg, name string) runfile {
	return runfile{rloc: path.Join(p.canonical, name), exec: strings.HasPrefix(name, "bin/")}
}

// layRunfiles writes the runfiles tree at dir: links, stand-ins and the
// MANIFEST (runfiles path, then the file, per line).
func layRunfiles(dir string, files []runfile) error {
	var manifest strings.Builder
	sort.Slice(files, func(i, j int) bool { return files[i].rloc < files[j].rloc })
	seen := map[string]bool{}
	for _, f := range files {
		if seen[f.rloc] {
			continue
		}
		seen[f.rloc] = true
		p := filepath.Join(dir, filepath.FromSlash(f.rloc))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		var err error
		switch {
		case f.src != "":
			err = os.Symlink(f.src, p)
		case f.dir:
			err = os.MkdirAll(p, 0o755)
		case f.exec:
			err = writeExec(p, "#!/bin/sh\necho 'dry run: a stand-in for a file Bazel builds' >&2\nexit 1\n")
		default:
			err = os.WriteFile(p, []byte("dry run: a stand-in for a file Bazel fetches or builds\n"), 0o644)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(&manifest, "%s %s\n", f.rloc, p)
	}
	return os.WriteFile(filepath.Join(dir, "MANIFEST"), []byte(manifest.String()), 0o644)
}

// expandRunfiles expands $(rlocationpath X) and $(rlocationpaths X) of an
// env value as rules_go does (ctx.expand_location over data), with the
// runfiles paths of the dry run's tree.
func (c *checker) expandRunfiles(from, v string, tree []runfile) (string, error) {
	var err error
	out := expansionRe.ReplaceAllStringFunc(v, func(m string) string {
		sub := expansionRe.FindStringSubmatch(m)
		kind, ref := sub[1], strings.TrimSpace(sub[2])
		if kind != "rlocationpath" && kind != "rlocationpaths" {
			err = fmt.Errorf("$(%s %s): the dry run expands only rlocationpath(s), what a test resolves with the runfiles library", kind, ref)
			return m
		}
		rf, e := c.runfilesOf(from, ref, 0)
		if e != nil {
			err = e
			return m
		}
		var paths []string
		for _, f := range rf {
			paths = append(paths, f.rloc)
		}
		if kind == "rlocationpath" && len(paths) != 1 {
			err = fmt.Errorf("$(rlocationpath %s) stands for %d files", ref, len(paths))
		}
		return strings.Join(paths, " ")
	})
	return out, err
}

// bazelrcTestEnv is the test environment .bazelrc sets for every test
// (`test --test_env=NAME=VALUE`, or NAME alone: the caller's value).
func (c *checker) bazelrcTestEnv() map[string]string {
	env := map[string]string{}
	data, err := os.ReadFile(filepath.Join(c.root, ".bazelrc"))
	if err != nil {
		return env
	}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "test" {
			continue
		}
		for _, f := range fields[1:] {
			v, ok := strings.CutPrefix(f, "--test_env=")
			if !ok {
				continue
			}
			if name, value, ok := strings.Cut(v, "="); ok {
				env[name] = value
			} else if value, ok := os.LookupEnv(v); ok {
				env[v] = value
			}
		}
	}
	return env
}
