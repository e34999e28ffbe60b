// Package charttest holds what the tests of the charts (charts/catalog,
// charts/inference-stack) do alike: render a chart without a cluster, and
// lint its directory as `helm lint --strict` does.
package charttest

import (
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
)

// DryRunInstall returns a client-only `helm install --dry-run` of release
// into namespace on a cluster of kubeVersion: it renders what an install
// would create, and needs no cluster. cfg is the action's configuration
// (its logger, for one); callers add what else their chart needs, such as
// API versions.
func DryRunInstall(cfg *action.Configuration, release, namespace string, kubeVersion *chartutil.KubeVersion) *action.Install {
	in := action.NewInstall(cfg)
	in.ClientOnly, in.DryRun, in.Replace = true, true, true
	in.ReleaseName, in.Namespace = release, namespace
	in.KubeVersion = kubeVersion
	return in
}

// Lint runs Helm's linter in strict mode over the chart directory that is
// the working directory (a test's package directory) with values: any
// message above informational, or any error, fails t. Informational
// messages go to the test log.
func Lint(t testing.TB, namespace string, kubeVersion *chartutil.KubeVersion, values map[string]any) {
	t.Helper()
	lint := action.NewLint()
	lint.Strict, lint.Namespace, lint.KubeVersion = true, namespace, kubeVersion
	result := lint.Run([]string{"."}, values)
	for _, msg := range result.Messages {
		if msg.Severity > support.InfoSev {
			t.Errorf("lint: %s", msg)
		} else {
			t.Logf("lint (info): %s", msg)
		}
	}
	for _, err := range result.Errors {
		t.Errorf("lint error: %v", err)
	}
	if result.TotalChartsLinted != 1 {
		t.Errorf("linted %d charts, want 1", result.TotalChartsLinted)
	}
}
