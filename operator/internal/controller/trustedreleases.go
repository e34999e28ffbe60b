package controller

import (
	"fmt"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
)

// Release records are a tenant's input too. Helm keeps a stack's release
// as Secrets in the stack's namespace, where whoever may edit the
// namespace may write Secrets; Helm reads them back and acts on what they
// say with the operator's cluster-wide permissions: an uninstall deletes
// every object of the stored manifest, an upgrade deletes what the new
// render no longer has, a rollback re-creates a stored revision and runs
// its hooks. A forged record could list objects in any namespace, or
// kinds the chart never renders, and have the operator delete or create
// them. So every record read is checked against what this operator
// writes, and one that could not be its own is refused: the stack's own
// release (name and namespace), no hooks (the chart has none), and only
// objects of the chart's kinds without a namespace or in the stack's. What
// a record may then make the operator do — create, change and delete the
// chart's kinds in the stack's namespace — is what the tenant may do there
// directly.

// chartKinds are the kinds the inference-stack chart renders, as
// "group/Kind" (core: "/Kind"); TestChartKinds keeps the list in step with
// the chart.
var chartKinds = []string{
	"/ConfigMap", "/Service", "/ServiceAccount",
	"apps/Deployment",
	"networking.k8s.io/Ingress",
	"keda.sh/ScaledObject",
}

// trustedReleases is the storage of one stack's release that refuses
// records the operator could not have written.
type trustedReleases struct {
	driver.Driver
	name, namespace string
}

func newTrustedReleases(d driver.Driver, name, namespace string) *trustedReleases {
	return &trustedReleases{Driver: d, name: name, namespace: namespace}
}

func (t *trustedReleases) Get(key string) (*release.Release, error) {
	rel, err := t.Driver.Get(key)
	if err != nil {
		return rel, err
	}
	return rel, t.check(rel)
}

func (t *trustedReleases) List(filter func(*release.Release) bool) ([]*release.Release, error) {
	return t.checkAll(t.Driver.List(filter))
}

func (t *trustedReleases) Query(labels map[string]string) ([]*release.Release, error) {
	return t.checkAll(t.Driver.Query(labels))
}

func (t *trustedReleases) checkAll(rels []*release.Release, err error) ([]*release.Release, error) {
	if err != nil {
		return rels, err
	}
	for _, r := range rels {
		if err := t.check(r); err != nil {
			return nil, err
		}
	}
	return rels, nil
}

// check refuses a record the operator could not have written for its
// stack.
func (t *trustedReleases) check(rel *release.Release) error {
	if rel == nil {
		return nil
	}
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("refusing to act on release %s revision %d in namespace %s, which this operator could not have written: %s (someone with write access to the namespace's Secrets wrote or changed it; delete that revision's Secret sh.helm.release.v1.%s.v%d)",
			rel.Name, rel.Version, t.namespace, fmt.Sprintf(format, args...), rel.Name, rel.Version)
	}
	if rel.Name != t.name || rel.Namespace != t.namespace {
		return refuse("it is release %s/%s, not the stack's", rel.Namespace, rel.Name)
	}
	if len(rel.Hooks) > 0 {
		return refuse("it has %d hook(s); the chart has none", len(rel.Hooks))
	}
	objs, err := manifestObjects(rel.Manifest)
	if err != nil {
		return refuse("its manifest is not YAML: %v", err)
	}
	for _, obj := range objs {
		group := ""
		if g, _, found := strings.Cut(obj.APIVersion, "/"); found {
			group = g
		}
		if gk := group + "/" + obj.Kind; !slices.Contains(chartKinds, gk) {
			return refuse("its manifest holds %s %s, a kind the chart does not render", gk, obj.Metadata.Name)
		}
		if obj.Metadata.Namespace != "" && obj.Metadata.Namespace != t.namespace {
			return refuse("its manifest holds %s %s in namespace %s", obj.Kind, obj.Metadata.Name, obj.Metadata.Namespace)
		}
	}
	return nil
}
