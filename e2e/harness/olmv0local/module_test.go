package olmv0local

import (
	"strings"
	"testing"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
)

// TestBinariesJSON: the olm_v0 source of binaries.json, which the
// Go-native harness and the Bazel module extension build from, pins the
// module of this package's constants and holds the chart and CRDs it reads.
func TestBinariesJSON(t *testing.T) {
	src, b, err := localcluster.Source(binariesSource, binariesBuild)
	if err != nil {
		t.Fatal(err)
	}
	if src.Module != Module || src.Version != Version || src.Sum != ModuleSum || b.Version != Version {
		t.Errorf("binaries.json pins %s@%s (%s), build version %s; want %s@%s (%s)", src.Module, src.Version, src.Sum, b.Version, Module, Version, ModuleSum)
	}
	have := map[string]bool{}
	for _, f := range src.Files {
		have[f] = true
	}
	for _, f := range []string{chartDir + "/Chart.yaml", chartDir + "/values.yaml", crdDir + "/0000_50_olm_00-subscriptions.crd.yaml"} {
		if !have[f] {
			t.Errorf("binaries.json's olm_v0 files lack %s", f)
		}
	}
	for f := range have {
		if !strings.HasPrefix(f, chartDir+"/") {
			t.Errorf("binaries.json's olm_v0 files: %s is not of %s", f, chartDir)
		}
	}
}
