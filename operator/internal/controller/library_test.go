package controller_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
)

// TestLibraryDefaults pins the helm-operator-plugins version whose
// SetupWithManager defaults the controller wiring takes over. When the
// library is upgraded this fails: re-read its SetupWithManager, addDefaults
// and setupWatches and carry over what changed, then move the pin. Taken
// over from v0.9.1:
//   - the stack's spec is the values (DefaultTranslator), unmapped
//     (DefaultMapper), override values applied first;
//   - 30s wait for an uninstalled stack to disappear
//     (DefaultWaitForDeletionTimeout);
//   - the controller is named "<lowercase kind>-controller";
//   - the GVK is registered in the scheme as Unstructured;
//   - watches: the primary kind, release Secrets by controller owner
//     reference, and each kind of a release by controller owner reference,
//     started by a post-release hook (creations ignored, deletions and
//     updates beyond status let through).
func TestLibraryDefaults(t *testing.T) {
	const module, pinned = "github.com/operator-framework/helm-operator-plugins", "v0.9.1"
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	// Test binaries carry no dependency versions, so go.mod is the record.
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == module {
			if f[1] != pinned {
				t.Fatalf("%s is %s; the controller wiring takes over the defaults of %s: re-check them (see this test's comment)", module, f[1], pinned)
			}
			return
		}
	}
	t.Fatalf("go.mod does not require %s", module)
}
