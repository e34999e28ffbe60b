package inferencestack_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestPlainGoCommands runs what a newcomer, an editor's gopls or any tool
// that knows nothing of this repository runs first, with no build tags and
// cgo off (as on a machine without a C compiler): `go build ./...` always,
// and `go vet ./...` unless -short. Only the test comparing the catalog
// renderer with opm's needs a tag (containers_image_openpgp, set by `make
// test`); everything else must build without it.
func TestPlainGoCommands(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	if _, err := os.Stat("go.mod"); err != nil {
		t.Skip("not run from the module's source tree (Bazel runs tests in their runfiles)")
	}
	commands := [][]string{{"build", "./..."}}
	if !testing.Short() {
		commands = append(commands, []string{"vet", "./..."})
	}
	env := plainEnv(os.Environ())
	for _, args := range commands {
		cmd := exec.Command("go", args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("go %s without build tags: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// plainEnv is environ with cgo off, no workspace, and GOFLAGS without any
// -tags the caller (e.g. `make test`) may have set.
func plainEnv(environ []string) []string {
	out := []string{"CGO_ENABLED=0", "GOWORK=off"}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "CGO_ENABLED", "GOWORK":
			continue
		case "GOFLAGS":
			var keep []string
			for _, f := range strings.Fields(v) {
				if !strings.HasPrefix(strings.TrimLeft(f, "-"), "tags") {
					keep = append(keep, f)
				}
			}
			kv = "GOFLAGS=" + strings.Join(keep, " ")
		}
		out = append(out, kv)
	}
	return out
}
