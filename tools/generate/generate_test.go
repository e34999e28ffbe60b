package main

import "testing"

// Every generated file in the repository must match its source: the API
// types (CRD, deepcopy, values schema) and the RBAC markers (the operator's
// ClusterRole and the catalog chart's copy of it). This is the one
// staleness check; `make generate` rewrites them all.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("runs controller-gen")
	}
	stale, err := Run("../..", true)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range stale {
		t.Errorf("%s is stale: run `make generate`", f)
	}
}
