package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	helmclient "github.com/operator-framework/helm-operator-plugins/pkg/client"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// newActionClientGetter is the library's Helm action client getter, wrapped so
// that failures reach the user as Events on the stack (the library only sets
// status conditions) and successful changes are recorded too.
func newActionClientGetter(mgr ctrl.Manager, recorder record.EventRecorder) (helmclient.ActionClientGetter, error) {
	acg, err := helmclient.NewActionConfigGetter(mgr.GetConfig(), mgr.GetRESTMapper())
	if err != nil {
		return nil, fmt.Errorf("creating Helm action config getter: %w", err)
	}
	// Helm's client-side OpenAPI validation fetches the cluster's OpenAPI
	// documents on every install, upgrade and dry run; for a chart whose
	// output is tested against the typed Kubernetes objects (strict decoding
	// in the chart tests) that is API load for nothing. The API server still
	// validates every object it is sent.
	inner, err := helmclient.NewActionClientGetter(acg,
		helmclient.AppendInstallOptions(func(i *action.Install) error { i.DisableOpenAPIValidation = true; return nil }),
		helmclient.AppendUpgradeOptions(func(u *action.Upgrade) error { u.DisableOpenAPIValidation = true; return nil }),
	)
	if err != nil {
		return nil, fmt.Errorf("creating Helm action client getter: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("creating discovery client: %w", err)
	}
	caps := &capabilities{discovery: dc, ttl: capabilitiesTTL}
	return helmclient.ActionClientGetterFunc(func(ctx context.Context, obj client.Object) (helmclient.ActionInterface, error) {
		ac, err := inner.ActionClientFor(ctx, obj)
		if err == nil {
			ac.Config().Capabilities, err = caps.get()
		}
		if err != nil {
			recorder.Eventf(obj, corev1.EventTypeWarning, "ClientError", "cannot create a Helm client: %v", err)
			return nil, err
		}
		return &eventingActionClient{ActionInterface: ac, obj: obj, recorder: recorder}, nil
	}), nil
}

// capabilitiesTTL bounds how long a newly installed API (say KEDA's) takes
// to reach the chart's .Capabilities.
const capabilitiesTTL = time.Minute

// capabilities caches what Helm calls the cluster's capabilities (server
// version and API versions). Without it every install, upgrade and dry run
// invalidates discovery and re-reads /version and every API group, which was
// most of the old operator's per-reconcile API load.
type capabilities struct {
	discovery discovery.DiscoveryInterface
	ttl       time.Duration

	mu      sync.Mutex
	caps    *chartutil.Capabilities
	fetched time.Time
}

func (c *capabilities) get() (*chartutil.Capabilities, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.caps != nil && time.Since(c.fetched) < c.ttl {
		return c.caps, nil
	}
	v, err := c.discovery.ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("reading the server version: %w", err)
	}
	apis, err := action.GetVersionSet(c.discovery)
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		// A broken aggregated API leaves the others usable, as in Helm.
		return nil, fmt.Errorf("reading the server's API versions: %w", err)
	}
	c.caps = &chartutil.Capabilities{
		APIVersions: apis,
		KubeVersion: chartutil.KubeVersion{Version: v.GitVersion, Major: v.Major, Minor: v.Minor},
		HelmVersion: chartutil.DefaultCapabilities.HelmVersion,
	}
	c.fetched = time.Now()
	return c.caps, nil
}

type eventingActionClient struct {
	helmclient.ActionInterface
	obj      client.Object
	recorder record.EventRecorder
}

// maxEventMessage keeps a Helm error (which can quote whole manifests) within
// what an Event message may hold.
const maxEventMessage = 1024

func (c *eventingActionClient) warn(reason, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if len(msg) > maxEventMessage {
		msg = msg[:maxEventMessage] + "…"
	}
	c.recorder.Event(c.obj, corev1.EventTypeWarning, reason, msg)
}

func (c *eventingActionClient) Install(name, namespace string, chrt *chart.Chart, vals map[string]any, opts ...helmclient.InstallOption) (*release.Release, error) {
	rel, err := c.ActionInterface.Install(name, namespace, chrt, vals, opts...)
	if err != nil {
		c.warn("InstallFailed", "installing the chart failed: %v", err)
		return rel, err
	}
	c.recorder.Eventf(c.obj, corev1.EventTypeNormal, "Installed", "release %s installed (revision %d)", rel.Name, rel.Version)
	return rel, nil
}

func (c *eventingActionClient) Upgrade(name, namespace string, chrt *chart.Chart, vals map[string]any, opts ...helmclient.UpgradeOption) (*release.Release, error) {
	rel, err := c.ActionInterface.Upgrade(name, namespace, chrt, vals, opts...)
	if err != nil {
		c.warn("UpgradeFailed", "rendering or upgrading the chart failed: %v", err)
		return rel, err
	}
	// The library also calls Upgrade as a server-side dry run on every
	// reconcile to detect changes; only real upgrades are news.
	if rel.Info != nil && rel.Info.Status == release.StatusDeployed {
		c.recorder.Eventf(c.obj, corev1.EventTypeNormal, "Upgraded", "release %s upgraded (revision %d)", rel.Name, rel.Version)
	}
	return rel, nil
}

func (c *eventingActionClient) Reconcile(rel *release.Release) error {
	if err := c.ActionInterface.Reconcile(rel); err != nil {
		c.warn("ReconcileFailed", "repairing the release's objects failed: %v", err)
		return err
	}
	return nil
}

func (c *eventingActionClient) Uninstall(name string, opts ...helmclient.UninstallOption) (*release.UninstallReleaseResponse, error) {
	resp, err := c.ActionInterface.Uninstall(name, opts...)
	if err != nil {
		c.warn("UninstallFailed", "uninstalling the release failed: %v", err)
	}
	return resp, err
}
