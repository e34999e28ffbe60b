package controller

import (
	"fmt"
	"strings"
	"testing"
)

// The chart's own renders pass; a manifest of another shape is refused
// before Helm reads it, cheaply, whatever it would have cost Helm.
func TestCheckManifest(t *testing.T) {
	for name, manifest := range map[string]string{
		"the chart, everything on":  renderManifest(t, "stack", "tenant", everything, "keda.sh/v1alpha1", "keda.sh/v1alpha1/ScaledObject"),
		"the chart, 32 application": renderManifest(t, "stack", "tenant", thirtyTwo()),
	} {
		if err := checkManifest(manifest, "tenant"); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	const deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n"
	pad := strings.Repeat("x", 1000)
	var aliases strings.Builder
	fmt.Fprintf(&aliases, "%sspec:\n  pad: &p %q\n  list:\n", deployment, pad)
	for range 900 {
		aliases.WriteString("  - *p\n")
	}
	var many strings.Builder
	for i := range maxManifestDocuments + 1 {
		fmt.Fprintf(&many, "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c%d}\n", i)
	}
	for name, tc := range map[string]struct{ manifest, says string }{
		"aliases":                {aliases.String(), "anchor or alias"},
		"a null container":       {deployment + "spec:\n  template:\n    spec:\n      containers: [null]\n", "spec.template.spec.containers[0]: null in a list"},
		"a null env entry":       {deployment + "spec:\n  template:\n    spec:\n      containers:\n      - name: a\n        env: [~]\n", "null in a list"},
		"a key twice":            {deployment + "spec:\n  replicas: 1\n  replicas: 2\n", `keys "replicas" and "replicas"`},
		"keys folded by case":    {deployment + "Kind: ConfigMap\n", `keys "kind" and "Kind"`},
		"keys folded by U+017F":  {deployment + "spec:\n  selector: {}\n  \u017felector: {}\n", "keys \"selector\" and \"\u017felector\""},
		"keys folded by U+212A":  {deployment + "\u212aind: ConfigMap\n", "keys \"kind\" and \"\u212aind\""},
		"U+017F":                 {"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: victim\n  nameſpace: tenant\n", "not the stack's"},
		"a List":                 {"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: decoy}\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: x, namespace: victim}}\n", "a List"},
		"a kind not the chart's": {"apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: admin}\n", "not a kind the chart renders"},
		"an unknown group":       {"apiVersion: g1.x/v1\nkind: ConfigMap\nmetadata: {name: c}\n", "not a kind the chart renders"},
		"another namespace":      {"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: kube-system}\n", "not the stack's"},
		"no name":                {"apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n", "without a name"},
		"too many documents":     {many.String(), "more than"},
	} {
		err := checkManifest(tc.manifest, "tenant")
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error saying %q", name, err, tc.says)
		}
	}
}

// thirtyTwo is a spec of 32 applications, the most the CRD allows.
func thirtyTwo() string {
	var b strings.Builder
	b.WriteString("applications:\n")
	for i := range 32 {
		fmt.Fprintf(&b, "  app-%d: {}\n", i)
	}
	return b.String()
}
