package controller_test

import (
	"testing"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/testinputs"
)

// TestBazelInputs: the tests of this package find every input they read
// under Bazel (see testinputs.SkipOutsideBazel).
func TestBazelInputs(t *testing.T) {
	testinputs.SkipOutsideBazel(t)
	if _, err := localcluster.EnsureBinaries(t.Context(), t.Output()); err != nil {
		t.Error(err)
	}
	for _, major := range []string{"v0", "v1"} {
		if _, err := builds.Binary(t.Context(), major); err != nil {
			t.Error(err)
		}
	}
}
