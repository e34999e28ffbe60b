package crds_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/testinputs"
	"github.com/titanml/inference-stack-operator/internal/crdcompat"
)

// TestBazelInputs: the tests of this package find every input they read
// under Bazel (see testinputs.SkipOutsideBazel).
func TestBazelInputs(t *testing.T) {
	testinputs.SkipOutsideBazel(t)
	if _, err := localcluster.EnsureBinaries(t.Context(), t.Output()); err != nil {
		t.Error(err)
	}
	// `kubectl apply -f .` of the package directory applies the CRD file.
	if _, err := os.Stat(filepath.Base(crdcompat.CRDPath)); err != nil {
		t.Error(err)
	}
}
