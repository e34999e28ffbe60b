package migrate_test

import (
	"os"
	"testing"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/testinputs"
)

// TestBazelInputs: the tests of this package find every input they read
// under Bazel (see testinputs.SkipOutsideBazel): the cluster's binaries,
// the operator and the testdata read by relative paths.
func TestBazelInputs(t *testing.T) {
	testinputs.SkipOutsideBazel(t)
	if _, err := localcluster.EnsureBinaries(t.Context(), t.Output()); err != nil {
		t.Error(err)
	}
	operatorBinary(t)
	for _, f := range []string{"testdata/modelorchestras-crd.yaml", "testdata/model-orchestra/Chart.yaml"} {
		if _, err := os.Stat(f); err != nil {
			t.Error(err)
		}
	}
}
