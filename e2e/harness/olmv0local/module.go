// Package olmv0local runs OLM v0 — the olm-operator and catalog-operator of
// the pinned operator-lifecycle-manager release (Version), built from the Go
// module proxy and cached — as pods on a local cluster's real node
// (e2e/harness/localcluster), deployed from that release's own Helm chart
// (deploy/chart) with images the harness assembles from the binaries. It
// also provides OLM v0's CRDs alone (InstallCRDs), for server-side dry runs
// of objects written for OLM v0.
package olmv0local

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/olmlocal"
	"github.com/titanml/inference-stack-operator/e2e/harness/testinputs"
)

// The pinned OLM v0 release. Like OLM v1's module, its checksum-database
// lookup fails here, so the module is exempted from the database and its
// zip's hash pinned instead (the first download here gave ModuleSum); its
// own go.sum verifies every dependency of the build.
const (
	Module    = "github.com/operator-framework/operator-lifecycle-manager"
	Version   = "v0.38.0"
	ModuleSum = "h1:X/aXZq/yby3LWIKrK7K4hUv0RK8Wo33wOgKnCH3nTMg="
)

// ModuleDir downloads the pinned module (a no-op when cached), checks its
// hash and returns its read-only directory. Under Bazel the module was
// fetched and checked by the e2e_olm_v0 repository (tools/bazel/go_fetch.bzl)
// and the directory is the one holding the deploy/chart runfiles
// (testinputs.OLMv0Files): only the files binaries.json lists.
func ModuleDir(ctx context.Context) (string, error) {
	if files, ok, err := testinputs.Paths(testinputs.OLMv0Files); ok || err != nil {
		if err != nil {
			return "", err
		}
		for _, f := range files {
			if dir, found := strings.CutSuffix(f, "/"+chartDir+"/Chart.yaml"); found {
				return dir, nil
			}
		}
		return "", fmt.Errorf("%s lists no %s/Chart.yaml", testinputs.OLMv0Files, chartDir)
	}
	return olmlocal.DownloadModule(ctx, Module, Version, ModuleSum)
}

// chartDir is OLM v0's Helm chart in the module.
const chartDir = "deploy/chart"

// crdDir holds OLM v0's CRDs in the module (the Helm chart's crds/).
const crdDir = chartDir + "/crds"

// FindCRDs checks that the module in moduleDir holds OLM v0's CRDs (what
// CRDs reads), without reading them.
func FindCRDs(moduleDir string) error {
	if files, _ := filepath.Glob(filepath.Join(moduleDir, crdDir, "*.yaml")); len(files) == 0 {
		return fmt.Errorf("%s@%s has no CRDs in %s", Module, Version, crdDir)
	}
	return nil
}

// CRDs reads OLM v0's CustomResourceDefinitions (CatalogSource,
// Subscription, InstallPlan, ClusterServiceVersion, OperatorGroup, ...)
// from the module in moduleDir.
func CRDs(moduleDir string) ([]*unstructured.Unstructured, error) {
	files, err := filepath.Glob(filepath.Join(moduleDir, crdDir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("%s@%s CRDs: %w", Module, Version, err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &u.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if u.GetKind() != "CustomResourceDefinition" || !strings.HasSuffix(u.GetName(), ".operators.coreos.com") {
			return nil, fmt.Errorf("%s is not one of OLM v0's CRDs (%s %s)", f, u.GetKind(), u.GetName())
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s@%s has no CRDs in %s", Module, Version, crdDir)
	}
	return out, nil
}

// InstallCRDs applies OLM v0's CRDs of the pinned release and waits until
// the API server serves them. Enough to validate objects against OLM v0's
// API with server-side dry runs; no controller runs.
func InstallCRDs(ctx context.Context, cfg *rest.Config) error {
	dir, err := ModuleDir(ctx)
	if err != nil {
		return err
	}
	crds, err := CRDs(dir)
	if err != nil {
		return err
	}
	a, err := newApplier(cfg)
	if err != nil {
		return err
	}
	for _, u := range crds {
		if err := a.apply(ctx, u); err != nil {
			return err
		}
	}
	if err := olmlocal.WaitEstablished(ctx, a.dyn, crds); err != nil {
		return err
	}
	return olmlocal.WaitServed(ctx, cfg, "operators.coreos.com/v1alpha1", "catalogsources", "subscriptions", "installplans", "clusterserviceversions")
}

// EnsureBinaries returns the olm-operator, catalog-operator and cpb
// binaries at Version (see Binaries), building them inside the downloaded
// module with its own go.mod and go.sum, CGO off, the first time on a
// machine and caching them by version under localcluster.CacheDir(): the
// olm-v0 build of e2e/harness/localcluster/binaries.json (tag
// containers_image_openpgp: containers/image, through operator-registry,
// otherwise needs gpgme through cgo; stripped, since they go into an image
// the node pulls and each is 100 MB with symbols). Under Bazel they are
// runfiles (testinputs.Binaries) and nothing is built.
func EnsureBinaries(ctx context.Context, log io.Writer) (*Binaries, error) {
	dir, err := ModuleDir(ctx)
	if err != nil {
		return nil, err
	}
	_, spec, err := localcluster.Source(binariesSource, binariesBuild)
	if err != nil {
		return nil, err
	}
	var paths []string
	if found, ok, err := testinputs.Executables(testinputs.Binaries); ok || err != nil {
		if err != nil {
			return nil, err
		}
		if paths, err = testinputs.Pick(testinputs.Binaries, found, spec.Outputs...); err != nil {
			return nil, err
		}
	} else {
		out, err := spec.Cached(dir).Ensure(ctx, log)
		if err != nil {
			return nil, err
		}
		for _, o := range spec.Outputs {
			paths = append(paths, filepath.Join(out, o))
		}
	}
	if len(paths) != 3 {
		return nil, fmt.Errorf("binaries.json: the %s build has %d outputs, want olm, catalog and cpb", binariesBuild, len(paths))
	}
	return &Binaries{OLM: paths[0], Catalog: paths[1], CPB: paths[2], ModuleDir: dir}, nil
}

// The source and build of OLM v0's binaries in e2e/harness/localcluster/binaries.json
// (under Bazel, the go_fetch repository @e2e_olm_v0).
const (
	binariesSource = "olm_v0"
	binariesBuild  = "olm-v0"
)

// Binaries are the built OLM v0 programs: the OLM operator (CSVs,
// OperatorGroups), the catalog operator (CatalogSources, Subscriptions,
// InstallPlans) and cpb, which bundle-unpacking jobs copy into the bundle
// image's container to copy its manifests out.
type Binaries struct {
	OLM, Catalog, CPB string
	ModuleDir         string
}
