package helmrecord

import (
	"strconv"
	"testing"

	"helm.sh/helm/v3/pkg/release"
)

// The Secret holds a record as Helm's driver stores it: the release's own
// labels, then Helm's, which win.
func TestRecordSecret(t *testing.T) {
	rls := &release.Release{Name: "stack", Version: 3, Info: &release.Info{Status: release.StatusPendingUpgrade},
		Labels: map[string]string{"models.takeoff.co/reconciled-by": "v0"}}
	s, err := secret("sh.helm.release.v1.stack.v3", rls, "modifiedAt")
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "sh.helm.release.v1.stack.v3" || s.Type != "helm.sh/release.v1" || len(s.Data["release"]) == 0 {
		t.Errorf("secret %s of type %s with %d bytes of record", s.Name, s.Type, len(s.Data["release"]))
	}
	for k, v := range map[string]string{"models.takeoff.co/reconciled-by": "v0", "name": "stack", "owner": "helm", "status": "pending-upgrade", "version": "3"} {
		if s.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, s.Labels[k], v)
		}
	}
	if _, err := strconv.ParseInt(s.Labels["modifiedAt"], 10, 64); err != nil || len(s.Labels) != 6 {
		t.Errorf("labels %v: want the five above and modifiedAt, a Unix time", s.Labels)
	}
	if _, err := secret("k", &release.Release{Name: "stack"}, "createdAt"); err == nil {
		t.Error("a release without info was stored")
	}
}
