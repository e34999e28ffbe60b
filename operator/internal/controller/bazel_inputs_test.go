package controller_test

import (
	"testing"

	"github.com/titanml/inference-stack-operator/e2e/localcluster"
	"github.com/titanml/inference-stack-operator/internal/testinputs"
)

// TestBazelInputs proves, under `bazel test` and under the dry run of
// tools/bazelcheck (which runs this test binary the way Bazel does: a
// runfiles tree built from the BUILD file's data, its env, the test PATH of
// .bazelrc, no go or git command, no checkout), that the tests of this
// package find every input they read. Outside Bazel it is skipped: the
// inputs are then built or read from the source tree.
func TestBazelInputs(t *testing.T) {
	if !testinputs.UnderBazel() {
		t.Skip("only under bazel test (and the dry run of tools/bazelcheck)")
	}
	if _, err := localcluster.EnsureBinaries(t.Context(), t.Output()); err != nil {
		t.Error(err)
	}
	for _, major := range []string{"v0", "v1"} {
		if _, err := builds.Binary(t.Context(), major); err != nil {
			t.Error(err)
		}
	}
}
