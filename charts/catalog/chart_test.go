package catalogchart

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/charts/internal/charttest"
	"github.com/titanml/inference-stack-operator/crds"
)

const (
	releaseName = "catalog"
	namespace   = "inference-stack-system"
	digest      = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
)

var kubeVersion = &chartutil.KubeVersion{Version: "v1.34.4", Major: "1", Minor: "34"}

// render renders the embedded chart client-side, as `helm template` would,
// and returns its objects in Helm's install order.
func render(t *testing.T, values string) []*unstructured.Unstructured {
	t.Helper()
	objs, _, err := tryRender(values)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return objs
}

func tryRender(values string) ([]*unstructured.Unstructured, string, error) {
	c, err := Load()
	if err != nil {
		return nil, "", err
	}
	rel, err := install(c, values)
	if err != nil {
		return nil, "", err
	}
	objs, err := splitObjects(rel.Manifest)
	return objs, rel.Info.Notes, err
}

// install runs a client-only `helm install --dry-run` of c with values.
func install(c *chart.Chart, values string) (*release.Release, error) {
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		return nil, fmt.Errorf("parsing test values: %w", err)
	}
	in := charttest.DryRunInstall(&action.Configuration{}, releaseName, namespace, kubeVersion)
	in.APIVersions = chartutil.VersionSet{"olm.operatorframework.io/v1"}
	return in.Run(c, vals.AsMap())
}

func splitObjects(manifest string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, doc := range releaseutil.SplitManifests(manifest) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return nil, fmt.Errorf("rendered document is not YAML: %w\n%s", err, doc)
		}
		if len(u.Object) == 0 {
			continue
		}
		objs = append(objs, u)
	}
	// SplitManifests returns a map; order like Helm installs.
	sort.SliceStable(objs, func(i, j int) bool { return key(objs[i]) < key(objs[j]) })
	return objs, nil
}

func key(u *unstructured.Unstructured) string {
	ns := u.GetNamespace()
	if ns != "" {
		ns += "/"
	}
	return u.GetKind() + "/" + ns + u.GetName()
}

func keys(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, key(o))
	}
	return out
}

func find(t *testing.T, objs []*unstructured.Unstructured, k string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if key(o) == k {
			return o
		}
	}
	t.Fatalf("no %s among %v", k, keys(objs))
	return nil
}

func str(t *testing.T, u *unstructured.Unstructured, path ...string) string {
	t.Helper()
	s, _, err := unstructured.NestedString(u.Object, path...)
	if err != nil {
		t.Fatalf("%s %v: %v", key(u), path, err)
	}
	return s
}

// TestChartDirectoryAndPackage loads the chart the way the helm CLI does
// from this directory (following the CRD link) and from the archive `helm
// package` writes of it: both render exactly what the embedded chart
// renders, CRD included.
func TestChartDirectoryAndPackage(t *testing.T) {
	want := manifest(t, Load)
	fromDir := func() (*chart.Chart, error) { return loader.Load(".") }
	if got := manifest(t, fromDir); got != want {
		t.Error("the chart loaded from its directory renders differently from the embedded chart (is files/inferencestacks-crd.yaml still a link to crds/?)")
	}
	dir, err := fromDir()
	if err != nil {
		t.Fatal(err)
	}
	archive, err := chartutil.Save(dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got := manifest(t, func() (*chart.Chart, error) { return loader.Load(archive) }); got != want {
		t.Errorf("the packaged chart %s renders differently from the embedded chart", filepath.Base(archive))
	}
}

func manifest(t *testing.T, load func() (*chart.Chart, error)) string {
	t.Helper()
	c, err := load()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := install(c, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rel.Manifest, "kind: CustomResourceDefinition") {
		t.Fatal("no CRD rendered")
	}
	return rel.Manifest
}

// TestRenderedCRDIsCRDsWithKeep compares the rendered CRD object with the
// one in crds/: identical except for the keep annotation and the operator
// namespaces annotation (TestOperatorNamespacesAnnotation).
func TestRenderedCRDIsCRDsWithKeep(t *testing.T) {
	objs := render(t, "")
	u := find(t, objs, "CustomResourceDefinition/inferencestacks.models.takeoff.co")
	ann := u.GetAnnotations()
	if ann[KeepAnnotation] != "keep" {
		t.Fatalf("CRD annotations %v: want %s: keep", ann, KeepAnnotation)
	}
	delete(ann, KeepAnnotation)
	delete(ann, inferencestack.OperatorNamespacesAnnotation)
	u.SetAnnotations(ann)
	got := &apiextensionsv1.CustomResourceDefinition{}
	data, _ := u.MarshalJSON()
	if err := yaml.UnmarshalStrict(data, got); err != nil {
		t.Fatal(err)
	}
	want, err := crds.InferenceStack()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("the rendered CRD differs from crds/models.takeoff.co_inferencestacks.yaml (beyond the keep annotation)")
	}

	if objs := render(t, "crd: {install: false}"); slices.ContainsFunc(objs, func(u *unstructured.Unstructured) bool { return u.GetKind() == "CustomResourceDefinition" }) {
		t.Error("crd.install=false still renders the CRD")
	}
}

