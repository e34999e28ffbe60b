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

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/testinputs"
)

// The pinned OLM v1 release. v1.5.1 is the newest operator-controller that
// builds from the Go module proxy reachable here (v1.10+ need
// pkg.package-operator.run/boxcutter, which the proxy refuses). The "olm"
// source of e2e/harness/localcluster/binaries.json repeats these (a test checks).
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
// manifests/ the harness applies. Under Bazel the module was fetched and
// checked by the e2e_olm repository (tools/bazel/go_fetch.bzl) and the
// directory is the one holding the manifests/standard.yaml runfile
// (testinputs.OLMManifest).
func ModuleDir(ctx context.Context) (string, error) {
	if manifest, ok, err := testinputs.Path(testinputs.OLMManifest); ok || err != nil {
		if err != nil {
			return "", err
		}
		if filepath.Base(filepath.Dir(manifest)) != "manifests" {
			return "", fmt.Errorf("%s is %s, not a file of a manifests/ directory", testinputs.OLMManifest, manifest)
		}
		return filepath.Dir(filepath.Dir(manifest)), nil
	}
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
//
// The build is the "olm" source of e2e/harness/localcluster/binaries.json (the tag
// containers_image_openpgp: containers/image otherwise needs gpgme through
// cgo). Under Bazel the binaries are runfiles (testinputs.Binaries).
func EnsureBinaries(ctx context.Context, log io.Writer) (*Binaries, error) {
	dir, err := ModuleDir(ctx)
	if err != nil {
		return nil, err
	}
	if found, ok, err := testinputs.Executables(testinputs.Binaries); ok || err != nil {
		if err != nil {
			return nil, err
		}
		p, err := testinputs.Pick(testinputs.Binaries, found, "catalogd", "operator-controller")
		if err != nil {
			return nil, err
		}
		return &Binaries{Catalogd: p[0], OperatorController: p[1], ModuleDir: dir}, nil
	}
	_, spec, err := localcluster.Source("olm", "olm")
	if err != nil {
		return nil, err
	}
	out, err := spec.Cached(dir).Ensure(ctx, log)
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

// FindInputs finds what OLM on a local cluster needs besides the cluster's
// own inputs (localcluster.FindInputs): the two controllers and the
// module's release manifest. See localcluster.FindInputs.
func FindInputs(ctx context.Context, log io.Writer) error {
	if err := localcluster.FindInputs(ctx, log); err != nil {
		return err
	}
	bins, err := EnsureBinaries(ctx, log)
	if err != nil {
		return err
	}
	return FindManifest(bins.ModuleDir)
}

// FindManifest checks that the module directory holds the release
// manifest LoadManifests reads.
func FindManifest(moduleDir string) error {
	if _, err := os.Stat(filepath.Join(moduleDir, "manifests", "standard.yaml")); err != nil {
		return fmt.Errorf("%s@%s manifests: %w", Module, Version, err)
	}
	return nil
}
