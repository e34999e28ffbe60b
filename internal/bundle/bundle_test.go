package bundle

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	inferencestack "github.com/titanml/inference-stack-operator"
)

const (
	repoRoot = "../.."
	opImage  = "docker.io/tytn/operator@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

func fixtureInputs(t *testing.T) Inputs {
	t.Helper()
	base, err := os.ReadFile(filepath.Join(repoRoot, BaseCSVPath))
	if err != nil {
		t.Fatal(err)
	}
	role, err := os.ReadFile("testdata/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return Inputs{BaseCSV: base, RBAC: role}
}

func generate(t *testing.T, in Inputs, version string) (*Bundle, string) {
	t.Helper()
	b, err := Generate(in, Options{Version: semver.MustParse(version), OperatorImage: opImage})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := b.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	return b, dir
}

func csvOf(t *testing.T, b *Bundle) *operatorsv1alpha1.ClusterServiceVersion {
	t.Helper()
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	if err := yaml.UnmarshalStrict(b.Files[CSVPath], csv); err != nil {
		t.Fatal(err)
	}
	return csv
}

func TestGeneratedBundleIsValid(t *testing.T) {
	_, dir := generate(t, fixtureInputs(t), "0.1.0")
	r := ValidateDir(dir)
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	for _, w := range r.Warnings {
		t.Log(w)
	}
}

func TestCSVContent(t *testing.T) {
	b, _ := generate(t, fixtureInputs(t), "0.1.0")
	csv := csvOf(t, b)
	if csv.Name != "inference-stack-operator.v0.1.0" || csv.Spec.Version.String() != "0.1.0" {
		t.Errorf("name %s version %s", csv.Name, csv.Spec.Version)
	}
	if csv.Annotations["containerImage"] != opImage {
		t.Errorf("containerImage %q", csv.Annotations["containerImage"])
	}
	if len(csv.Spec.RelatedImages) != 1 || csv.Spec.RelatedImages[0].Image != opImage {
		t.Errorf("relatedImages %+v", csv.Spec.RelatedImages)
	}
	for _, m := range csv.Spec.InstallModes {
		if m.Supported != (m.Type == operatorsv1alpha1.InstallModeTypeAllNamespaces) {
			t.Errorf("install mode %s supported=%v", m.Type, m.Supported)
		}
	}
	if n := len(csv.Spec.CustomResourceDefinitions.Owned) + len(csv.Spec.CustomResourceDefinitions.Required); n != 0 {
		t.Errorf("the CSV lists %d CRDs; the InferenceStack CRD must be neither owned nor required", n)
	}
	deps := csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs
	if len(deps) != 1 {
		t.Fatalf("%d deployments", len(deps))
	}
	pod := deps[0].Spec.Template.Spec
	c := pod.Containers[0]
	if c.Image != opImage {
		t.Errorf("image %s, want the operator pinned by digest", c.Image)
	}
	wantArgs := "--leader-elect --leader-election-id=inference-stack-operator-v0.models.takeoff.co --metrics-bind-address=:8443 --health-probe-bind-address=:8081 --graceful-shutdown-timeout=30s"
	if got := strings.Join(c.Args, " "); got != wantArgs {
		t.Errorf("args %q, want %q", got, wantArgs)
	}
	// The kubelet must not kill the operator before its graceful shutdown
	// (in-flight Helm operations finish, the lease is released) is over.
	if r := deps[0].Spec.Replicas; r == nil || *r != 2 {
		t.Errorf("replicas %v, want a leader and a warm standby", r)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g <= 30 {
		t.Errorf("terminationGracePeriodSeconds %v, want more than the 30s graceful shutdown", g)
	}
	sc := c.SecurityContext
	if sc == nil || !*sc.RunAsNonRoot || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("security context %+v", sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v", c.Resources)
	}
	if c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Port.String() != "health" {
		t.Errorf("probes %+v %+v", c.LivenessProbe, c.ReadinessProbe)
	}
	for _, p := range c.Ports {
		if (p.Name == "health" && p.ContainerPort != 8081) || (p.Name == "metrics" && p.ContainerPort != 8443) {
			t.Errorf("port %+v", p)
		}
	}
	perms := csv.Spec.InstallStrategy.StrategySpec.ClusterPermissions
	if len(perms) != 1 || perms[0].ServiceAccountName != pod.ServiceAccountName || pod.ServiceAccountName != "inference-stack-operator-v0" {
		t.Fatalf("cluster permissions %+v for service account %s", perms, pod.ServiceAccountName)
	}
	var role rbacv1.ClusterRole
	data, _ := os.ReadFile("testdata/role.yaml")
	if err := yaml.Unmarshal(data, &role); err != nil {
		t.Fatal(err)
	}
	a, _ := yaml.Marshal(role.Rules)
	bb, _ := yaml.Marshal(perms[0].Rules)
	if !bytes.Equal(a, bb) {
		t.Errorf("clusterPermissions differ from the role:\n%s\nvs\n%s", bb, a)
	}
	// The Role's rules are granted in the install namespace.
	ns := csv.Spec.InstallStrategy.StrategySpec.Permissions
	if len(ns) != 1 || ns[0].ServiceAccountName != pod.ServiceAccountName ||
		!allows(ns[0].Rules, "coordination.k8s.io", "leases", "update") || allows(perms[0].Rules, "coordination.k8s.io", "leases", "update") {
		t.Errorf("permissions %+v: want the Role's lease rule, namespaced only", ns)
	}
}

// timestamp matches RFC 3339 dates and the keys that carry times.
var timestamp = regexp.MustCompile(`\d{4}-\d{2}-\d{2}T\d{2}:\d{2}|createdAt|creationTimestamp`)

func TestNoTimestampsAndDeterministic(t *testing.T) {
	a, _ := generate(t, fixtureInputs(t), "0.1.0")
	b, _ := generate(t, fixtureInputs(t), "0.1.0")
	for _, p := range a.Paths() {
		if m := timestamp.Find(a.Files[p]); m != nil {
			t.Errorf("%s contains %q", p, m)
		}
		if !bytes.Equal(a.Files[p], b.Files[p]) {
			t.Errorf("%s differs between two generations", p)
		}
	}
}

func TestNamesCarryTheMajor(t *testing.T) {
	b, dir := generate(t, fixtureInputs(t), "1.4.2")
	if err := ValidateDir(dir).Err(); err != nil {
		t.Fatal(err)
	}
	for _, p := range b.Paths() {
		var obj struct {
			Kind     string
			Metadata struct{ Name, Namespace string }
		}
		if err := yaml.Unmarshal(b.Files[p], &obj); err != nil {
			t.Fatal(err)
		}
		switch obj.Kind {
		case "ClusterRole", "ClusterRoleBinding", "PriorityClass", "CustomResourceDefinition":
			if !strings.Contains(obj.Metadata.Name, "-v1") {
				t.Errorf("cluster-scoped %s %s does not carry the major", obj.Kind, obj.Metadata.Name)
			}
		}
	}
	csv := csvOf(t, b)
	dep := csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0]
	if dep.Name != "inference-stack-operator-v1" || !strings.Contains(strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " "), "inference-stack-operator-v1.models.takeoff.co") {
		t.Errorf("deployment %s args %v", dep.Name, dep.Spec.Template.Spec.Containers[0].Args)
	}
	ann := string(b.Files[AnnotationsFile])
	if !strings.Contains(ann, "stable-v1,fast-v1") || !strings.Contains(ann, "registry+v1") {
		t.Errorf("annotations:\n%s", ann)
	}
}

func TestGenerateRejectsBadInputs(t *testing.T) {
	good := fixtureInputs(t)
	cases := map[string]struct {
		in    Inputs
		image string
		want  string
	}{
		"tag image": {good, "docker.io/tytn/operator:0.1.0", "tag reference"},
		"wildcard verb": {Inputs{BaseCSV: good.BaseCSV, RBAC: []byte("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: x}\nrules:\n- apiGroups: ['']\n  resources: [pods]\n  verbs: ['*']\n")},
			opImage, "wildcard"},
		"wildcard resource": {Inputs{BaseCSV: good.BaseCSV, RBAC: []byte("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: x}\nrules:\n- apiGroups: ['']\n  resources: ['*']\n  verbs: [get]\n")},
			opImage, "wildcard"},
		"no cluster role": {Inputs{BaseCSV: good.BaseCSV, RBAC: []byte("# empty\n")}, opImage, "no ClusterRole"},
		"other kind":      {Inputs{BaseCSV: good.BaseCSV, RBAC: []byte("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x}\n")}, opImage, "want ClusterRole or Role"},
		"role elsewhere": {Inputs{BaseCSV: good.BaseCSV, RBAC: append(append([]byte(nil), good.RBAC...), "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: x, namespace: kube-system}\nrules:\n- apiGroups: ['']\n  resources: [secrets]\n  verbs: [get]\n"...)},
			opImage, "only in the operator's install namespace"},
		"owned field": {Inputs{BaseCSV: append(append([]byte(nil), good.BaseCSV...), "  replaces: inference-stack-operator.v0.0.1\n"...), RBAC: good.RBAC}, opImage, "spec.replaces"},
		"createdAt":   {Inputs{BaseCSV: bytes.Replace(good.BaseCSV, []byte("    support: TitanML\n"), []byte("    support: TitanML\n    createdAt: \"2024-01-01\"\n"), 1), RBAC: good.RBAC}, opImage, "createdAt"},
		"unknown key": {Inputs{BaseCSV: append(append([]byte(nil), good.BaseCSV...), "  displayname2: x\n"...), RBAC: good.RBAC}, opImage, "unknown field"},
		"owned CRD":   {Inputs{BaseCSV: append(append([]byte(nil), good.BaseCSV...), "  customresourcedefinitions:\n    owned:\n    - name: inferencestacks.models.takeoff.co\n      version: v1alpha1\n      kind: InferenceStack\n"...), RBAC: good.RBAC}, opImage, "customresourcedefinitions"},
	}
	for name, c := range cases {
		_, err := Generate(c.in, Options{Version: semver.MustParse("0.1.0"), OperatorImage: c.image})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, c.want)
		}
	}
}