// TestOperatorNamespacesAnnotation: the CRD tells the operators where each
// enabled major's operator runs, the namespace this chart installs it in.
func TestOperatorNamespacesAnnotation(t *testing.T) {
	for values, want := range map[string]map[string]string{
		"": {"v0": inferencestack.Namespace("v0")},
		"extensions: {v0: {namespace: ops-zero}, v1: {enabled: true}, v2: {enabled: false}}": {"v0": "ops-zero", "v1": inferencestack.Namespace("v1")},
		"olm: v0\nextensions: {v0: {enabled: false}, v3: {namespace: ops-three}}":            {"v3": "ops-three"},
		"extensions: {v0: {enabled: false}}":                                                 {},
	} {
		u := find(t, render(t, values), "CustomResourceDefinition/inferencestacks.models.takeoff.co")
		raw, ok := u.GetAnnotations()[inferencestack.OperatorNamespacesAnnotation]
		got := map[string]string{}
		if err := yaml.Unmarshal([]byte(raw), &got); !ok || err != nil {
			t.Errorf("values %q: annotation %s = %q (%v)", values, inferencestack.OperatorNamespacesAnnotation, raw, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("values %q: operator namespaces %v, want %v", values, got, want)
		}
	}
}

func TestDefaults(t *testing.T) {
	objs, notes, err := tryRender("")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ClusterCatalog/inference-stack-operator",
		"ClusterExtension/inference-stack-operator-v0",
		"ClusterRole/inference-stack-operator-stacks-edit",
		"ClusterRole/inference-stack-operator-stacks-view",
		"ClusterRole/inference-stack-operator-v0-installer",
		"ClusterRoleBinding/inference-stack-operator-v0-installer",
		"CustomResourceDefinition/inferencestacks.models.takeoff.co",
		"Namespace/inference-stack-operator-v0",
		"Role/inference-stack-operator-v0/inference-stack-operator-v0-installer",
		"RoleBinding/inference-stack-operator-v0/inference-stack-operator-v0-installer",
		"ServiceAccount/inference-stack-operator-v0/inference-stack-operator-v0-installer",
		"ValidatingAdmissionPolicy/inference-stack-operator-gateway-names",
		"ValidatingAdmissionPolicy/inference-stack-operator-ingress",
		"ValidatingAdmissionPolicy/inference-stack-operator-operator-version",
		"ValidatingAdmissionPolicy/inference-stack-operator-placement",
		"ValidatingAdmissionPolicy/inference-stack-operator-pod-security",
		"ValidatingAdmissionPolicyBinding/inference-stack-operator-gateway-names",
		"ValidatingAdmissionPolicyBinding/inference-stack-operator-ingress",
		"ValidatingAdmissionPolicyBinding/inference-stack-operator-operator-version",
		"ValidatingAdmissionPolicyBinding/inference-stack-operator-placement",
		"ValidatingAdmissionPolicyBinding/inference-stack-operator-pod-security",
	}
	if got := keys(objs); !slices.Equal(got, want) {
		t.Fatalf("objects:\n got %v\nwant %v", got, want)
	}

	cc := find(t, objs, "ClusterCatalog/inference-stack-operator")
	ref := str(t, cc, "spec", "source", "image", "ref")
	if !strings.HasPrefix(ref, "docker.io/tytn/operator-catalog@sha256:") || len(ref) != len("docker.io/tytn/operator-catalog@sha256:")+64 {
		t.Errorf("default catalog ref %q: want docker.io/tytn/operator-catalog@sha256:<digest>", ref)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(cc.Object, "spec", "source", "image", "pollIntervalMinutes"); found {
		t.Error("pollIntervalMinutes rendered with a digest reference; OLM rejects that")
	}
	if got := cc.GetLabels()["olm.operatorframework.io/metadata.name"]; got != "inference-stack-operator" {
		t.Errorf("catalog name label %q", got)
	}

	ce := find(t, objs, "ClusterExtension/inference-stack-operator-v0")
	checks := map[string]string{
		"spec.namespace":                              "inference-stack-operator-v0",
		"spec.serviceAccount.name":                    "inference-stack-operator-v0-installer",
		"spec.source.sourceType":                      "Catalog",
		"spec.source.catalog.packageName":             "inference-stack-operator",
		"spec.source.catalog.upgradeConstraintPolicy": "CatalogProvided",
	}
	for path, want := range checks {
		if got := str(t, ce, strings.Split(path, ".")...); got != want {
			t.Errorf("ClusterExtension %s = %q, want %q", path, got, want)
		}
	}
	channels, _, _ := unstructured.NestedStringSlice(ce.Object, "spec", "source", "catalog", "channels")
	if !slices.Equal(channels, []string{"stable-v0"}) {
		t.Errorf("channels %v, want [stable-v0]", channels)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(ce.Object, "spec", "source", "catalog", "version"); found {
		t.Error("version rendered although none was given")
	}
	sel, _, _ := unstructured.NestedStringMap(ce.Object, "spec", "source", "catalog", "selector", "matchLabels")
	if !reflect.DeepEqual(sel, map[string]string{"olm.operatorframework.io/metadata.name": "inference-stack-operator"}) {
		t.Errorf("catalog selector %v: want this chart's catalog only", sel)
	}
	if ce.GetLabels()[MajorLabel] != "v0" {
		t.Errorf("ClusterExtension labels %v: want %s=v0", ce.GetLabels(), MajorLabel)
	}
	for _, want := range []string{"stable-v0", "operatorVersion: v0", "pinned by digest", "helm uninstall catalog",
		"Admission policies: pod-security (at each namespace's pod-security.kubernetes.io/enforce level, baseline by default) operator-version (warns) gateway-names placement (no control-plane or cordoned nodes, no node named, no other namespace's pods followed) ingress (listed annotations only, none naming another namespace's objects)"} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, notes)
		}
	}
}

