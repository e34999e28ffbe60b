package supplychain

import (
	"testing"

	"github.com/titanml/inference-stack-operator/e2e/localcluster"
	"github.com/titanml/inference-stack-operator/internal/testinputs"
)

// TestBazelInputs: under `bazel test` (and tools/bazelcheck's dry run of
// it) the cosign CLI is a runfile; see internal/testinputs.
func TestBazelInputs(t *testing.T) {
	testinputs.SkipOutsideBazel(t)
	if _, err := localcluster.EnsureOutputs(t.Context(), "cosign", "cosign", t.Output()); err != nil {
		t.Error(err)
	}
}
