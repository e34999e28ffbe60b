package scenario_test

import (
	"testing"

	"github.com/titanml/inference-stack-operator/e2e/harness/testinputs"
	"github.com/titanml/inference-stack-operator/e2e/scenario"
)

// TestBazelInputs: the tests of this package find every input they read
// under Bazel (see testinputs.SkipOutsideBazel).
func TestBazelInputs(t *testing.T) {
	testinputs.SkipOutsideBazel(t)
	if err := scenario.FindInputs(t.Context(), t.Output(), "0.1.0", "0.2.0"); err != nil {
		t.Fatal(err)
	}
}