func TestCatalogReference(t *testing.T) {
	for _, tc := range []struct {
		name, values, ref string
		poll              int64 // 0: absent
	}{
		{"digest", "catalog: {image: {digest: " + digest + "}}", "docker.io/tytn/operator-catalog@" + digest, 0},
		{"tag polls", "catalog: {image: {digest: '', tag: '0.2.0'}, pollIntervalMinutes: 5}", "docker.io/tytn/operator-catalog:0.2.0", 5},
		{"digest wins over tag", "catalog: {image: {digest: " + digest + ", tag: '0.2.0'}}", "docker.io/tytn/operator-catalog@" + digest, 0},
		{"ref by digest", "catalog: {image: {ref: '127.0.0.1:5000/x/cat@" + digest + "'}}", "127.0.0.1:5000/x/cat@" + digest, 0},
		{"ref by tag", "catalog: {image: {ref: 'registry.example/cat:latest'}}", "registry.example/cat:latest", 10},
		{"other repository", "catalog: {image: {repository: quay.io/me/catalog, digest: " + digest + "}}", "quay.io/me/catalog@" + digest, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := find(t, render(t, tc.values), "ClusterCatalog/inference-stack-operator")
			if got := str(t, cc, "spec", "source", "image", "ref"); got != tc.ref {
				t.Errorf("ref %q, want %q", got, tc.ref)
			}
			v, found, _ := unstructured.NestedFieldNoCopy(cc.Object, "spec", "source", "image", "pollIntervalMinutes")
			poll, _ := v.(float64)
			if (tc.poll == 0) == found || int64(poll) != tc.poll {
				t.Errorf("pollIntervalMinutes %v (present %v), want %d", poll, found, tc.poll)
			}
		})
	}
}

// TestTwoMajors: each major gets its own namespace, installer and
// extension pinned to its own channel, and no two objects collide.
func TestTwoMajors(t *testing.T) {
	objs := render(t, `
extensions:
  v0: {channel: stable, version: ">=0.1.0 <0.3.0"}
  v1: {channel: fast}
`)
	seen := map[string]bool{}
	for _, o := range objs {
		if seen[key(o)] {
			t.Errorf("two objects %s", key(o))
		}
		seen[key(o)] = true
	}
	for major, channel := range map[string]string{"v0": "stable-v0", "v1": "fast-v1"} {
		ce := find(t, objs, "ClusterExtension/inference-stack-operator-"+major)
		if got := str(t, ce, "spec", "namespace"); got != "inference-stack-operator-"+major {
			t.Errorf("%s namespace %q", major, got)
		}
		if got := str(t, ce, "spec", "serviceAccount", "name"); got != "inference-stack-operator-"+major+"-installer" {
			t.Errorf("%s service account %q", major, got)
		}
		channels, _, _ := unstructured.NestedStringSlice(ce.Object, "spec", "source", "catalog", "channels")
		if !slices.Equal(channels, []string{channel}) {
			t.Errorf("%s channels %v, want [%s]", major, channels, channel)
		}
		find(t, objs, "Namespace/inference-stack-operator-"+major)
		find(t, objs, "ServiceAccount/inference-stack-operator-"+major+"/inference-stack-operator-"+major+"-installer")
	}
	if got := str(t, find(t, objs, "ClusterExtension/inference-stack-operator-v0"), "spec", "source", "catalog", "version"); got != ">=0.1.0 <0.3.0" {
		t.Errorf("v0 version %q", got)
	}

	// A major added with --set alone gets the defaults.
	objs = render(t, "extensions: {v0: {enabled: false}, v2: {enabled: true}}")
	if got := keys(objs); slices.ContainsFunc(got, func(k string) bool { return strings.Contains(k, "-v0") }) {
		t.Errorf("disabled v0 still rendered: %v", got)
	}
	ce := find(t, objs, "ClusterExtension/inference-stack-operator-v2")
	channels, _, _ := unstructured.NestedStringSlice(ce.Object, "spec", "source", "catalog", "channels")
	if !slices.Equal(channels, []string{"stable-v2"}) {
		t.Errorf("v2 channels %v", channels)
	}
}

