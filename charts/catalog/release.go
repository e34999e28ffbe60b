package catalogchart

import (
	"errors"
	"fmt"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// Release installs, upgrades and uninstalls the embedded chart with Helm's
// SDK, like the helm CLI would (release stored in Secrets of Namespace).
type Release struct {
	// Kubeconfig is the path of the cluster's kubeconfig.
	Kubeconfig string
	// Namespace of the Helm release (created if missing on install).
	Namespace string
	// Name of the release; default "catalog".
	Name string
	// Log receives Helm's debug messages; nil discards them.
	Log func(format string, args ...any)
}

func (r Release) config() (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &r.Kubeconfig
	ns := r.Namespace
	flags.Namespace = &ns
	log := r.Log
	if log == nil {
		log = func(string, ...any) {}
	}
	cfg := &action.Configuration{}
	if err := cfg.Init(flags, r.Namespace, "secret", log); err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	return cfg, nil
}

// withChart returns the configuration and the embedded chart, what an
// install or an upgrade acts with.
func (r Release) withChart() (*action.Configuration, *chart.Chart, error) {
	cfg, err := r.config()
	if err != nil {
		return nil, nil, err
	}
	c, err := Load()
	if err != nil {
		return nil, nil, err
	}
	return cfg, c, nil
}

func (r Release) name() string {
	if r.Name == "" {
		return "catalog"
	}
	return r.Name
}

// Install runs `helm install` with values.
func (r Release) Install(values map[string]any) (*release.Release, error) {
	cfg, c, err := r.withChart()
	if err != nil {
		return nil, err
	}
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace, in.CreateNamespace = r.name(), r.Namespace, true
	rel, err := in.Run(c, values)
	if err != nil {
		return nil, fmt.Errorf("helm install %s: %w", r.name(), err)
	}
	return rel, nil
}

// Upgrade runs `helm upgrade` with values (replacing, not merging with, the
// previous values).
func (r Release) Upgrade(values map[string]any) (*release.Release, error) {
	cfg, c, err := r.withChart()
	if err != nil {
		return nil, err
	}
	up := action.NewUpgrade(cfg)
	up.Namespace = r.Namespace
	rel, err := up.Run(r.name(), c, values)
	if err != nil {
		return nil, fmt.Errorf("helm upgrade %s: %w", r.name(), err)
	}
	return rel, nil
}

// Uninstall runs `helm uninstall`. Helm keeps the CRD (resource policy
// keep) and returns the names of what it kept in Info.
func (r Release) Uninstall() (*release.UninstallReleaseResponse, error) {
	cfg, err := r.config()
	if err != nil {
		return nil, err
	}
	un := action.NewUninstall(cfg)
	resp, err := un.Run(r.name())
	if err != nil {
		return nil, fmt.Errorf("helm uninstall %s: %w", r.name(), err)
	}
	return resp, nil
}

// Installed reports whether the release exists (deployed or otherwise).
func (r Release) Installed() (bool, error) {
	cfg, err := r.config()
	if err != nil {
		return false, err
	}
	h := action.NewHistory(cfg)
	h.Max = 1
	rels, err := h.Run(r.name())
	if err != nil {
		if errors.Is(err, driver.ErrReleaseNotFound) {
			return false, nil
		}
		return false, err
	}
	return len(rels) > 0, nil
}

// Values returns the values of the deployed release.
func (r Release) Values() (map[string]any, error) {
	cfg, err := r.config()
	if err != nil {
		return nil, err
	}
	g := action.NewGetValues(cfg)
	return g.Run(r.name())
}
