// Package testinputs finds the files a test needs when `bazel test` runs it.
//
// Under Bazel a test runs in its runfiles tree with a strict environment: no
// go command, no checkout of this repository, no cache filled beforehand.
// Everything it needs (the local cluster's and OLM's binaries, the operator
// binaries, build inputs) is a runfile that its BUILD file lists in `data`
// and names in `env` with $(rlocationpath ...) or $(rlocationpaths ...);
// this package resolves those variables with the runfiles library. Outside
// Bazel (`go test`, `make test`) the variables are unset and the callers
// take their Go-native path (building into the binary cache, `go build`).
//
// Under Bazel an unset variable is an error, never a fallback: a test whose
// BUILD file forgot an input fails saying so instead of trying to build it
// with a go command that is not there.
package testinputs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/bazelbuild/rules_go/go/runfiles"
)

// The variables the BUILD files set (see e2e/BUILD.bazel).
const (
	// Binaries lists executables by $(rlocationpaths): the local cluster's
	// (kube-apiserver, etcd, kwok, ...), the real node's (kubelet,
	// kube-proxy), OLM's (catalogd, operator-controller; OLM v0's olm,
	// catalog, cpb), the catalog image's (opm, grpc_health_probe) and the
	// other programs the tests run (helm-operator, cosign, cp), each found
	// by its file name.
	Binaries = "INFERENCE_STACK_E2E_BINARIES"
	// OLMManifest is manifests/standard.yaml of the pinned OLM release.
	OLMManifest = "INFERENCE_STACK_E2E_OLM_MANIFEST"
	// OLMv0Files are the files of the pinned OLM v0 module the harness
	// reads: its Helm chart and CRDs (deploy/chart).
	OLMv0Files = "INFERENCE_STACK_E2E_OLM_V0_FILES"
	// PauseBinary is the real node's pause program.
	PauseBinary = "INFERENCE_STACK_E2E_PAUSE_BINARY"
	// OperatorBinaries lists operator binaries as KEY=PATH pairs: the
	// version (or major) each was stamped with, and its $(rlocationpath).
	OperatorBinaries = "INFERENCE_STACK_E2E_OPERATOR_BINARIES"
	// BuildInputs lists what the image build and a release read besides
	// Go code (//:release_inputs: VERSION, the catalog template and
	// released entries, the CSV base, the operator's RBAC, the CRD and the
	// accepted CRD changes) and what the test changes; the directory of its
	// VERSION file is their root in the runfiles tree.
	BuildInputs = "INFERENCE_STACK_E2E_BUILD_INPUTS"
)

// UnderBazel reports whether the test was started by `bazel test`, which
// sets TEST_SRCDIR (rules_go's test runner also sets
// GO_TEST_RUN_FROM_BAZEL).
func UnderBazel() bool {
	return os.Getenv("TEST_SRCDIR") != "" || os.Getenv("GO_TEST_RUN_FROM_BAZEL") == "1"
}

// SkipOutsideBazel skips t unless `bazel test` runs it. It opens each e2e
// package's TestBazelInputs, which proves, under `bazel test` and under
// the dry run of tools/bazelcheck (which runs the test binary the way
// Bazel does: a runfiles tree built from the BUILD file's data, its env,
// the test PATH of .bazelrc, no go or git command, no checkout), that the
// package's tests find every input they read. Outside Bazel there is
// nothing to prove: the inputs are then built or read from the source tree.
func SkipOutsideBazel(t testing.TB) {
	t.Helper()
	if !UnderBazel() {
		t.Skip("only under bazel test (and the dry run of tools/bazelcheck)")
	}
}

var (
	mu sync.Mutex
	rf *runfiles.Runfiles // created on first use
)

func resolve(rlocation string) (string, error) {
	mu.Lock()
	if rf == nil {
		r, err := runfiles.New()
		if err != nil {
			mu.Unlock()
			return "", fmt.Errorf("finding the runfiles: %w", err)
		}
		rf = r
	}
	r := rf
	mu.Unlock()
	p, err := r.Rlocation(rlocation)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("runfile %s: %w", rlocation, err)
	}
	return p, nil
}

// values returns the words of the variable name; ok is false outside Bazel
// when it is unset.
func values(name string) (words []string, ok bool, err error) {
	v, set := os.LookupEnv(name)
	if !set || strings.TrimSpace(v) == "" {
		if UnderBazel() {
			return nil, false, fmt.Errorf("%s is not set: under `bazel test` the test's BUILD file must list the input in data and name it in env", name)
		}
		return nil, false, nil
	}
	return strings.Fields(v), true, nil
}