// TestInstallerRBAC: the installer holds every rule the CSV grants (the
// operator's RBAC) and no wildcard.
func TestInstallerRBAC(t *testing.T) {
	objs := render(t, "")
	cr := &rbacv1.ClusterRole{}
	data, _ := find(t, objs, "ClusterRole/inference-stack-operator-v0-installer").MarshalJSON()
	if err := yaml.UnmarshalStrict(data, cr); err != nil {
		t.Fatal(err)
	}
	roleYAML, err := os.ReadFile(filepath.Join("..", "..", "operator", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{}
	data, _ = find(t, objs, "Role/inference-stack-operator-v0/inference-stack-operator-v0-installer").MarshalJSON()
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		t.Fatal(err)
	}
	// The operator's ClusterRole rules cluster-wide, its Role's (its
	// Lease) in the install namespace.
	kinds := map[string]int{}
	for _, doc := range bytes.Split(roleYAML, []byte("\n---\n")) {
		var op rbacv1.Role
		if err := yaml.Unmarshal(bytes.TrimPrefix(doc, []byte("---\n")), &op); err != nil {
			t.Fatal(err)
		}
		kinds[op.Kind]++
		installer := map[string][]rbacv1.PolicyRule{"ClusterRole": cr.Rules, "Role": role.Rules}[op.Kind]
		for _, want := range op.Rules {
			if !slices.ContainsFunc(installer, func(r rbacv1.PolicyRule) bool { return reflect.DeepEqual(r, want) }) {
				t.Errorf("installer's %s lacks the operator's rule %+v", op.Kind, want)
			}
		}
	}
	if kinds["ClusterRole"] != 1 || kinds["Role"] > 1 {
		t.Errorf("operator/rbac/role.yaml holds %v, want a ClusterRole (and at most a Role)", kinds)
	}
	// OLM creates the Role and RoleBinding of the CSV's permissions with
	// the installer's account.
	for _, res := range []string{"roles", "rolebindings"} {
		if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.Resources, res) && slices.Contains(r.Verbs, "create")
		}) {
			t.Errorf("the installer cannot create %s in the install namespace: %+v", res, role.Rules)
		}
	}
	for _, rules := range [][]rbacv1.PolicyRule{cr.Rules, role.Rules} {
		for _, r := range rules {
			for _, s := range slices.Concat(r.APIGroups, r.Resources, r.Verbs, r.ResourceNames, r.NonResourceURLs) {
				if strings.Contains(s, "*") {
					t.Errorf("wildcard in installer rule %+v", r)
				}
			}
		}
	}
	// The finalizers rule is limited to this extension.
	if !slices.ContainsFunc(cr.Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Equal(r.Resources, []string{"clusterextensions/finalizers"}) && slices.Equal(r.ResourceNames, []string{"inference-stack-operator-v0"})
	}) {
		t.Error("no clusterextensions/finalizers rule limited to the extension's name")
	}
}

