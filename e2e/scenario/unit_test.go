package scenario

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestSelectProvider(t *testing.T) {
	for _, tc := range []struct {
		setting, provider string
		run               bool
	}{
		{"local", "local", true}, {"local", "kind", false},
		{"kind", "kind", true}, {"kind", "local", false},
		{"both", "local", true}, {"both", "kind", true},
		{"bogus", "local", false},
	} {
		if run, why := SelectProvider(tc.setting, tc.provider); run != tc.run || why == "" {
			t.Errorf("SelectProvider(%q, %q) = %v, %q; want %v with a reason", tc.setting, tc.provider, run, why, tc.run)
		}
	}
	// auto: exactly one of the two runs, whatever this machine has.
	l, whyL := SelectProvider("", "local")
	k, whyK := SelectProvider("auto", "kind")
	if l == k {
		t.Errorf("auto selects local=%v (%s) and kind=%v (%s); want exactly one", l, whyL, k, whyK)
	}
	if !k && !strings.Contains(whyK, "no Docker engine") {
		t.Errorf("kind skipped without saying there is no Docker engine: %s", whyK)
	}
}

func TestMergeMaps(t *testing.T) {
	got := mergeMaps(map[string]any{"gateway": map[string]any{"image": map[string]any{"repository": "pause", "tag": "3"}}, "x": 1},
		map[string]any{"gateway": map[string]any{"image": map[string]any{"tag": "4"}, "replicaCount": 2}, "y": 2})
	want := map[string]any{"gateway": map[string]any{"image": map[string]any{"repository": "pause", "tag": "4"}, "replicaCount": 2}, "x": 1, "y": 2}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("mergeMaps = %v, want %v", got, want)
	}
}

func TestCatalogBundles(t *testing.T) {
	out := t.TempDir()
	fbc := `{"schema":"olm.package","name":"p"}
{"schema":"olm.bundle","name":"p.v0.2.0","package":"p","properties":[{"type":"olm.package","value":{"packageName":"p","version":"0.2.0"}}]}
{"schema":"olm.bundle","name":"p.v0.1.0","package":"p","properties":[{"type":"olm.package","value":{"packageName":"p","version":"0.1.0"}}]}
`
	if err := os.MkdirAll(filepath.Join(out, "catalog", "configs", "p"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "catalog", "configs", "p", "catalog.json"), []byte(fbc), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := CatalogBundles(out)
	if err != nil || !reflect.DeepEqual(v, []string{"0.1.0", "0.2.0"}) {
		t.Errorf("CatalogBundles = %v, %v", v, err)
	}
}