// Paths resolves the runfiles listed in the variable name. ok is false
// (and err nil) outside Bazel when the variable is unset.
func Paths(name string) (paths []string, ok bool, err error) {
	words, ok, err := values(name)
	if !ok {
		return nil, false, err
	}
	var errs []error
	for _, w := range words {
		p, err := resolve(w)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		paths = append(paths, p)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, true, err
	}
	return paths, true, nil
}

// Path resolves the single runfile named by the variable name (see Paths).
func Path(name string) (string, bool, error) {
	paths, ok, err := Paths(name)
	if !ok || err != nil {
		return "", ok, err
	}
	if len(paths) != 1 {
		return "", true, fmt.Errorf("%s names %d files, want one", name, len(paths))
	}
	return paths[0], true, nil
}

// Executables resolves the variable name as Paths does and indexes the
// files by their base name, which must be unique; each must be executable.
func Executables(name string) (map[string]string, bool, error) {
	paths, ok, err := Paths(name)
	if !ok || err != nil {
		return nil, ok, err
	}
	out := map[string]string{}
	for _, p := range paths {
		base := filepath.Base(p)
		if prev, dup := out[base]; dup {
			return nil, true, fmt.Errorf("%s: two files named %s (%s, %s)", name, base, prev, p)
		}
		st, err := os.Stat(p)
		if err != nil {
			return nil, true, fmt.Errorf("%s: %w", name, err)
		}
		if st.Mode()&0o111 == 0 {
			return nil, true, fmt.Errorf("%s: %s is not executable", name, p)
		}
		out[base] = p
	}
	return out, true, nil
}

// Tree resolves the variable name as Paths does, as a tree of files: root
// is the directory holding its file called marker (at the top of a
// repository: e.g. VERSION), files the paths of the listed files under
// root, relative and slash-separated (every file must be under it).
func Tree(name, marker string) (root string, files []string, ok bool, err error) {
	paths, ok, err := Paths(name)
	if !ok || err != nil {
		return "", nil, ok, err
	}
	words, _, _ := values(name)
	prefix := ""
	for i, w := range words {
		if w == marker || strings.HasSuffix(w, "/"+marker) && strings.Count(w, "/") == 1 {
			root, prefix = filepath.Dir(paths[i]), strings.TrimSuffix(w, marker)
			break
		}
	}
	if root == "" {
		return "", nil, true, fmt.Errorf("%s lists no %s at the top of a repository", name, marker)
	}
	for _, w := range words {
		rel, ok := strings.CutPrefix(w, prefix)
		if !ok {
			return "", nil, true, fmt.Errorf("%s: %s is not in the repository of its %s", name, w, marker)
		}
		files = append(files, rel)
	}
	return root, files, true, nil
}

// Pick returns the files of want from found (Executables' result), or an
// error naming those missing.
func Pick(name string, found map[string]string, want ...string) ([]string, error) {
	var out, missing []string
	for _, w := range want {
		p, ok := found[w]
		if !ok {
			missing = append(missing, w)
			continue
		}
		out = append(out, p)
	}
	if len(missing) > 0 {
		var have []string
		for k := range found {
			have = append(have, k)
		}
		sort.Strings(have)
		return nil, fmt.Errorf("%s lacks %s (it has %s): add the repository's binaries to the test's data and env",
			name, strings.Join(missing, ", "), strings.Join(have, ", "))
	}
	return out, nil
}

// Pairs resolves the variable name, a list of KEY=RLOCATIONPATH words, into
// KEY -> path (see Paths).
func Pairs(name string) (map[string]string, bool, error) {
	words, ok, err := values(name)
	if !ok {
		return nil, false, err
	}
	out := map[string]string{}
	var errs []error
	for _, w := range words {
		k, v, found := strings.Cut(w, "=")
		if !found || k == "" || v == "" {
			errs = append(errs, fmt.Errorf("%s: %q is not KEY=PATH", name, w))
			continue
		}
		if _, dup := out[k]; dup {
			errs = append(errs, fmt.Errorf("%s: %s given twice", name, k))
			continue
		}
		p, err := resolve(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %w", name, k, err))
			continue
		}
		out[k] = p
	}
	if err := errors.Join(errs...); err != nil {
		return nil, true, err
	}
	return out, true, nil
}
