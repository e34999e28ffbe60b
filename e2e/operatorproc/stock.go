package operatorproc

import (
	"context"
	"io"
	"path/filepath"

	"github.com/titanml/inference-stack-operator/e2e/localcluster"
)

// StockVersion is the helm-operator-plugins release whose `helm-operator`
// the project's operator is measured against. It must match the wrapper
// module e2e/binaries/helm-operator (whose go.mod is the source of truth
// for what is compiled; this string names the cache entry).
const StockVersion = "v0.9.1"

// stockBuild is the stock helm-operator, built from the wrapper module with
// exactly the dependency versions upstream's go.mod names, and cached like
// the local cluster's binaries.
func stockBuild(root string) localcluster.CachedBuild {
	return localcluster.CachedBuild{
		Name:      "helm-operator",
		Version:   StockVersion,
		ModuleDir: filepath.Join(root, "e2e", "binaries", "helm-operator"),
		// The command's main package is the module root.
		Packages: []string{"github.com/operator-framework/helm-operator-plugins"},
		Outputs:  []string{"helm-operator"},
		LDFlags:  "-X github.com/operator-framework/helm-operator-plugins/internal/version.GitVersion=" + StockVersion,
		Estimate: "2 min on 2 cores",
	}
}

// EnsureStock returns the path of the stock helm-operator, building it the
// first time on a machine. Progress goes to log (may be nil).
func EnsureStock(ctx context.Context, log io.Writer) (string, error) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := stockBuild(root).Ensure(ctx, log)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "helm-operator"), nil
}
