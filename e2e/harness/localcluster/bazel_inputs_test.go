package localcluster_test

import (
	"testing"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/testinputs"
)

// TestBazelInputs: the tests of this package find every input they read
// under Bazel (see testinputs.SkipOutsideBazel).
func TestBazelInputs(t *testing.T) {
	testinputs.SkipOutsideBazel(t)
	if err := localcluster.FindInputs(t.Context(), t.Output()); err != nil {
		t.Fatal(err)
	}
}
