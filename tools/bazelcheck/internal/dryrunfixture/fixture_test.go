package dryrunfixture

import (
	"os"
	"os/exec"
	"testing"

	"github.com/titanml/inference-stack-operator/e2e/harness/testinputs"
)

func TestBazelInputs(t *testing.T) {
	testinputs.SkipOutsideBazel(t)
	if os.Getenv("DRYRUN_FIXTURE_RUNS_GO") == "1" {
		// The mistake: building an input at test time.
		if out, err := exec.Command("go", "version").CombinedOutput(); err != nil {
			t.Fatalf("go version: %v\n%s", err, out)
		}
	}
	if _, _, err := testinputs.Path(testinputs.PauseBinary); err != nil {
		t.Fatal(err)
	}
}
