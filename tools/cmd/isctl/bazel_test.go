package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/internal/build"
	"github.com/titanml/inference-stack-operator/internal/bundle"
	"github.com/titanml/inference-stack-operator/internal/catalog"
	"github.com/titanml/inference-stack-operator/internal/oci"
)

// standInTree writes a source tree with the repository's real bundle and
// catalog inputs and a tiny operator main package with the real
// version-stamping variables (so that compiling takes a second), and
// returns its root and its files (relative, sorted).
func standInTree(t *testing.T) (string, []string) {
	t.Helper()
	root := t.TempDir()
	repo, err := findRoot()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"go.mod":  "module " + inferencestack.ModulePath + "\n\ngo 1.26\n",
		"VERSION": "0.1.0\n",
		"operator/main.go": "package main\n\nimport (\n\t\"fmt\"\n\n\t\"" + inferencestack.ModulePath +
			"/operator/internal/version\"\n)\n\nfunc main() { fmt.Println(version.Version, version.GitCommit) }\n",
		"operator/internal/version/version.go": "package version\n\nvar (\n\tVersion   = \"\"\n\tGitCommit = \"unknown\"\n)\n",
		// Stand-ins for the catalog image's programs (see useStandInCatalogPrograms).
		"opm/main.go":         "package main\n\nfunc main() { println(\"opm stand-in\") }\n",
		"healthprobe/main.go": "package main\n\nfunc main() { println(\"probe stand-in\") }\n",
	}
	for _, p := range []string{bundle.BaseCSVPath, bundle.OperatorRBACPath, catalog.TemplatePath} {
		data, err := os.ReadFile(filepath.Join(repo, p))
		if err != nil {
			t.Fatal(err)
		}
		files[p] = string(data)
	}
	var names []string
	for p, c := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, p)
	}
	sort.Strings(names)
	return root, names
}

// useStandInCatalogPrograms makes isctl build the stand-ins of
// standInTree as the catalog image's opm and health probe.
func useStandInCatalogPrograms(t *testing.T) {
	saved := catalogPackages
	catalogPackages.opm, catalogPackages.healthProbe = "./opm", "./healthprobe"
	t.Cleanup(func() { catalogPackages = saved })
}

func layoutDigest(t *testing.T, dir string) string {
	t.Helper()
	top, err := oci.ReadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	return top.Descriptor.Digest.String()
}

