package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/titanml/inference-stack-operator/e2e/bench/operatorbench"
)

// TestSmoke runs the command small — 5 stacks, both operators (each
// restarted after its idle window), the floor, 5 own + 5 foreign stacks,
// 5-second idle windows (about 90 s once the binaries are cached) — so
// the harness keeps working between full runs. It checks that every figure was taken and written, never what it is.
func TestSmoke(t *testing.T) {
	out := t.TempDir()
	err := run([]string{"--stacks=5", "--reps=1", "--own=5", "--foreign=5", "--memory-reps=1",
		"--idle=5s", "--quiet=2s", "--deploy-timeout=3m", "--out=" + out})
	if err != nil {
		t.Fatal(err)
	}
	jsons, _ := filepath.Glob(filepath.Join(out, "bench-*.json"))
	mds, _ := filepath.Glob(filepath.Join(out, "bench-*.md"))
	if len(jsons) != 1 || len(mds) != 1 {
		t.Fatalf("reports written: %v %v", jsons, mds)
	}
	var r struct {
		operatorbench.Report
		Table []operatorbench.Row `json:"table"`
	}
	data, err := os.ReadFile(jsons[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Burst) != 2 || len(r.Floor) != 1 || len(r.Memory) != 2 || len(r.Table) == 0 {
		t.Fatalf("%d burst passes, %d floors, %d memory passes, %d rows", len(r.Burst), len(r.Floor), len(r.Memory), len(r.Table))
	}
	if f := r.Floor[0]; f.Objects != 35 || f.Seconds <= 0 {
		t.Errorf("floor %+v", f)
	}
	for _, p := range append(r.Burst, r.Memory...) {
		if p.AllDeployedSeconds <= 0 || p.P90Seconds < p.P50Seconds || p.RequestsPerStack <= 0 || p.WritesPerStack <= 0 || p.CPUSeconds <= 0 ||
			p.ReconcilesPerStack < 1 || p.IdleSeconds < 5 || p.RSSBytes <= 0 || p.PeakRSSBytes < p.RSSBytes {
			t.Errorf("%s, %d own + %d foreign: a figure is missing: %+v", p.Operator, p.Own, p.Foreign, p)
		}
	}
	for _, p := range r.Burst {
		if rs := p.Restart; rs == nil || rs.QuietSeconds <= 0 || rs.RequestsPerStack <= 0 || rs.CPUSeconds <= 0 {
			t.Errorf("%s: a restart figure is missing: %+v", p.Operator, rs)
		}
	}
	md, err := os.ReadFile(mds[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "| 5 stacks created at once → all Deployed (median of 1) |") {
		t.Errorf("markdown:\n%s", md)
	}
}
