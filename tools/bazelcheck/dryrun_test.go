package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

// The test binaries the dry runs of this package's tests compile, shared
// between them, in binDir (removed when the tests end).
var (
	compiled = map[string]string{}
	binDir   string
)

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "bazelcheck-dryrun-bin-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

// dryRunConfig runs the dry run on this repository.
func dryRunConfig(t *testing.T) DryRunConfig {
	return DryRunConfig{
		Config:   Config{Root: "../..", GoModCache: goModCache()},
		Work:     t.TempDir(),
		BinDir:   binDir,
		Compiled: compiled,
		Log:      t.Output(),
	}
}

// TestDryRunE2E runs every end-to-end test's TestBazelInputs the way
// `bazel test //e2e:all` would run the test (see dryrun.go).
func TestDryRunE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles and runs the e2e test binaries")
	}
	findings, err := DryRun(context.Background(), dryRunConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range findings {
		t.Errorf("%s", f)
	}
}

// TestDryRunCatchesPlantedMistakes plants, once each, what the dry run
// exists to catch: a variable the BUILD file does not set, a binary left
// out of a variable, a runfile left out of data, a test that runs the go
// command, a test package without TestBazelInputs.
func TestDryRunCatchesPlantedMistakes(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles and runs test binaries")
	}
	for _, tc := range []struct {
		name   string
		target string
		env    map[string]string
		drop   []string
		want   string
	}{
		{
			name:   "variable not set",
			target: "//e2e/harness/localcluster:localcluster_test",
			env:    map[string]string{"INFERENCE_STACK_E2E_PAUSE_BINARY": ""},
			want:   "INFERENCE_STACK_E2E_PAUSE_BINARY is not set",
		},
		{
			name:   "binary not listed",
			target: "//crds:crds_test",
			env:    map[string]string{"INFERENCE_STACK_E2E_BINARIES": "$(rlocationpaths @e2e_kubernetes//:binaries) $(rlocationpaths @e2e_etcd//:binaries)"},
			want:   "lacks kwok, kwokctl",
		},
		{
			name:   "runfile not in data",
			target: "//operator/internal/controller:controller_test",
			drop:   []string{"//operator:operator_v1"},
			want:   "runfile _main/operator/operator_v1_/operator_v1: file does not exist",
		},
		{
			name:   "runs go",
			target: "//tools/bazelcheck/internal/dryrunfixture:dryrunfixture_test",
			env:    map[string]string{"DRYRUN_FIXTURE_RUNS_GO": "1"},
			want:   "the test ran commands a Bazel test must not need: go version",
		},
		{
			name:   "no TestBazelInputs",
			target: "//e2e/harness/testinputs:testinputs_test",
			want:   "has no TestBazelInputs",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := dryRunConfig(t)
			cfg.Targets, cfg.Env, cfg.DropData = []string{tc.target}, tc.env, tc.drop
			findings, err := DryRun(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			var all []string
			for _, f := range findings {
				all = append(all, f.String())
			}
			if joined := strings.Join(all, "\n"); !strings.Contains(joined, tc.want) {
				t.Errorf("no finding contains %q; findings:\n%s", tc.want, joined)
			}
		})
	}
}