// TestOLMv1Rules plants each violation OLM v1 rejects into a valid bundle.
func TestOLMv1Rules(t *testing.T) {
	edit := func(t *testing.T, mutate func(csv map[string]any, dir string)) Report {
		t.Helper()
		b, dir := generate(t, fixtureInputs(t), "0.1.0")
		p := CSVPath
		var csv map[string]any
		if err := yaml.Unmarshal(b.Files[p], &csv); err != nil {
			t.Fatal(err)
		}
		mutate(csv, dir)
		data, _ := yaml.Marshal(csv)
		if err := os.WriteFile(filepath.Join(dir, p), data, 0o644); err != nil {
			t.Fatal(err)
		}
		return ValidateDir(dir)
	}
	spec := func(csv map[string]any) map[string]any { return csv["spec"].(map[string]any) }
	cases := map[string]struct {
		mutate func(csv map[string]any, dir string)
		want   string
	}{
		"no AllNamespaces": {func(csv map[string]any, _ string) {
			spec(csv)["installModes"] = []any{map[string]any{"type": "OwnNamespace", "supported": true}, map[string]any{"type": "AllNamespaces", "supported": false}}
		}, "AllNamespaces"},
		"owned CRD not shipped": {func(csv map[string]any, _ string) {
			spec(csv)["customresourcedefinitions"] = map[string]any{"owned": []any{map[string]any{"name": "inferencestacks.models.takeoff.co", "version": "v1alpha1", "kind": "InferenceStack"}}}
		}, "does not ship"},
		"required CRD": {func(csv map[string]any, _ string) {
			spec(csv)["customresourcedefinitions"] = map[string]any{"required": []any{map[string]any{"name": "inferencestacks.models.takeoff.co", "version": "v1alpha1", "kind": "InferenceStack"}}}
		}, "olm.gvk.required"},
		"dependencies file": {func(_ map[string]any, dir string) {
			os.WriteFile(filepath.Join(dir, "metadata", "dependencies.yaml"), []byte("dependencies:\n- type: olm.package\n  value:\n    packageName: foo\n    version: \">0.1.0\"\n"), 0o644)
		}, "dependencies"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := edit(t, c.mutate)
			if err := r.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// TestRepositoryInputs generates the bundle from the repository's own
// inputs (bundle/csv.base.yaml and the operator's generated RBAC) and checks
// that the RBAC covers everything the operator does: its own kind with
// status and finalizers, Helm's release Secrets, Events, the metrics
// endpoint's token and access reviews, and every kind the chart can
// create; Leases: reading any (another major's), writing only in the
// install namespace (its own, for leader election).
func TestRepositoryInputs(t *testing.T) {
	in, err := LoadInputs(repoRoot)
	if os.IsNotExist(err) || (err != nil && strings.Contains(err.Error(), "no such file")) {
		t.Skipf("repository inputs not present yet: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, dir := generate(t, in, "0.1.0")
	if err := ValidateDir(dir).Err(); err != nil {
		t.Fatal(err)
	}
	strategy := csvOf(t, b).Spec.InstallStrategy.StrategySpec
	rules := strategy.ClusterPermissions[0].Rules
	crud := []string{"create", "delete", "get", "list", "patch", "update", "watch"}
	need := []struct {
		group, resource string
		verbs           []string
	}{
		{"models.takeoff.co", "inferencestacks", []string{"get", "list", "watch", "update", "patch"}},
		{"models.takeoff.co", "inferencestacks/status", []string{"get", "update", "patch"}},
		{"models.takeoff.co", "inferencestacks/finalizers", []string{"update"}},
		{"", "secrets", crud},
		{"", "events", []string{"create", "patch"}},
		{"coordination.k8s.io", "leases", []string{"get"}},
		{"apiextensions.k8s.io", "customresourcedefinitions", []string{"get"}},
		{"authentication.k8s.io", "tokenreviews", []string{"create"}},
		{"authorization.k8s.io", "subjectaccessreviews", []string{"create"}},
	}
	kinds, err := chartKinds(filepath.Join(repoRoot, "charts", "inference-stack", "templates"))
	if err != nil {
		t.Logf("chart templates not checked: %v", err)
	}
	for _, gvk := range kinds {
		gvr, _ := meta.UnsafeGuessKindToResource(gvk)
		need = append(need, struct {
			group, resource string
			verbs           []string
		}{gvr.Group, gvr.Resource, crud})
	}
	for _, n := range need {
		for _, v := range n.verbs {
			if !allows(rules, n.group, n.resource, v) {
				t.Errorf("clusterPermissions do not allow %s on %s (group %q)", v, n.resource, n.group)
			}
		}
	}
	// Leader election gets, creates and renews the operator's own Lease;
	// nothing lists, watches, patches or deletes Leases. (OLM grants an
	// all-namespaces operator's namespaced permissions cluster-wide, so
	// the leader election's verbs are cluster permissions.)
	for _, v := range []string{"get", "create", "update"} {
		if !allows(rules, "coordination.k8s.io", "leases", v) {
			t.Errorf("clusterPermissions do not allow %s on leases (leader election)", v)
		}
	}
	for _, v := range []string{"delete", "list", "patch", "watch"} {
		if allows(rules, "coordination.k8s.io", "leases", v) {
			t.Errorf("clusterPermissions allow %s on leases, which nothing of the operator does", v)
		}
	}
	for _, r := range rules {
		if slices.Contains(r.Resources, "customresourcedefinitions") && !slices.Equal(r.ResourceNames, []string{"inferencestacks.models.takeoff.co"}) {
			t.Errorf("clusterPermissions reach CRDs other than the stacks': %+v", r)
		}
	}
	t.Logf("checked %d permissions, including chart kinds %v", len(need), kinds)
}

func allows(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	has := func(list []string, s string) bool {
		for _, x := range list {
			if x == s {
				return true
			}
		}
		return false
	}
	for _, r := range rules {
		if has(r.APIGroups, group) && has(r.Resources, resource) && has(r.Verbs, verb) {
			return true
		}
	}
	return false
}

var (
	apiVersionLine = regexp.MustCompile(`(?m)^apiVersion:\s*([A-Za-z0-9./-]+)\s*$`)
	kindLine       = regexp.MustCompile(`(?m)^kind:\s*([A-Za-z]+)\s*$`)
)

// chartKinds scans the chart's templates for the top-level apiVersion/kind
// pairs of the objects they create.
func chartKinds(dir string) ([]schema.GroupVersionKind, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, os.ErrNotExist
	}
	seen := map[schema.GroupVersionKind]bool{}
	var out []schema.GroupVersionKind
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, doc := range strings.Split(string(data), "\n---") {
			av, k := apiVersionLine.FindStringSubmatch(doc), kindLine.FindStringSubmatch(doc)
			if av == nil || k == nil {
				continue
			}
			gv, err := schema.ParseGroupVersion(av[1])
			if err != nil {
				return nil, err
			}
			gvk := gv.WithKind(k[1])
			if !seen[gvk] {
				seen[gvk] = true
				out = append(out, gvk)
			}
		}
	}
	return out, nil
}

// TestCSVAgreesWithProjectFacts fails when the bundle of the repository's
// VERSION names things differently from the project's facts (package
// inferencestack), which the operator, the catalog chart and the
// end-to-end tests use: package, CSV name, channels, the operator's
// Deployment and ServiceAccount, and its leader-election lease.
func TestCSVAgreesWithProjectFacts(t *testing.T) {
	v, err := inferencestack.ParseVersion(inferencestack.Version())
	if err != nil {
		t.Fatal(err)
	}
	major := inferencestack.Major(v)
	b, _ := generate(t, fixtureInputs(t), v.String())
	csv := csvOf(t, b)
	if want := inferencestack.PackageName + ".v" + v.String(); csv.Name != want {
		t.Errorf("CSV name %q, want %q", csv.Name, want)
	}
	ann := map[string]map[string]string{}
	if err := yaml.Unmarshal(b.Files[AnnotationsFile], &ann); err != nil {
		t.Fatal(err)
	}
	if got := ann["annotations"][LabelPackage]; got != inferencestack.PackageName {
		t.Errorf("package annotation %q, want %q", got, inferencestack.PackageName)
	}
	var chans []string
	for _, a := range inferencestack.DefaultArchetypes() {
		chans = append(chans, inferencestack.Channel(a, major))
	}
	if got := ann["annotations"][LabelChannels]; got != strings.Join(chans, ",") {
		t.Errorf("channels annotation %q, want %q", got, strings.Join(chans, ","))
	}
	strategy := csv.Spec.InstallStrategy.StrategySpec
	dep := strategy.DeploymentSpecs[0]
	if dep.Name != inferencestack.InstanceName(major) || dep.Spec.Template.Spec.ServiceAccountName != inferencestack.InstanceName(major) {
		t.Errorf("Deployment %s with ServiceAccount %s, want both %s", dep.Name, dep.Spec.Template.Spec.ServiceAccountName, inferencestack.InstanceName(major))
	}
	if got := strategy.ClusterPermissions[0].ServiceAccountName; got != inferencestack.InstanceName(major) {
		t.Errorf("clusterPermissions for %s, want %s", got, inferencestack.InstanceName(major))
	}
	if args := dep.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--leader-election-id="+inferencestack.LeaseID(major)) {
		t.Errorf("operator args %v lack --leader-election-id=%s", args, inferencestack.LeaseID(major))
	}
}
