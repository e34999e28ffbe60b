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
	if !k && !strings.Contains(whyK, "kind needs a Docker engine: ") {
		t.Errorf("kind skipped without saying it needs a Docker engine: %s", whyK)
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

// TestDockerAvailableNamesWhatIsMissing: the kind provider's skip message
// names the socket or address it tried and why it failed.
func TestDockerAvailableNamesWhatIsMissing(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "docker.sock")
	t.Setenv("DOCKER_HOST", "unix://"+sock)
	err := DockerAvailable(t.Context())
	if err == nil || err.Error() != "no Docker engine socket "+sock+" (DOCKER_HOST)" {
		t.Errorf("DockerAvailable = %v; want it to name the missing socket %s", err, sock)
	}
	t.Setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
	if err := DockerAvailable(t.Context()); err == nil || !strings.Contains(err.Error(), "no Docker engine answers at tcp://127.0.0.1:1 (DOCKER_HOST)") {
		t.Errorf("DockerAvailable = %v; want it to name the address that does not answer", err)
	}
}

func TestPulledIn(t *testing.T) {
	m := pulledIn.FindStringSubmatch(`Successfully pulled image "10.213.1.1:4000/tytn/operator@sha256:ab" in 812ms (812ms including waiting). Image size: 123 bytes.`)
	if m == nil || m[1] != "812ms" {
		t.Errorf("pull time not found: %v", m)
	}
}

func TestCheckMemory(t *testing.T) {
	s := &Scenario{Memory: []MemorySample{{Pod: "a", Peak: 10 << 20, Limit: 1 << 30}}}
	if err := s.CheckMemory(); err != nil {
		t.Error(err)
	}
	s.Memory = append(s.Memory, MemorySample{Pod: "b", Peak: 1 << 30, Limit: 1 << 30})
	if err := s.CheckMemory(); err == nil || !strings.Contains(err.Error(), "operator pod b") {
		t.Errorf("a peak at the limit passed: %v", err)
	}
}