func TestInvalidValues(t *testing.T) {
	for _, tc := range []struct{ name, values, want string }{
		{"major key", "extensions: {latest: {enabled: true}}", "latest"},
		{"channel", "extensions: {v0: {channel: beta}}", "channel"},
		{"digest", "catalog: {image: {digest: 'sha256:abc'}}", "digest"},
		{"nothing to pull", "catalog: {image: {digest: '', tag: ''}}", "catalog.image"},
		{"wildcard extra rule", "extensions: {v0: {installer: {extraRules: [{apiGroups: ['*'], resources: [pods], verbs: [get]}]}}}", "extraRules"},
		{"unknown key", "catalog: {imageRef: x}", "imageRef"},
		{"upgrade policy", "extensions: {v0: {upgradeConstraintPolicy: Always}}", "upgradeConstraintPolicy"},
		{"OLM generation", "olm: v2", "olm"},
		{"OLM generation by --set", "olm: 1", "olm"},
		{"v0: a version range", "olm: v0\nextensions: {v0: {version: '>=0.1.0 <0.3.0'}}", "OLM v0 takes no version range"},
		{"v0: a catalog selector", "olm: v0\nextensions: {v0: {catalogSelector: {matchLabels: {team: ml}}}}", "names one CatalogSource"},
		{"v0: approval", "olm: v0\nolmV0: {installPlanApproval: Sometimes}", "installPlanApproval"},
		{"v0: per-major approval", "olm: v0\nextensions: {v0: {installPlanApproval: automatic}}", "installPlanApproval"},
		{"v0: security config", "olm: v0\nolmV0: {catalogSource: {securityContextConfig: privileged}}", "securityContextConfig"},
		{"v0: catalog namespace", "olm: v0\nolmV0: {catalogSource: {namespace: ''}}", "namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := tryRender(tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// TestLint runs Helm's linter in strict mode (warnings fail) over the chart
// directory with several value sets.
func TestLint(t *testing.T) {
	for name, values := range map[string]map[string]any{
		"defaults": nil,
		"tag":      {"catalog": map[string]any{"image": map[string]any{"digest": "", "tag": "0.1.0"}}},
		"two majors": {"extensions": map[string]any{
			"v0": map[string]any{"channel": "fast"},
			"v1": map[string]any{"enabled": true, "version": ">=1.0.0 <1.5.0"},
		}},
	} {
		t.Run(name, func(t *testing.T) {
			charttest.Lint(t, namespace, kubeVersion, values)
		})
	}
}

// TestValuesDocumented: every key of values.yaml is preceded by a comment
// or is self-explanatory within a commented block, and described in the
// schema.
func TestValuesDocumented(t *testing.T) {
	data, err := os.ReadFile("values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	undocumented := []string{}
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") || !strings.Contains(trimmed, ":") {
			continue
		}
		k := strings.TrimSuffix(strings.Fields(trimmed)[0], ":")
		// Maps of free-form labels/annotations and nested blocks whose
		// parent comment explains them.
		if slices.Contains([]string{"labels", "annotations", "image", "installer", "v0", "crd", "catalog", "catalogSource", "extensions", "admissionPolicies", "guards"}, k) {
			continue
		}
		if i == 0 || !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "#") {
			undocumented = append(undocumented, k)
		}
	}
	if len(undocumented) > 0 {
		t.Errorf("values.yaml keys without a comment above them: %v", undocumented)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"crd.install", "catalog.image.digest", "catalog.image.tag", "catalog.pollIntervalMinutes", "extensions.<major>.channel", "extensions.<major>.version", "extensions.<major>.installer", "guards.stacksBeforeExtensions",
		"admissionPolicies.podSecurity.enabled", "admissionPolicies.operatorVersion.enabled", "admissionPolicies.gatewayNames.enabled",
		"admissionPolicies.placement.enabled", "admissionPolicies.ingress.enabled", "admissionPolicies.ingress.extraAllowedAnnotations",
		"olm", "olmV0.catalogSource.namespace", "olmV0.catalogSource.securityContextConfig", "olmV0.installPlanApproval", "extensions.<major>.installPlanApproval"} {
		if !strings.Contains(string(readme), k) {
			t.Errorf("README.md does not document %s", k)
		}
	}
}

// TestAgreesWithProjectFacts fails when the chart's values or templates name
// things differently from the project's facts (package inferencestack),
// which the bundle, the operator and the end-to-end tests use: the package
// and catalog names, the major this source builds, the channel of an
// archetype and every per-major name.
func TestAgreesWithProjectFacts(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Values["packageName"]; got != inferencestack.PackageName {
		t.Errorf("values.yaml packageName %q, want %q", got, inferencestack.PackageName)
	}
	if got, _ := c.Values["catalog"].(map[string]any)["name"]; got != inferencestack.CatalogName {
		t.Errorf("values.yaml catalog.name %q, want %q", got, inferencestack.CatalogName)
	}
	major, err := inferencestack.MajorOf(inferencestack.Version())
	if err != nil {
		t.Fatal(err)
	}
	ext, _ := c.Values["extensions"].(map[string]any)[major].(map[string]any)
	if ext == nil || ext["enabled"] != true || ext["channel"] != inferencestack.Stable {
		t.Errorf("values.yaml extensions.%s = %v: want the major this source builds enabled on the %s channel", major, ext, inferencestack.Stable)
	}

	other := "v7"
	objs := render(t, fmt.Sprintf("extensions: {%s: {channel: %s}, %s: {enabled: true, channel: %s}}", major, inferencestack.Stable, other, inferencestack.Fast))
	find(t, objs, "ClusterCatalog/"+inferencestack.CatalogName)
	for m, archetype := range map[string]string{major: inferencestack.Stable, other: inferencestack.Fast} {
		ns, sa := inferencestack.Namespace(m), inferencestack.InstallerName(m)
		ce := find(t, objs, "ClusterExtension/"+inferencestack.ExtensionName(m))
		for path, want := range map[string]string{
			"spec.namespace":                  ns,
			"spec.serviceAccount.name":        sa,
			"spec.source.catalog.packageName": inferencestack.PackageName,
		} {
			if got := str(t, ce, strings.Split(path, ".")...); got != want {
				t.Errorf("ClusterExtension %s %s = %q, want %q", m, path, got, want)
			}
		}
		channels, _, _ := unstructured.NestedStringSlice(ce.Object, "spec", "source", "catalog", "channels")
		if want := inferencestack.Channel(archetype, m); !slices.Equal(channels, []string{want}) {
			t.Errorf("ClusterExtension %s channels %v, want [%s]", m, channels, want)
		}
		for _, k := range []string{"Namespace/" + ns, "ServiceAccount/" + ns + "/" + sa, "ClusterRole/" + sa, "Role/" + ns + "/" + sa} {
			find(t, objs, k)
		}
	}
}

// ciValues returns the value files of ci/ (the chart-testing convention),
// by file name.
func ciValues(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = string(data)
	}
	if len(out) == 0 {
		t.Fatal("no ci/*-values.yaml")
	}
	return out
}

