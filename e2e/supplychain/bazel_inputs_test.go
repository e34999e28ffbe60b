package supplychain

import (
	"testing"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/testinputs"
)

// TestBazelInputs: under `bazel test` (and tools/bazelcheck's dry run of
// it) the cosign CLI is a runfile; see e2e/harness/testinputs.
func TestBazelInputs(t *testing.T) {
	testinputs.SkipOutsideBazel(t)
	if _, err := localcluster.EnsureOutputs(t.Context(), "cosign", "cosign", t.Output()); err != nil {
		t.Error(err)
	}
}
