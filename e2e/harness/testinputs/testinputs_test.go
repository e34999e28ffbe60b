package testinputs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRunfiles lays out a runfiles directory holding files (rlocation path
// -> mode and content) and points the runfiles library at it, as Bazel does
// for a test.
func fakeRunfiles(t *testing.T, files map[string]os.FileMode) string {
	t.Helper()
	dir := t.TempDir()
	for p, mode := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(p), mode); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("RUNFILES_MANIFEST_FILE", "")
	t.Setenv("RUNFILES_DIR", dir)
	t.Setenv("TEST_SRCDIR", dir)
	mu.Lock()
	rf = nil
	mu.Unlock()
	t.Cleanup(func() {
		mu.Lock()
		rf = nil
		mu.Unlock()
	})
	return dir
}

func TestOutsideBazelUnsetMeansGoNative(t *testing.T) {
	t.Setenv("TEST_SRCDIR", "")
	t.Setenv("GO_TEST_RUN_FROM_BAZEL", "")
	t.Setenv(Binaries, "")
	if UnderBazel() {
		t.Fatal("UnderBazel without TEST_SRCDIR")
	}
	if p, ok, err := Paths(Binaries); ok || err != nil || p != nil {
		t.Errorf("Paths = %v, %v, %v; want nothing, so that the caller builds", p, ok, err)
	}
}

func TestUnderBazelUnsetIsAnError(t *testing.T) {
	fakeRunfiles(t, nil)
	t.Setenv(PauseBinary, "")
	if _, ok, err := Path(PauseBinary); err == nil || !strings.Contains(err.Error(), "BUILD file") {
		t.Errorf("Path of an unset variable under Bazel: ok=%v err=%v", ok, err)
	}
}

func TestResolve(t *testing.T) {
	dir := fakeRunfiles(t, map[string]os.FileMode{
		"+ext+e2e_kwok/bin/kwok":    0o755,
		"+ext+e2e_kwok/bin/kwokctl": 0o755,
		"_main/VERSION":             0o644,
		"_main/operator/operator":   0o755,
	})
	t.Setenv(Binaries, "+ext+e2e_kwok/bin/kwok +ext+e2e_kwok/bin/kwokctl")
	found, ok, err := Executables(Binaries)
	if !ok || err != nil || found["kwokctl"] != filepath.Join(dir, "+ext+e2e_kwok/bin/kwokctl") {
		t.Fatalf("Executables = %v, %v, %v", found, ok, err)
	}
	if _, err := Pick(Binaries, found, "kwok", "etcd"); err == nil || !strings.Contains(err.Error(), "lacks etcd") {
		t.Errorf("Pick of a missing binary: %v", err)
	}

	t.Setenv(BuildInputs, "_main/operator/operator _main/VERSION")
	if p, ok, err := Path(BuildInputs); err == nil || !ok {
		t.Errorf("Path of two files = %v, %v, %v", p, ok, err)
	}
	if root, files, ok, err := Tree(BuildInputs, "VERSION"); !ok || err != nil || root != filepath.Join(dir, "_main") || strings.Join(files, " ") != "operator/operator VERSION" {
		t.Errorf("Tree = %v, %v, %v, %v", root, files, ok, err)
	}
	t.Setenv(BuildInputs, "_main/operator/operator")
	if _, _, _, err := Tree(BuildInputs, "VERSION"); err == nil {
		t.Error("Tree without VERSION")
	}
	t.Setenv(BuildInputs, "_main/VERSION +ext+e2e_kwok/bin/kwok")
	if _, _, _, err := Tree(BuildInputs, "VERSION"); err == nil {
		t.Error("Tree with a file of another repository")
	}
	t.Setenv(Binaries, "_main/VERSION")
	if _, _, err := Executables(Binaries); err == nil || !strings.Contains(err.Error(), "not executable") {
		t.Errorf("a data file as a binary: %v", err)
	}

	t.Setenv(OperatorBinaries, "v0=_main/operator/operator v1=_main/operator/missing")
	if _, _, err := Pairs(OperatorBinaries); err == nil || !strings.Contains(err.Error(), "v1") {
		t.Errorf("Pairs with a missing runfile: %v", err)
	}
	t.Setenv(OperatorBinaries, "v0=_main/operator/operator")
	if pairs, ok, err := Pairs(OperatorBinaries); !ok || err != nil || pairs["v0"] == "" {
		t.Errorf("Pairs = %v, %v, %v", pairs, ok, err)
	}
	t.Setenv(OperatorBinaries, "_main/operator/operator")
	if _, _, err := Pairs(OperatorBinaries); err == nil {
		t.Error("a word without KEY= accepted")
	}
}