// olmKinds are the kinds only one OLM generation's mode renders.
var olmKinds = map[string][]string{
	"v1": {"ClusterCatalog", "ClusterExtension"},
	"v0": {"CatalogSource", "OperatorGroup", "Subscription"},
}

// TestCIValues renders and lints each ci/ values file: one per OLM
// generation, each rendering that generation's objects and none of the
// other's, with the same CRD and per-major namespace and installer.
func TestCIValues(t *testing.T) {
	files := ciValues(t)
	for _, mode := range []string{"v1", "v0"} {
		name := "olm-" + mode + "-values.yaml"
		values, ok := files[name]
		if !ok {
			t.Errorf("no ci/%s", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			objs := render(t, values)
			kinds := map[string]int{}
			for _, o := range objs {
				kinds[o.GetKind()]++
			}
			for m, ks := range olmKinds {
				for _, k := range ks {
					if (m == mode) != (kinds[k] > 0) {
						t.Errorf("OLM %s mode renders %d %s", mode, kinds[k], k)
					}
				}
			}
			for _, k := range []string{
				"CustomResourceDefinition/inferencestacks.models.takeoff.co",
				"Namespace/" + inferencestack.Namespace("v0"),
				"ServiceAccount/" + inferencestack.Namespace("v0") + "/" + inferencestack.InstallerName("v0"),
				"ClusterRole/" + inferencestack.InstallerName("v0"),
			} {
				find(t, objs, k)
			}
			vals, err := chartutil.ReadValues([]byte(values))
			if err != nil {
				t.Fatal(err)
			}
			charttest.Lint(t, namespace, kubeVersion, vals.AsMap())
		})
	}
}

