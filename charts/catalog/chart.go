// Package catalogchart embeds the catalog Helm chart: the cluster side of
// the operator under OLM v1 (the InferenceStack CRD, the ClusterCatalog, one
// ClusterExtension per enabled major with its namespace and installer RBAC).
// The end-to-end tests and the demo install it with Helm's SDK from here.
//
// Two files of the chart are copies kept in sync by tests (refresh them with
// `go test ./charts/catalog -run Fresh -update`):
//   - templates/crd-inferencestacks.yaml: crds/models.takeoff.co_inferencestacks.yaml
//     plus the helm.sh/resource-policy: keep annotation (CRDTemplate);
//   - files/operator-clusterrole.yaml: operator/rbac/role.yaml, the
//     operator's RBAC that the bundle's CSV grants and the installer
//     account must therefore hold.
package catalogchart

import (
	"bytes"
	"embed"
	"fmt"

	"helm.sh/helm/v3/pkg/chart"

	"github.com/titanml/inference-stack-operator/charts/embedded"
)

// Files is the chart as it sits in this directory. The "all:" prefix keeps
// files whose names start with "_" or "." (such as _helpers.tpl).
//
//go:embed Chart.yaml values.yaml values.schema.json .helmignore README.md all:templates files
var Files embed.FS

const (
	// CRDTemplatePath is the chart's copy of the InferenceStack CRD.
	CRDTemplatePath = "templates/crd-inferencestacks.yaml"
	// OperatorRolePath is the chart's copy of operator/rbac/role.yaml.
	OperatorRolePath = "files/operator-clusterrole.yaml"
	// KeepAnnotation stops `helm uninstall` from deleting the CRD.
	KeepAnnotation = "helm.sh/resource-policy"
	// MajorLabel is set on every per-major object (namespace, RBAC,
	// ClusterExtension) with the major ("v0").
	MajorLabel = "models.takeoff.co/operator-major"
)

// Load builds the chart from the embedded files. Each call returns a fresh
// chart, so callers may modify it.
func Load() (*chart.Chart, error) {
	return embedded.Load(Files, "catalog")
}

const crdHeader = `{{- /*
The InferenceStack CRD: a copy of crds/models.takeoff.co_inferencestacks.yaml
with the helm.sh/resource-policy: keep annotation. Generated; do not edit
(go test ./charts/catalog -run Fresh -update). A template rather than a file
in crds/, because Helm never upgrades files in a chart's crds/ folder; kept
on uninstall, because deleting a CRD deletes every object of its kind.
*/}}
{{- if .Values.crd.install }}
`

// CRDTemplate returns the chart template for the CRD in crdYAML (the
// controller-gen output in crds/): the same document with
// helm.sh/resource-policy: keep added to its annotations, inside
// `{{- if .Values.crd.install }}`.
func CRDTemplate(crdYAML []byte) ([]byte, error) {
	if bytes.Contains(crdYAML, []byte("{{")) {
		return nil, fmt.Errorf("the CRD contains %q, which Helm would read as a template action", "{{")
	}
	body := bytes.TrimPrefix(crdYAML, []byte("---\n"))
	keep := []byte("    " + KeepAnnotation + ": keep\n")
	var out []byte
	switch {
	case bytes.Contains(body, []byte("\nmetadata:\n  annotations:\n")):
		i := bytes.Index(body, []byte("\nmetadata:\n  annotations:\n")) + len("\nmetadata:\n  annotations:\n")
		out = append(append(append(out, body[:i]...), keep...), body[i:]...)
	case bytes.Contains(body, []byte("\nmetadata:\n")):
		i := bytes.Index(body, []byte("\nmetadata:\n")) + len("\nmetadata:\n")
		out = append(append(append(append(out, body[:i]...), "  annotations:\n"...), keep...), body[i:]...)
	default:
		return nil, fmt.Errorf("the CRD has no top-level metadata")
	}
	if !bytes.HasSuffix(out, []byte("\n")) {
		out = append(out, '\n')
	}
	return append(append([]byte(crdHeader), out...), "{{- end }}\n"...), nil
}
