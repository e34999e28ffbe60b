package controller

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
)

// Release records are a tenant's input too. Helm keeps a stack's release
// as Secrets in the stack's namespace, where whoever may edit the
// namespace may write Secrets; Helm reads them back and acts on what they
// say with the operator's cluster-wide permissions. What a record's
// manifest makes Helm do is held to the stack where Helm acts on it (see
// stackscope.go): there, not in a parse of the manifest of the operator's
// own, which could read a document otherwise than Helm does. What is
// checked here is the rest of a record: that it is the stack's own release
// (name and namespace), has no hooks (the chart has none, and none is ever
// run), and a manifest of the shape the chart renders, before Helm parses
// and builds it (recordmanifest.go); and every record is bounded before it
// is decoded (releasestorage.go).

// chartKinds are the kinds the inference-stack chart renders, at the
// versions it renders them; TestChartKinds keeps the list in step with the
// chart.
var chartKinds = []schema.GroupVersionKind{
	{Version: "v1", Kind: "ConfigMap"},
	{Version: "v1", Kind: "Service"},
	{Version: "v1", Kind: "ServiceAccount"},
	{Group: "apps", Version: "v1", Kind: "Deployment"},
	{Group: "networking.k8s.io", Version: "v1", Kind: "Ingress"},
	{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObject"},
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
	if err := checkManifest(rel.Manifest, t.namespace); err != nil {
		return refuse("%v", err)
	}
	return nil
}
