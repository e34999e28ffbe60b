// Command generate regenerates every committed file derived from the Go API
// types and RBAC markers: the deepcopy functions, the InferenceStack CRD,
// the operator's ClusterRole (and the catalog chart's copy of it) and the
// inference-stack chart's values.schema.json. With -check it writes nothing
// and fails when a committed file differs from what it would write.
//
//	go run ./tools/generate          # make generate
//	go run ./tools/generate -check   # part of make test
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/titanml/inference-stack-operator/operator/api/v1alpha1"
	"github.com/titanml/inference-stack-operator/tools/valuesschema"
)

// ControllerGen is the pinned CRD/RBAC/deepcopy generator, run with go run so
// nothing is installed.
const ControllerGen = "sigs.k8s.io/controller-tools/cmd/controller-gen@v0.22.0"

// output is one generated file: where controller-gen writes it in the
// scratch directory, and where it is committed.
type output struct{ scratch, committed string }

var outputs = []output{
	{"object/zz_generated.deepcopy.go", "operator/api/v1alpha1/zz_generated.deepcopy.go"},
	{"crd/models.takeoff.co_inferencestacks.yaml", "crds/models.takeoff.co_inferencestacks.yaml"},
	{"rbac/role.yaml", "operator/rbac/role.yaml"},
	// The catalog chart grants its installer account the operator's
	// permissions from this copy (Helm reads files only inside the chart).
	{"rbac/role.yaml", "charts/catalog/files/operator-clusterrole.yaml"},
	{"values.schema.json", "charts/inference-stack/values.schema.json"},
}

func main() {
	check := flag.Bool("check", false, "only report committed files that are stale")
	root := flag.String("root", ".", "the repository root")
	flag.Parse()
	stale, err := Run(*root, *check)
	if err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(1)
	}
	if len(stale) > 0 {
		fmt.Fprintf(os.Stderr, "generate: stale generated files (run `make generate`):\n  %s\n", strings.Join(stale, "\n  "))
		os.Exit(1)
	}
}

// Run generates into a scratch directory, then either copies the results into
// the tree or, with check, returns the committed paths that differ.
func Run(root string, check bool) (stale []string, err error) {
	scratch, err := os.MkdirTemp("", "generate-")
	if err != nil {
		return nil, fmt.Errorf("creating the scratch directory: %w", err)
	}
	defer os.RemoveAll(scratch)

	cmd := exec.Command("go", "run", ControllerGen,
		"object:headerFile=", "paths=./operator/api/...", "output:object:dir="+filepath.Join(scratch, "object"),
		"crd", "paths=./operator/api/...", "output:crd:dir="+filepath.Join(scratch, "crd"),
		"rbac:roleName=inference-stack-operator", "paths=./operator/...", "output:rbac:dir="+filepath.Join(scratch, "rbac"))
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("controller-gen: %w\n%s", err, stderr.String())
	}

	crdPath := filepath.Join(scratch, "crd/models.takeoff.co_inferencestacks.yaml")
	crd, err := os.ReadFile(crdPath)
	if err != nil {
		return nil, fmt.Errorf("reading controller-gen's CRD: %w", err)
	}
	if crd, err = postProcessCRD(crd); err != nil {
		return nil, err
	}
	if err := os.WriteFile(crdPath, crd, 0o644); err != nil {
		return nil, fmt.Errorf("writing the CRD: %w", err)
	}
	schema, err := valuesschema.ValuesSchema(crd)
	if err != nil {
		return nil, fmt.Errorf("values schema: %w", err)
	}
	if schema, err = valuesNames(schema); err != nil {
		return nil, fmt.Errorf("values schema: %w", err)
	}
	if err := os.WriteFile(filepath.Join(scratch, "values.schema.json"), schema, 0o644); err != nil {
		return nil, fmt.Errorf("writing the values schema: %w", err)
	}

	for _, o := range outputs {
		want, err := os.ReadFile(filepath.Join(scratch, o.scratch))
		if err != nil {
			return nil, fmt.Errorf("generator wrote no %s: %w", o.scratch, err)
		}
		dst := filepath.Join(root, o.committed)
		got, _ := os.ReadFile(dst)
		if bytes.Equal(got, want) {
			continue
		}
		if check {
			stale = append(stale, o.committed)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return nil, fmt.Errorf("writing %s: %w", o.committed, err)
		}
		if err := os.WriteFile(dst, want, 0o644); err != nil {
			return nil, fmt.Errorf("writing %s: %w", o.committed, err)
		}
		fmt.Println("generated", o.committed)
	}
	return stale, nil
}

// valuesNames writes the name rules into the values schema, which does not
// carry the CRD's CEL rules (map keys get propertyNames instead), keeping
// valuesschema's encoding: sorted keys, two-space indent, no HTML escaping.
func valuesNames(schema []byte) ([]byte, error) {
	var root map[string]any
	if err := json.Unmarshal(schema, &root); err != nil {
		return nil, err
	}
	walkSchema(root, reflect.TypeFor[v1alpha1.InferenceStackSpec](), ".spec", false, false, func(s map[string]any, t reflect.Type, _ string, _ bool) {
		applyNames(s, t, jsonSchema)
	})
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
