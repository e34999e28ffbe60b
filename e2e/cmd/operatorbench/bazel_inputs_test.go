package main

import (
	"testing"

	"github.com/titanml/inference-stack-operator/e2e/bench/operatorbench"
	"github.com/titanml/inference-stack-operator/e2e/harness/testinputs"
)

// TestBazelInputs: under `bazel test` (and tools/bazelcheck's dry run of
// it) the smoke run finds the cluster's binaries, the stock helm-operator
// and this operator as runfiles, and needs no checkout for its report's
// commit; see e2e/harness/testinputs.
func TestBazelInputs(t *testing.T) {
	testinputs.SkipOutsideBazel(t)
	if _, err := operatorbench.EnsureBinaries(t.Context(), t.TempDir(), t.Output()); err != nil {
		t.Error(err)
	}
	if _, err := operatorbench.SourceCommit(t.Context()); err != nil {
		t.Error(err)
	}
}
