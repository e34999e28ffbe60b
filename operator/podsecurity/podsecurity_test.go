package podsecurity

import (
	"errors"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/pod-security-admission/api"

	stackchart "github.com/titanml/inference-stack-operator/charts/inference-stack"
	"github.com/titanml/inference-stack-operator/operator/podsecurity/podsecuritytest"
)

// render renders the inference-stack chart for spec as the operator
// installs it (client-only).
func render(t *testing.T, vals map[string]any) []byte {
	t.Helper()
	c, err := stackchart.Load()
	if err != nil {
		t.Fatal(err)
	}
	i := action.NewInstall(&action.Configuration{Log: t.Logf})
	i.ClientOnly, i.DryRun, i.Replace = true, true, true
	i.ReleaseName, i.Namespace = "stack", "tenant"
	i.KubeVersion = &chartutil.KubeVersion{Version: "v1.34.0", Major: "1", Minor: "34"}
	rel, err := i.Run(c, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return []byte(rel.Manifest)
}

// TestCorpus: the library's verdict on the rendered pods of every case of
// the shared corpus is the one the case states, at each level.
func TestCorpus(t *testing.T) {
	levels := map[string]api.LevelVersion{
		"baseline":   {Level: api.LevelBaseline, Version: api.LatestVersion()},
		"restricted": {Level: api.LevelRestricted, Version: api.LatestVersion()},
		"privileged": {Level: api.LevelPrivileged, Version: api.LatestVersion()},
	}
	for _, c := range podsecuritytest.Cases {
		vals, err := c.Values()
		if err != nil {
			t.Fatal(err)
		}
		manifest := render(t, vals)
		for name, lv := range levels {
			want := name == "baseline" && c.Baseline || name == "restricted" && c.Restricted
			err := Check(manifest, lv)
			var pse *Error
			switch {
			case want && !errors.As(err, &pse):
				t.Errorf("%s at %s: %v, want a refusal", c.Name, name, err)
			case !want && err != nil:
				t.Errorf("%s at %s: refused: %v", c.Name, name, err)
			case want:
				t.Logf("%s at %s: %v", c.Name, name, err)
			}
		}
	}
}

// TestLevelOf reads a namespace's level as Pod Security Admission does,
// with baseline where it says nothing.
func TestLevelOf(t *testing.T) {
	for labels, want := range map[string]string{
		"": "baseline:latest",
		"pod-security.kubernetes.io/enforce=privileged":                                                  "privileged:latest",
		"pod-security.kubernetes.io/enforce=restricted,pod-security.kubernetes.io/enforce-version=v1.30": "restricted:v1.30",
		"pod-security.kubernetes.io/warn=restricted":                                                     "baseline:latest",
	} {
		m := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				m[k] = v
			}
		}
		lv, err := LevelOf(m)
		if err != nil || lv.String() != want {
			t.Errorf("%q: %v %v, want %s", labels, lv, err, want)
		}
	}
	if _, err := LevelOf(map[string]string{"pod-security.kubernetes.io/enforce": "lax"}); err == nil {
		t.Error("an unknown level was accepted")
	}
}

// TestWorkloadKinds: a manifest with a pod this check cannot read is
// refused, not waved through.
func TestWorkloadKinds(t *testing.T) {
	err := Check([]byte("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: i}]}\n"), Default)
	if err == nil || !strings.Contains(err.Error(), "Pod/p") {
		t.Errorf("got %v", err)
	}
}
