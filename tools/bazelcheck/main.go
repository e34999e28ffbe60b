// Command bazelcheck verifies the Bazel files of this repository without
// Bazel, which cannot run where the project is built and tested.
//
// It evaluates MODULE.bazel and every BUILD file with go.starlark.net
// against stubs of the pinned rule sets (stubs.go) and reports: unknown
// load files or symbols, unknown or mistyped attributes, labels that name no
// file or target, repositories not brought in by use_repo, use_repo entries
// not derived from go.mod's direct requirements, $(location)-style
// expansions of something that is not a dependency of the rule, x_defs of
// variables that do not exist, a gazelle:prefix that is not go.mod's module,
// and .bazelrc flags naming no target.
//
//	go run ./tools/bazelcheck [-root .] [-gazelle-version v0.53.0]
//	go run ./tools/bazelcheck repo-config   # gazelle -repo_config for go.mod
//	go run ./tools/bazelcheck -gazelle-version v0.53.0 -gazelle <binary> go-deps
//
// go-deps generates the BUILD files of every Go module the build uses the
// way go_deps does and checks them (see godeps.go).
//
// repo-config prints the go_repository declarations go_deps gives gazelle
// under Bazel (module path -> repository name for every go.mod
// requirement), so that `gazelle -repo_config` resolves imports offline
// exactly as `bazel run //:gazelle` does.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	root := flag.String("root", ".", "repository root")
	gazelleVersion := flag.String("gazelle-version", "", "version of the gazelle binary that generates the BUILD files; must match MODULE.bazel")
	modCache := flag.String("gomodcache", "", "Go module cache (default: go env GOMODCACHE)")
	gazelle := flag.String("gazelle", "", "go-deps: the gazelle binary of -gazelle-version")
	work := flag.String("work", "", "go-deps: scratch directory (default: a temporary one, removed afterwards)")
	flag.Parse()
	cache := *modCache
	if cache == "" {
		cache = goModCache()
	}

	switch flag.Arg(0) {
	case "", "check":
		findings, err := Check(Config{Root: *root, GoModCache: cache, GazelleVersion: *gazelleVersion})
		exitWith(findings, err, "in the Bazel files")
	case "go-deps":
		dir := *work
		if dir == "" {
			tmp, err := os.MkdirTemp("", "bazelcheck-go-deps-")
			if err != nil {
				exitWith(nil, err, "")
			}
			defer os.RemoveAll(tmp)
			dir = tmp
		}
		findings, err := CheckGoDeps(GoDepsConfig{Config: Config{Root: *root, GoModCache: cache, GazelleVersion: *gazelleVersion},
			Work: dir, Gazelle: *gazelle, Log: os.Stderr})
		exitWith(findings, err, "in the BUILD files go_deps would generate")
	case "repo-config":
		data, err := os.ReadFile(filepath.Join(*root, "go.mod"))
		if err == nil {
			var m *goMod
			if m, err = parseGoMod(data); err == nil {
				for _, r := range m.Requires {
					if mod, ok := bazelGoModules[r.Path]; ok {
						// Provided by a bazel_dep, not by go_deps: gazelle
						// labels its packages with the module's apparent
						// name from MODULE.bazel (e.g. @rules_go//go/runfiles).
						fmt.Printf("go_repository(name = %q, importpath = %q, module_name = %q)\n", mod, r.Path, mod)
						continue
					}
					fmt.Printf("go_repository(name = %q, importpath = %q)\n", repoName(r.Path), r.Path)
				}
				return
			}
		}
		fmt.Fprintln(os.Stderr, "bazelcheck:", err)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "bazelcheck: unknown command %q (want check or repo-config)\n", flag.Arg(0))
		os.Exit(2)
	}
}

// exitWith prints the findings and exits unless there are none. It does
// not return on an error or findings; deferred calls of the caller do not
// run then, which leaves a scratch directory for inspection.
func exitWith(findings []Finding, err error, where string) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bazelcheck:", err)
		os.Exit(2)
	}
	for _, f := range findings {
		fmt.Println(f)
	}
	if len(findings) > 0 {
		fmt.Fprintf(os.Stderr, "bazelcheck: %d mistake(s) %s\n", len(findings), where)
		os.Exit(1)
	}
}

func goModCache() string {
	if d := os.Getenv("GOMODCACHE"); d != "" {
		return d
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
