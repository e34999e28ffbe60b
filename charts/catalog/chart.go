// Package catalogchart embeds the catalog Helm chart: the cluster side of
// the operator under OLM v1 (the InferenceStack CRD, the ClusterCatalog, one
// ClusterExtension per enabled major with its namespace and installer RBAC).
// The end-to-end tests and the demo install it with Helm's SDK from here.
//
// Two files of the chart come from elsewhere in the repository:
//   - files/inferencestacks-crd.yaml is a link to the one copy of the CRD,
//     crds/models.takeoff.co_inferencestacks.yaml. Helm follows it when it
//     loads or packages the chart directory; go:embed skips links, so Load
//     adds the file from package crds.
//   - files/operator-clusterrole.yaml is a copy of operator/rbac/role.yaml,
//     the operator's RBAC that the bundle's CSV grants and the installer
//     account must therefore hold (`make generate` writes it).
package catalogchart

import (
	"embed"
	"slices"

	"helm.sh/helm/v3/pkg/chart"

	"github.com/titanml/inference-stack-operator/charts/embedded"
	"github.com/titanml/inference-stack-operator/crds"
)

// Files is the chart as it sits in this directory. The "all:" prefix keeps
// files whose names start with "_" or "." (such as _helpers.tpl).
//
//go:embed Chart.yaml values.yaml values.schema.json .helmignore README.md all:templates files
var Files embed.FS

const (
	// CRDPath is the chart's link to the InferenceStack CRD.
	CRDPath = "files/inferencestacks-crd.yaml"
	// OperatorRolePath is the chart's copy of operator/rbac/role.yaml.
	OperatorRolePath = "files/operator-clusterrole.yaml"
	// KeepAnnotation stops `helm uninstall` from deleting the CRD.
	KeepAnnotation = "helm.sh/resource-policy"
	// MajorLabel is set on every per-major object (namespace, RBAC,
	// ClusterExtension) with the major ("v0").
	MajorLabel = "models.takeoff.co/operator-major"
)

// Load builds the chart from the embedded files and the CRD. Each call
// returns a fresh chart, so callers may modify it.
func Load() (*chart.Chart, error) {
	c, err := embedded.Load(Files, "catalog")
	if err != nil {
		return nil, err
	}
	// Replace rather than append: a build that follows links when it
	// embeds (Bazel) already has the file.
	c.Files = slices.DeleteFunc(c.Files, func(f *chart.File) bool { return f.Name == CRDPath })
	c.Files = append(c.Files, &chart.File{Name: CRDPath, Data: crds.InferenceStackYAML})
	return c, nil
}
