package catalogchart

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/olmlocal"
	"github.com/titanml/inference-stack-operator/e2e/harness/olmv0local"
	"github.com/titanml/inference-stack-operator/e2e/harness/testinputs"
)

// TestBazelInputs: the tests of this package find every input they read
// under Bazel (see testinputs.SkipOutsideBazel).
func TestBazelInputs(t *testing.T) {
	testinputs.SkipOutsideBazel(t)
	if _, err := localcluster.EnsureBinaries(t.Context(), t.Output()); err != nil {
		t.Error(err)
	}
	if dir, err := olmlocal.ModuleDir(t.Context()); err != nil {
		t.Error(err)
	} else if err := olmlocal.FindManifest(dir); err != nil {
		t.Error(err)
	}
	// OLM v0's CRDs, for the server-side dry runs of the olm: v0 objects.
	if dir, err := olmv0local.ModuleDir(t.Context()); err != nil {
		t.Error(err)
	} else if err := olmv0local.FindCRDs(dir); err != nil {
		t.Error(err)
	}
	// The chart directory (linted as a directory) and the operator's RBAC,
	// read by relative paths from the package directory.
	for _, f := range []string{"Chart.yaml", "values.yaml", "README.md", filepath.Join("templates", "clustercatalog.yaml"), filepath.Join("..", "..", "operator", "rbac", "role.yaml")} {
		if _, err := os.Stat(f); err != nil {
			t.Error(err)
		}
	}
}
