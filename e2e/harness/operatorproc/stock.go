package operatorproc

import (
	"context"
	"io"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
)

// StockVersion is the helm-operator-plugins release whose `helm-operator`
// the project's operator is measured against. It must match the wrapper
// module e2e/binaries/helm-operator (whose go.mod is the source of truth
// for what is compiled) and the helm-operator build of
// e2e/harness/localcluster/binaries.json (cache entry name, version ldflags; a
// test checks they agree).
const StockVersion = "v0.9.1"

// The stock helm-operator's source and build in binaries.json: built from
// the wrapper module with exactly the dependency versions upstream's go.mod
// names, and cached like the local cluster's binaries (under Bazel, the
// go_fetch repository @e2e_helm_operator).
const (
	stockSource = "helm_operator"
	stockBuild  = "helm-operator"
)

// EnsureStock returns the path of the stock helm-operator, building it the
// first time on a machine (under Bazel: the runfile, nothing is built).
// Progress goes to log (may be nil).
func EnsureStock(ctx context.Context, log io.Writer) (string, error) {
	p, err := localcluster.EnsureOutputs(ctx, stockSource, stockBuild, log)
	if err != nil {
		return "", err
	}
	return p[0], nil
}
