package migrate

import (
	"slices"
	"testing"
)

func TestFieldChanges(t *testing.T) {
	from := map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"helm.sh/chart": "old-1", "app": "x"}},
		"spec": map[string]any{
			"initContainers": []any{map[string]any{"name": "chmod", "image": "busybox"}},
			"containers":     []any{map[string]any{"name": "reader", "image": "r:1", "ports": []any{map[string]any{"name": "http", "containerPort": float64(80)}}}},
			"args":           []any{"a", "b"},
		},
	}
	to := map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"app": "x"}, "annotations": map[string]any{"checksum/config": "abc"}},
		"spec": map[string]any{
			"containers": []any{map[string]any{"name": "reader", "image": "r:2", "ports": []any{map[string]any{"name": "http", "containerPort": float64(8080)}}, "securityContext": map[string]any{"runAsNonRoot": true}}},
			"args":       []any{"a"},
		},
	}
	want := []string{
		`metadata.annotations["checksum/config"] (added)`,
		`metadata.labels["helm.sh/chart"] (removed)`,
		"spec.args",
		"spec.containers[reader].image: r:1 → r:2",
		"spec.containers[reader].ports[http].containerPort: 80 → 8080",
		"spec.containers[reader].securityContext.runAsNonRoot (added)",
		"spec.initContainers[chmod] (removed)",
	}
	if got := fieldChanges(from, to); !slices.Equal(got, want) {
		t.Errorf("changes:\n got %q\nwant %q", got, want)
	}
	if got := fieldChanges(from, from); len(got) != 0 {
		t.Errorf("no change reported as %q", got)
	}
}
