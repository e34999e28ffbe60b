package olmlocal

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/titanml/inference-stack-operator/e2e/localcluster"
)

// The pinned OLM v1 release. v1.5.1 is the newest operator-controller that
// builds from the Go module proxy reachable here (v1.10+ need
// pkg.package-operator.run/boxcutter, which the proxy refuses).
const (
	Module  = "github.com/operator-framework/operator-controller"
	Version = "v1.5.1"
	// ModuleSum is the h1: hash of the module zip. The checksum database
	// answers 404 for this module here, so it is exempted from it
	// (GONOSUMDB) and pinned here instead; every dependency is still
	// verified by the module's own go.sum.
	ModuleSum = "h1:J3xdRHzh9ajuKt/i1fWxoOLUf3kMpaOnGf1XNZ6+Klg="
)

// ModuleDir downloads the pinned operator-controller module (a no-op when
// it is in the module cache), checks its hash against ModuleSum and returns
// its read-only directory: the source of the binaries and of the
// manifests/ the harness applies.
func ModuleDir(ctx context.Context) (string, error) {
	return DownloadModule(ctx, Module, Version, ModuleSum)
}

// DownloadModule downloads module@version with `go mod download` (a no-op
// when it is in the module cache), outside any module and with only this
// module exempt from the checksum database, checks the module zip's hash
// against sum and returns the module's read-only directory. For modules
// whose checksum-database lookup fails here: sum pins what the database
// would have vouched for, and the module's own go.sum still verifies every
// dependency a build of it downloads.
func DownloadModule(ctx context.Context, module, version, sum string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is needed to fetch %s: %w", module, err)
	}
	cmd := exec.CommandContext(ctx, goBin, "mod", "download", "-json", module+"@"+version)
	// Outside any module (the repository's go.mod must not matter), with
	// only this module exempt from the checksum database.
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(),
		"GOFLAGS=-mod=mod",
		"GOWORK=off",
		"GONOSUMDB="+strings.TrimPrefix(os.Getenv("GONOSUMDB")+","+module, ","),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var info struct {
		Dir   string
		Sum   string
		Error string
	}
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %v (%v)\n%s%s", module, version, runErr, err, stdout.String(), stderr.String())
	}
	if info.Error != "" || runErr != nil {
		return "", fmt.Errorf("go mod download %s@%s: %v %s\n%s", module, version, runErr, info.Error, stderr.String())
	}
	if info.Sum != sum {
		return "", fmt.Errorf("%s@%s has hash %s, want the pinned %s: refusing to build it", module, version, info.Sum, sum)
	}
	return info.Dir, nil
}

// Binaries are the paths of the built OLM controllers.
type Binaries struct {
	Catalogd           string
	OperatorController string
	// ModuleDir is the module source they were built from.
	ModuleDir string
}

// EnsureBinaries returns catalogd and operator-controller at Version,
// building them inside the downloaded module (with its own go.mod and
// go.sum, CGO off, -trimpath, tag containers_image_openpgp) the first time
// on a machine (2-3.5 min on 2 cores) and caching them by version and
// build flags under localcluster.CacheDir()/bin. Progress goes to log.
func EnsureBinaries(ctx context.Context, log io.Writer) (*Binaries, error) {
	dir, err := ModuleDir(ctx)
	if err != nil {
		return nil, err
	}
	b := localcluster.CachedBuild{
		Name:      "olm",
		Version:   Version,
		ModuleDir: dir,
		Packages:  []string{"./cmd/catalogd", "./cmd/operator-controller"},
		Outputs:   []string{"catalogd", "operator-controller"},
		// containers/image otherwise needs gpgme through cgo.
		Tags:     []string{"containers_image_openpgp"},
		Estimate: "3 min on 2 cores",
	}
	out, err := b.Ensure(ctx, log)
	if err != nil {
		return nil, err
	}
	return &Binaries{
		Catalogd:           filepath.Join(out, "catalogd"),
		OperatorController: filepath.Join(out, "operator-controller"),
		ModuleDir:          dir,
	}, nil
}

// manifest reads a file of the module's manifests/ directory.
func manifest(moduleDir, name string) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(moduleDir, "manifests", name))
	if err != nil {
		return nil, fmt.Errorf("%s@%s manifests: %w", Module, Version, err)
	}
	if !strings.Contains(string(data), "olm.operatorframework.io") {
		return nil, fmt.Errorf("%s does not look like OLM's manifests", name)
	}
	return data, nil
}