// TestOLMv0 checks the OLM v0 objects: the CatalogSource pinned by digest
// (polled only for a tag) in OLM's catalog namespace, and per major an
// AllNamespaces OperatorGroup scoped to the installer account and a
// Subscription on the major's channel.
func TestOLMv0(t *testing.T) {
	objs, notes, err := tryRender("olm: v0\ncatalog: {image: {digest: " + digest + "}}")
	if err != nil {
		t.Fatal(err)
	}
	ns := inferencestack.Namespace("v0")
	name := inferencestack.ExtensionName("v0")
	want := []string{
		"CatalogSource/olm/" + inferencestack.CatalogName,
		"ClusterRole/" + inferencestack.CatalogName + "-stacks-edit",
		"ClusterRole/" + inferencestack.CatalogName + "-stacks-view",
		"ClusterRole/" + inferencestack.InstallerName("v0"),
		"ClusterRoleBinding/" + inferencestack.InstallerName("v0"),
		"CustomResourceDefinition/inferencestacks.models.takeoff.co",
		"Namespace/" + ns,
		"OperatorGroup/" + ns + "/" + name,
		"Role/" + ns + "/" + inferencestack.InstallerName("v0"),
		"RoleBinding/" + ns + "/" + inferencestack.InstallerName("v0"),
		"ServiceAccount/" + ns + "/" + inferencestack.InstallerName("v0"),
		"Subscription/" + ns + "/" + name,
	}
	// The admission policies do not depend on the OLM generation.
	for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		for _, p := range []string{"gateway-names", "ingress", "operator-version", "placement", "pod-security"} {
			want = append(want, kind+"/"+inferencestack.CatalogName+"-"+p)
		}
	}
	if got := keys(objs); !slices.Equal(got, want) {
		t.Fatalf("objects:\n got %v\nwant %v", got, want)
	}
	cs := find(t, objs, "CatalogSource/olm/"+inferencestack.CatalogName)
	for path, want := range map[string]string{
		"spec.sourceType": "grpc",
		"spec.image":      "docker.io/tytn/operator-catalog@" + digest,
		"spec.grpcPodConfig.securityContextConfig": "restricted",
	} {
		if got := str(t, cs, strings.Split(path, ".")...); got != want {
			t.Errorf("CatalogSource %s = %q, want %q", path, got, want)
		}
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(cs.Object, "spec", "updateStrategy"); found {
		t.Error("a CatalogSource pinned by digest polls")
	}
	og := find(t, objs, "OperatorGroup/"+ns+"/"+name)
	for _, f := range []string{"targetNamespaces", "selector", "staticProvidedAPIs"} {
		if _, found, _ := unstructured.NestedFieldNoCopy(og.Object, "spec", f); found {
			t.Errorf("OperatorGroup spec.%s set: AllNamespaces needs neither targetNamespaces nor a selector", f)
		}
	}
	if got := str(t, og, "spec", "serviceAccountName"); got != inferencestack.InstallerName("v0") {
		t.Errorf("OperatorGroup serviceAccountName %q, want the installer", got)
	}
	sub := find(t, objs, "Subscription/"+ns+"/"+name)
	for path, want := range map[string]string{
		"spec.name":                inferencestack.PackageName,
		"spec.channel":             inferencestack.Channel(inferencestack.Stable, "v0"),
		"spec.source":              inferencestack.CatalogName,
		"spec.sourceNamespace":     "olm",
		"spec.installPlanApproval": "Automatic",
	} {
		if got := str(t, sub, strings.Split(path, ".")...); got != want {
			t.Errorf("Subscription %s = %q, want %q", path, got, want)
		}
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(sub.Object, "spec", "startingCSV"); found {
		t.Error("startingCSV rendered although no version was given")
	}
	if sub.GetLabels()[MajorLabel] != "v0" {
		t.Errorf("Subscription labels %v", sub.GetLabels())
	}
	// The installer may write what OLM v0 creates with it, and nothing of
	// OLM v1.
	cr := find(t, objs, "ClusterRole/"+inferencestack.InstallerName("v0"))
	if data, _ := cr.MarshalJSON(); bytes.Contains(data, []byte("clusterextensions")) {
		t.Error("the OLM v0 installer holds an OLM v1 rule")
	}
	role := &rbacv1.Role{}
	data, _ := find(t, objs, "Role/"+ns+"/"+inferencestack.InstallerName("v0")).MarshalJSON()
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Equal(r.APIGroups, []string{"operators.coreos.com"}) && slices.Contains(r.Resources, "clusterserviceversions") && slices.Contains(r.Verbs, "create")
	}) {
		t.Errorf("the installer Role cannot create the CSV: %+v", role.Rules)
	}
	for _, want := range []string{"OLM v0", "CatalogSource olm/" + inferencestack.CatalogName, "pinned by digest", "Subscription " + ns + "/" + name, "stable-v0", "install plans Automatic", "kubectl get catalogsources"} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, notes)
		}
	}

	// A tag polls; two majors side by side, each in its own namespace with
	// its own approval and starting version; no installer: no scoping.
	objs = render(t, `
olm: v0
catalog: {image: {digest: '', tag: '0.2.0'}, pollIntervalMinutes: 15}
olmV0: {catalogSource: {namespace: openshift-marketplace, secrets: [pull-me]}, installPlanApproval: Manual}
extensions:
  v0: {channel: fast, version: 0.1.2}
  v1: {enabled: true, installPlanApproval: Automatic, installer: {create: false}}
`)
	cs = find(t, objs, "CatalogSource/openshift-marketplace/"+inferencestack.CatalogName)
	if got := str(t, cs, "spec", "updateStrategy", "registryPoll", "interval"); got != "15m" {
		t.Errorf("poll interval %q, want 15m", got)
	}
	if secrets, _, _ := unstructured.NestedStringSlice(cs.Object, "spec", "secrets"); !slices.Equal(secrets, []string{"pull-me"}) {
		t.Errorf("pull secrets %v", secrets)
	}
	for major, w := range map[string]struct{ channel, approval, startingCSV string }{
		"v0": {"fast-v0", "Manual", inferencestack.PackageName + ".v0.1.2"},
		"v1": {"stable-v1", "Automatic", ""},
	} {
		ns, name := inferencestack.Namespace(major), inferencestack.ExtensionName(major)
		sub := find(t, objs, "Subscription/"+ns+"/"+name)
		if got := str(t, sub, "spec", "channel"); got != w.channel {
			t.Errorf("%s channel %q, want %q", major, got, w.channel)
		}
		if got := str(t, sub, "spec", "installPlanApproval"); got != w.approval {
			t.Errorf("%s installPlanApproval %q, want %q", major, got, w.approval)
		}
		if got := str(t, sub, "spec", "startingCSV"); got != w.startingCSV {
			t.Errorf("%s startingCSV %q, want %q", major, got, w.startingCSV)
		}
		if got := str(t, sub, "spec", "sourceNamespace"); got != "openshift-marketplace" {
			t.Errorf("%s sourceNamespace %q", major, got)
		}
		find(t, objs, "OperatorGroup/"+ns+"/"+name)
	}
	if got := str(t, find(t, objs, "OperatorGroup/"+inferencestack.Namespace("v1")+"/"+inferencestack.ExtensionName("v1")), "spec", "serviceAccountName"); got != "" {
		t.Errorf("v1 OperatorGroup scoped to %q although it has no installer", got)
	}

	// catalog.create false: the Subscriptions use the named CatalogSource.
	objs = render(t, "olm: v0\ncatalog: {create: false, name: company-catalog}")
	if slices.ContainsFunc(objs, func(u *unstructured.Unstructured) bool { return u.GetKind() == "CatalogSource" }) {
		t.Error("catalog.create=false still renders a CatalogSource")
	}
	if got := str(t, find(t, objs, "Subscription/"+ns+"/"+name), "spec", "source"); got != "company-catalog" {
		t.Errorf("source %q", got)
	}
}

