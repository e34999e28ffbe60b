package controller

import (
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/storage/driver"
	"sigs.k8s.io/yaml"

	stackchart "github.com/titanml/inference-stack-operator/charts/inference-stack"
)

// everything switches on every optional part of the chart.
const everything = `
gateway:
  ingress: {enabled: true, hosts: [{host: takeoff.example.com}]}
applications:
  llama:
    scaling: {enabled: true, metricTarget: {value: 4}}
`

// renderManifest renders the chart as release name in namespace with
// values, as the release manifest Helm records; apis are API versions the
// cluster has beyond the built-in ones.
func renderManifest(t *testing.T, name, namespace, values string, apis ...string) string {
	t.Helper()
	c, err := stackchart.Load()
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	i := action.NewInstall(&action.Configuration{Log: t.Logf})
	i.ClientOnly, i.DryRun, i.Replace = true, true, true
	i.ReleaseName, i.Namespace = name, namespace
	i.KubeVersion = &chartutil.KubeVersion{Version: "v1.34.0", Major: "1", Minor: "34"}
	i.APIVersions = chartutil.VersionSet(apis)
	rel, err := i.Run(c, vals.AsMap())
	if err != nil {
		t.Fatal(err)
	}
	return rel.Manifest
}

// TestChartKinds: chartKinds is exactly what the chart renders, at those
// versions, with every optional part on (and KEDA installed).
func TestChartKinds(t *testing.T) {
	manifest := renderManifest(t, "stack", "tenant", everything, "keda.sh/v1alpha1", "keda.sh/v1alpha1/ScaledObject")
	var rendered []string
	for _, doc := range releaseutil.SplitManifests(manifest) {
		var obj struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if gvk := obj.APIVersion + "/" + obj.Kind; !slices.Contains(rendered, gvk) {
			rendered = append(rendered, gvk)
		}
	}
	slices.Sort(rendered)
	var want []string
	for _, k := range chartKinds {
		want = append(want, k.GroupVersion().String()+"/"+k.Kind)
	}
	if slices.Sort(want); !slices.Equal(rendered, want) {
		t.Errorf("the chart renders %v; chartKinds says %v", rendered, want)
	}
}

// TestTrustedReleases: a record this operator could have written passes;
// one naming another release, or holding hooks, is refused. (What a
// record's manifest makes Helm do is held to the stack where Helm acts:
// TestStackScopeAdmits, TestTenantWrittenReleaseRecords.)
func TestTrustedReleases(t *testing.T) {
	const deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: stack-gateway\n"
	good := &release.Release{Name: "stack", Namespace: "tenant", Version: 1, Info: &release.Info{Status: release.StatusDeployed},
		Manifest: "---\n# Source: x\n" + deployment + "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: stack-gateway\n  namespace: tenant\n"}
	forged := map[string]func(r *release.Release){
		"another release":   func(r *release.Release) { r.Name = "platform" },
		"another namespace": func(r *release.Release) { r.Namespace = "kube-system" },
		"a hook":            func(r *release.Release) { r.Hooks = []*release.Hook{{Name: "h", Kind: "Job"}} },
	}
	mem := driver.NewMemory()
	mem.SetNamespace("tenant")
	tr := newTrustedReleases(mem, "stack", "tenant")
	if err := mem.Create("sh.helm.release.v1.stack.v1", good); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Get("sh.helm.release.v1.stack.v1"); err != nil {
		t.Errorf("a record of the operator's own: %v", err)
	}
	v := 2
	for what, forge := range forged {
		r := *good
		r.Version = v
		forge(&r)
		key := "sh.helm.release.v1." + r.Name + ".v" + string(rune('0'+v))
		v++
		if err := mem.Create(key, &r); err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Get(key); err == nil || !strings.Contains(err.Error(), "refusing to act on release") {
			t.Errorf("%s: Get: %v", what, err)
		}
		if _, err := tr.Query(map[string]string{"name": r.Name, "owner": "helm"}); err == nil {
			t.Errorf("%s: Query passed", what)
		}
		if _, err := tr.List(func(*release.Release) bool { return true }); err == nil {
			t.Errorf("%s: List passed", what)
		}
		if _, err := mem.Delete(key); err != nil {
			t.Fatal(err)
		}
	}
}
