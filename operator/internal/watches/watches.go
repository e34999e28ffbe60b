// Package watches loads the operator's declarative watch configuration (the
// helm-operator-plugins watches.yaml format) and resolves its charts.
package watches

import (
	_ "embed"
	"fmt"
	"os"
	"strings"

	"github.com/operator-framework/helm-operator-plugins/pkg/watches"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Default is the watches.yaml shipped in the binary.
//
//go:embed watches.yaml
var Default []byte

// EmbeddedPrefix marks a chart shipped inside the binary rather than on disk.
const EmbeddedPrefix = "embedded:"

// Charts resolves an embedded chart name to the chart.
type Charts map[string]func() (*chart.Chart, error)

// Load parses watches, replaces ${OPERATOR_MAJOR} with major in selectors
// and override values, and loads each watch's chart. Unknown keys are errors,
// so a typo cannot silently disable a setting.
func Load(data []byte, major string, charts Charts) ([]watches.Watch, error) {
	expanded := os.Expand(string(data), func(key string) string {
		if key == "OPERATOR_MAJOR" {
			return major
		}
		return "${" + key + "}"
	})
	var ws []watches.Watch
	if err := yaml.UnmarshalStrict([]byte(expanded), &ws); err != nil {
		return nil, fmt.Errorf("parsing watches: %w", err)
	}
	if len(ws) == 0 {
		return nil, fmt.Errorf("watches: no watch configured")
	}
	seen := map[string]bool{}
	for i := range ws {
		w := &ws[i]
		gvk := w.GroupVersionKind
		if gvk.Version == "" || gvk.Kind == "" {
			return nil, fmt.Errorf("watch %d: version and kind are required", i)
		}
		if seen[gvk.String()] {
			return nil, fmt.Errorf("watch %d: duplicate %s", i, gvk)
		}
		seen[gvk.String()] = true

		var err error
		if name, ok := strings.CutPrefix(w.ChartPath, EmbeddedPrefix); ok {
			load, found := charts[name]
			if !found {
				return nil, fmt.Errorf("watch %s: no embedded chart %q", gvk.Kind, name)
			}
			w.Chart, err = load()
		} else {
			w.Chart, err = loader.Load(w.ChartPath)
		}
		if err != nil {
			return nil, fmt.Errorf("watch %s: loading chart %s: %w", gvk.Kind, w.ChartPath, err)
		}
		if w.WatchDependentResources == nil {
			t := true
			w.WatchDependentResources = &t
		}
		if w.Selector == nil {
			w.Selector = &metav1.LabelSelector{}
		}
		if w.ReconcilePeriod == nil {
			w.ReconcilePeriod = &metav1.Duration{}
		}
		if w.ReconcilePeriod.Duration < 0 {
			return nil, fmt.Errorf("watch %s: reconcilePeriod must not be negative", gvk.Kind)
		}
		if w.MaxConcurrentReconciles != nil && *w.MaxConcurrentReconciles < 1 {
			return nil, fmt.Errorf("watch %s: maxConcurrentReconciles must be at least 1", gvk.Kind)
		}
		for k, v := range w.OverrideValues {
			w.OverrideValues[k] = os.ExpandEnv(v)
		}
	}
	return ws, nil
}