// TestBazelStepsReproduceTheGoNativeBuild runs the two Bazel steps the way
// the BUILD files do (inputs relative to the working directory, offline
// module proxy, the go command given by path, the revision from Bazel's
// stamp status file) and checks that the three images have the digests
// `isctl build` gives for the same tree and revision.
func TestBazelStepsReproduceTheGoNativeBuild(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	root, inputs := standInTree(t)
	useStandInCatalogPrograms(t)
	const rev = "0123456789abcdef0123456789abcdef01234567"
	ctx := context.Background()
	var out bytes.Buffer

	native := filepath.Join(t.TempDir(), "out")
	if err := run(ctx, []string{"build", "-root", root, "-revision", rev, "-out", native}, &out); err != nil {
		t.Fatalf("isctl build: %v\n%s", err, out.String())
	}
	want, err := build.ReadDigests(native)
	if err != nil {
		t.Fatal(err)
	}

	scratch := t.TempDir()
	proxyRoot := filepath.Join(scratch, "proxy", "ROOT") // the stand-in needs no module
	if err := os.MkdirAll(filepath.Dir(proxyRoot), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(proxyRoot, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	status := filepath.Join(scratch, "stable-status.txt")
	if err := os.WriteFile(status, []byte("BUILD_EMBED_LABEL \nSTABLE_GIT_COMMIT "+rev+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BAZEL_STABLE_STATUS_FILE", status)
	t.Chdir(root)
	var binFlags []string
	// The operator's steps are given what //operator's rules give them:
	// its sources and its stamp inputs (VERSION), no catalog program.
	operatorInputs := []string{"VERSION", "go.mod", "operator/main.go", "operator/internal/version/version.go"}
	for _, plat := range []string{"linux/amd64", "linux/arm64"} {
		bin := filepath.Join(scratch, "bin", strings.ReplaceAll(plat, "/", "_"), "operator")
		args := append([]string{"bazel-compile", "-platform", plat, "-go", goCmd, "-goproxy", proxyRoot, "-out", bin}, operatorInputs...)
		if err := run(ctx, args, &out); err != nil {
			t.Fatalf("isctl %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		binFlags = append(binFlags, "-binary", plat+"="+bin)
	}
	var catalogFlags []string
	for _, program := range build.CatalogPrograms {
		bin := filepath.Join(scratch, "bin", "catalog", program)
		args := append([]string{"bazel-compile", "-program", program, "-platform", "linux/amd64", "-go", goCmd, "-goproxy", proxyRoot, "-out", bin}, inputs...)
		if err := run(ctx, args, &out); err != nil {
			t.Fatalf("isctl %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		catalogFlags = append(catalogFlags, "-catalog-binary", program+"="+bin)
	}
	for _, image := range build.Names {
		dir := filepath.Join(scratch, "images", image)
		// As the BUILD files give them: the operator image its stamp
		// inputs alone, the catalog image its programs.
		flags, files := binFlags, inputs
		switch image {
		case build.Operator:
			files = []string{"VERSION"}
		case build.Catalog:
			flags = append(append([]string(nil), binFlags...), catalogFlags...)
		}
		args := append(append([]string{"bazel-image", "-image", image, "-out", dir}, flags...), files...)
		if err := run(ctx, args, &out); err != nil {
			t.Fatalf("isctl %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		if got := layoutDigest(t, dir); got != want[image].Digest {
			t.Errorf("%s: the Bazel steps give %s, isctl build %s", image, got, want[image])
		}
	}

	// Without the stamp the revision is "unknown": a different image.
	t.Setenv("BAZEL_STABLE_STATUS_FILE", "")
	dir := filepath.Join(scratch, "unstamped")
	args := append(append([]string{"bazel-image", "-image", "operator", "-out", dir}, binFlags...), inputs...)
	if err := run(ctx, args, &out); err != nil {
		t.Fatal(err)
	}
	if layoutDigest(t, dir) == want[build.Operator].Digest {
		t.Error("an unstamped image has the digest of the stamped build")
	}
}

// TestBazelCompileReplace: -replace builds a changed input without
// editing the source (what the OLM scenario's 0.2.0 is compiled with), and
// refuses a path that is not an input.
func TestBazelCompileReplace(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	root, inputs := standInTree(t)
	scratch := t.TempDir()
	proxyRoot := filepath.Join(scratch, "ROOT")
	if err := os.WriteFile(proxyRoot, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	changed := filepath.Join(scratch, "main.go")
	if err := os.WriteFile(changed, []byte("package main\n\nfunc main() { println(\"replaced\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	var out bytes.Buffer
	bin := filepath.Join(scratch, "operator")
	plat := "linux/" + runtime.GOARCH
	args := append([]string{"bazel-compile", "-platform", plat, "-go", goCmd, "-goproxy", proxyRoot, "-out", bin,
		"-replace", "operator/main.go=" + changed}, inputs...)
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if got, err := exec.Command(bin).CombinedOutput(); err != nil || !strings.Contains(string(got), "replaced") {
		t.Errorf("the binary built with -replace says %q (%v), want the replaced main", got, err)
	}
	if data, _ := os.ReadFile("operator/main.go"); strings.Contains(string(data), "replaced") {
		t.Error("-replace edited the source")
	}
	args = append([]string{"bazel-compile", "-platform", plat, "-go", goCmd, "-goproxy", proxyRoot, "-out", bin,
		"-replace", "not/an/input.go=" + changed}, inputs...)
	if err := run(context.Background(), args, &out); err == nil || !strings.Contains(err.Error(), "not a build input") {
		t.Errorf("-replace of a path that is no input: %v", err)
	}
}

func TestInputTreeRefusesPathsOutsideTheWorkingDirectory(t *testing.T) {
	for _, bad := range []string{"../go.mod", "/etc/passwd", "a/../../b"} {
		if dir, err := inputTree([]string{bad}); err == nil {
			os.RemoveAll(dir)
			t.Errorf("%s accepted", bad)
		}
	}
	if _, err := inputTree(nil); err == nil {
		t.Error("no inputs accepted")
	}
}