// Each admission policy comes and goes with its switch, its binding with
// it; the pod-security and placement bindings select every namespace (the
// policies read each namespace's label themselves).
func TestAdmissionPolicySwitches(t *testing.T) {
	for values, want := range map[string][]string{
		"admissionPolicies: {podSecurity: {enabled: false}, operatorVersion: {enabled: false}, gatewayNames: {enabled: false}, placement: {enabled: false}, ingress: {enabled: false}}": nil,
		"admissionPolicies: {podSecurity: {enabled: false}, gatewayNames: {enabled: false}, ingress: {enabled: false}}": {
			"inference-stack-operator-operator-version", "inference-stack-operator-placement"},
		"admissionPolicies: {podSecurity: {enabled: false}, gatewayNames: {enabled: false}, placement: {enabled: false}}": {
			"inference-stack-operator-ingress", "inference-stack-operator-operator-version"},
		"admissionPolicies: {podSecurity: {enabled: true}}": {
			"inference-stack-operator-gateway-names", "inference-stack-operator-ingress", "inference-stack-operator-operator-version",
			"inference-stack-operator-placement", "inference-stack-operator-pod-security"},
	} {
		objs, notes, err := tryRender(values)
		if err != nil {
			t.Fatalf("%s: %v", values, err)
		}
		var policies, bindings []string
		for _, o := range objs {
			switch o.GetKind() {
			case "ValidatingAdmissionPolicy":
				policies = append(policies, o.GetName())
			case "ValidatingAdmissionPolicyBinding":
				bindings = append(bindings, o.GetName())
				if o.GetName() == "inference-stack-operator-pod-security" || o.GetName() == "inference-stack-operator-placement" {
					if sel, found, _ := unstructured.NestedMap(o.Object, "spec", "matchResources"); found {
						t.Errorf("%s: %s binding narrows what it matches: %v", values, o.GetName(), sel)
					}
				}
			}
		}
		if !slices.Equal(policies, want) || !slices.Equal(bindings, want) {
			t.Errorf("%s: policies %v, bindings %v, want %v", values, policies, bindings, want)
		}
		if want == nil && !strings.Contains(notes, "Admission policies: none") {
			t.Errorf("%s: NOTES do not say no policy is in force:\n%s", values, notes)
		}
	}
}

// The platform's ingress annotations add to the allow-list but cannot lift
// what the policy refuses whatever the lists say, nor be wildcards: such a
// value fails the install, naming the key, rather than leave a key that
// never passes or a pattern the policy does not read.
func TestExtraAllowedAnnotations(t *testing.T) {
	objs := render(t, "admissionPolicies: {ingress: {extraAllowedAnnotations: [nginx.ingress.kubernetes.io/proxy-buffer-size, example.com/route]}}")
	policy := find(t, objs, "ValidatingAdmissionPolicy/inference-stack-operator-ingress")
	data, _ := policy.MarshalJSON()
	for _, want := range []string{`\"nginx.ingress.kubernetes.io/proxy-buffer-size\"`, `\"example.com/route\"`, `\"nginx.ingress.kubernetes.io/rewrite-target\"`} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("the ingress policy does not list %s", want)
		}
	}
	for key, want := range map[string]string{
		"nginx.ingress.kubernetes.io/configuration-snippet": "ends in -snippet",
		"nginx.org/location-snippets":                       "ends in -snippets",
		"nginx.ingress.kubernetes.io/auth-url":              "is refused whatever the lists say",
		"nginx.ingress.kubernetes.io/Permanent-Redirect":    "is refused whatever the lists say",
		"cert-manager.io/*":                                 "extraAllowedAnnotations",
		"nginx.ingress.kubernetes.io/":                      "extraAllowedAnnotations",
	} {
		_, _, err := tryRender("admissionPolicies: {ingress: {extraAllowedAnnotations: [" + key + "]}}")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", key, err, want)
		}
	}
}
