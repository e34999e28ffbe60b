// Package olmv0local runs OLM v0 — the olm-operator and catalog-operator of
// the pinned operator-lifecycle-manager release (Version), built from the Go
// module proxy and cached — as pods on a local cluster's real node
// (e2e/localcluster), deployed from that release's own Helm chart
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
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/titanml/inference-stack-operator/e2e/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/olmlocal"
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
// hash and returns its read-only directory.
func ModuleDir(ctx context.Context) (string, error) {
	return olmlocal.DownloadModule(ctx, Module, Version, ModuleSum)
}

// crdDir holds OLM v0's CRDs in the module (the Helm chart's crds/).
const crdDir = "deploy/chart/crds"

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
	dyn, err := dynamic.NewForConfig(cfg)
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
	if err := olmlocal.WaitEstablished(ctx, dyn, crds); err != nil {
		return err
	}
	return waitServed(ctx, cfg, "operators.coreos.com/v1alpha1", "catalogsources", "subscriptions", "installplans", "clusterserviceversions")
}

// waitServed waits until discovery lists resources in groupVersion: REST
// mappers (Helm's, kubectl's) fail with "no matches for kind" until then.
func waitServed(ctx context.Context, cfg *rest.Config, groupVersion string, resources ...string) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := dc.ServerResourcesForGroupVersion(groupVersion)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		found := map[string]bool{}
		for _, r := range list.APIResources {
			found[r.Name] = true
		}
		for _, r := range resources {
			if !found[r] {
				last = fmt.Sprintf("%s not served yet", r)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for discovery to list %s %v: %w (%s)", groupVersion, resources, err, last)
	}
	return nil
}

// EnsureBinaries returns the olm-operator, catalog-operator and cpb
// binaries at Version (see Binaries), building them inside the downloaded
// module with its own go.mod and go.sum, CGO off, the first time on a
// machine and caching them by version under localcluster.CacheDir().
func EnsureBinaries(ctx context.Context, log io.Writer) (*Binaries, error) {
	dir, err := ModuleDir(ctx)
	if err != nil {
		return nil, err
	}
	b := localcluster.CachedBuild{
		Name:      "olm-v0",
		Version:   Version,
		ModuleDir: dir,
		Packages:  []string{"./cmd/olm", "./cmd/catalog", "./util/cpb"},
		Outputs:   []string{"olm", "catalog", "cpb"},
		// containers/image (through operator-registry) otherwise needs
		// gpgme through cgo.
		Tags: []string{"containers_image_openpgp"},
		// Stripped: they go into an image the node pulls, and each is
		// 100 MB with symbols.
		LDFlags:  "-s -w",
		Estimate: "6 min on 2 cores",
	}
	out, err := b.Ensure(ctx, log)
	if err != nil {
		return nil, err
	}
	return &Binaries{
		OLM:       filepath.Join(out, "olm"),
		Catalog:   filepath.Join(out, "catalog"),
		CPB:       filepath.Join(out, "cpb"),
		ModuleDir: dir,
	}, nil
}

// Binaries are the built OLM v0 programs: the OLM operator (CSVs,
// OperatorGroups), the catalog operator (CatalogSources, Subscriptions,
// InstallPlans) and cpb, which bundle-unpacking jobs copy into the bundle
// image's container to copy its manifests out.
type Binaries struct {
	OLM, Catalog, CPB string
	ModuleDir         string
}
