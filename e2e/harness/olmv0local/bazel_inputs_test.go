package olmv0local

import (
	"testing"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/testinputs"
)

// TestBazelInputs: the tests of this package find every input they read
// under Bazel (see testinputs.SkipOutsideBazel): the local cluster's and
// the real node's binaries, and OLM v0's CRDs.
func TestBazelInputs(t *testing.T) {
	testinputs.SkipOutsideBazel(t)
	if err := localcluster.FindInputs(t.Context(), t.Output()); err != nil {
		t.Fatal(err)
	}
	dir, err := ModuleDir(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := FindCRDs(dir); err != nil {
		t.Fatal(err)
	}
}
