package watches

import (
	"errors"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
)

var charts = Charts{"inference-stack": func() (*chart.Chart, error) {
	return &chart.Chart{Metadata: &chart.Metadata{Name: "inference-stack", APIVersion: "v2", Version: "1.0.0"}}, nil
}}

func TestDefaultWatchesSelectTheMajor(t *testing.T) {
	ws, err := Load(Default, "v3", charts)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 {
		t.Fatalf("%d watches, want 1", len(ws))
	}
	w := ws[0]
	if w.Kind != "InferenceStack" || w.Group != "models.takeoff.co" || w.Version != "v1alpha1" {
		t.Errorf("GVK = %v", w.GroupVersionKind)
	}
	if got := w.Selector.MatchLabels["operatorVersion"]; got != "v3" {
		t.Errorf("selector operatorVersion = %q, want v3", got)
	}
	if w.ReconcilePeriod.Duration != 0 {
		t.Errorf("reconcilePeriod = %s, want 0 (no periodic resync)", w.ReconcilePeriod.Duration)
	}
	if w.MaxConcurrentReconciles == nil || *w.MaxConcurrentReconciles < 1 {
		t.Errorf("maxConcurrentReconciles = %v", w.MaxConcurrentReconciles)
	}
	if w.Chart == nil || w.Chart.Name() != "inference-stack" {
		t.Error("the embedded chart was not resolved")
	}
}

func TestLoadRejectsBadWatches(t *testing.T) {
	for name, tc := range map[string]struct{ yaml, want string }{
		"unknown key":      {"- {group: g, version: v1, kind: K, chart: 'embedded:inference-stack', reconcilePeriodd: 1m}", "unknown field"},
		"no kind":          {"- {group: g, version: v1, chart: 'embedded:inference-stack'}", "kind are required"},
		"unknown chart":    {"- {group: g, version: v1, kind: K, chart: 'embedded:nope'}", `no embedded chart "nope"`},
		"duplicate":        {"- {group: g, version: v1, kind: K, chart: 'embedded:inference-stack'}\n- {group: g, version: v1, kind: K, chart: 'embedded:inference-stack'}", "duplicate"},
		"negative period":  {"- {group: g, version: v1, kind: K, chart: 'embedded:inference-stack', reconcilePeriod: -1m}", "must not be negative"},
		"zero concurrency": {"- {group: g, version: v1, kind: K, chart: 'embedded:inference-stack', maxConcurrentReconciles: 0}", "at least 1"},
		"empty":            {"[]", "no watch"},
		"missing file":     {"- {group: g, version: v1, kind: K, chart: /does/not/exist}", "loading chart"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load([]byte(tc.yaml), "v0", charts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load() error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestLoadReportsChartErrors(t *testing.T) {
	broken := Charts{"inference-stack": func() (*chart.Chart, error) { return nil, errors.New("boom") }}
	if _, err := Load(Default, "v0", broken); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("error = %v", err)
	}
}
