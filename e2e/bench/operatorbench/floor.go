package operatorbench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/releaseutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	inferencestackchart "github.com/titanml/inference-stack-operator/charts/inference-stack"
	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
)

// floorWorkers is how many requests the harness has in flight when it
// creates objects: the write floor's and the stacks' creates alike.
const floorWorkers = 16

// harnessClient is the harness's own client configuration: fast enough
// that creating the workload never waits on a client-side rate limit.
func harnessClient(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 1000, 1000
	cfg.UserAgent = "inference-stack-bench"
	return cfg
}

// renderRelease renders the embedded chart for one stack exactly as an
// operator installs it (the stack's spec as values, the stack's name as
// the release name) and returns the objects of the release.
func renderRelease(name, namespace string, spec map[string]any) ([]*unstructured.Unstructured, error) {
	c, err := inferencestackchart.Load()
	if err != nil {
		return nil, err
	}
	install := action.NewInstall(&action.Configuration{})
	install.ClientOnly, install.DryRun, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = name, namespace
	major, minor, _ := strings.Cut(strings.TrimPrefix(localcluster.KubernetesVersion, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	install.KubeVersion = &chartutil.KubeVersion{Version: localcluster.KubernetesVersion, Major: major, Minor: minor}
	rel, err := install.Run(c, spec)
	if err != nil {
		return nil, fmt.Errorf("rendering the release of %s: %w", name, err)
	}
	var out []*unstructured.Unstructured
	for _, doc := range releaseutil.SplitManifests(rel.Manifest) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return nil, fmt.Errorf("decoding a rendered object of %s: %w", name, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		u.SetNamespace(namespace)
		out = append(out, u)
	}
	return out, nil
}

// renderReleases renders the releases of the named stacks.
func renderReleases(refs []types.NamespacedName, spec map[string]any) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, r := range refs {
		objs, err := renderRelease(r.Name, r.Namespace, spec)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// creator creates rendered objects through a dynamic client, their REST
// mappings resolved beforehand so that a timed create is only the create.
type creator struct {
	resources map[schema.GroupVersionKind]dynamic.NamespaceableResourceInterface
}

// newCreator resolves the mappings of objs' kinds with the harness's
// client.
func newCreator(cfg *rest.Config, objs []*unstructured.Unstructured) (*creator, error) {
	cfg = harnessClient(cfg)
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating a discovery client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating a dynamic client: %w", err)
	}
	c := &creator{resources: map[schema.GroupVersionKind]dynamic.NamespaceableResourceInterface{}}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		if _, ok := c.resources[gvk]; ok {
			continue
		}
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, fmt.Errorf("mapping %s: %w", gvk, err)
		}
		c.resources[gvk] = dyn.Resource(m.Resource)
	}
	return c, nil
}

// create creates objs, floorWorkers at a time (dryRun as in CreateOptions).
func (c *creator) create(ctx context.Context, objs []*unstructured.Unstructured, dryRun ...string) error {
	return inParallel(ctx, len(objs), func(ctx context.Context, i int) error {
		o := objs[i]
		_, err := c.resources[o.GroupVersionKind()].Namespace(o.GetNamespace()).Create(ctx, o, metav1.CreateOptions{DryRun: dryRun})
		if err != nil {
			return fmt.Errorf("creating %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		return nil
	})
}

// writeFloor creates objs with floorWorkers concurrent creates and
// returns how long that took, from the first create sent to the last
// answered. The REST mappings are resolved first, so only the creates are
// timed.
func writeFloor(ctx context.Context, c *creator, objs []*unstructured.Unstructured) (time.Duration, error) {
	start := time.Now()
	err := c.create(ctx, objs)
	return time.Since(start), err
}

// inParallel calls f for 0..n-1 from floorWorkers goroutines and returns
// the first error; after an error no new call starts.
func inParallel(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range floorWorkers {
		wg.Go(func() {
			for i := range next {
				if ctx.Err() != nil {
					continue // a call failed: drain without calling
				}
				if err := f(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		})
	}
feed:
	for i := range n {
		// select picks at random among ready cases: without this check a
		// cancelled feed could go on sending while workers are free.
		if ctx.Err() != nil {
			break
		}
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}
