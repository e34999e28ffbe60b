package controller

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"sync"
	"testing"

	"helm.sh/helm/v3/pkg/release"

	inferencestackchart "github.com/titanml/inference-stack-operator/charts/inference-stack"
	"github.com/titanml/inference-stack-operator/operator/helmrecord"
)

// helmEncoding is a record as Helm's Secrets driver encodes it: a new gzip
// writer at BestCompression for every record.
func helmEncoding(t *testing.T, rls *release.Release) []byte {
	t.Helper()
	b, err := json.Marshal(rls)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))
}

// A record written with a pooled writer is byte for byte the one Helm
// writes, also when records are encoded at once (each writer is reset),
// and it decodes back to the release.
func TestEncodeReleaseIsHelms(t *testing.T) {
	c, err := inferencestackchart.Load()
	if err != nil {
		t.Fatal(err)
	}
	rels := make([]*release.Release, 8)
	for i := range rels {
		name := "stack-" + strconv.Itoa(i)
		rels[i] = withoutTemplates(&release.Release{
			Name: name, Namespace: "tenant", Version: i + 1, Chart: c,
			Info:     &release.Info{Status: release.StatusDeployed, Description: "Install complete"},
			Config:   map[string]any{"applications": map[string]any{"a": map[string]any{"replicas": i}}},
			Manifest: renderManifest(t, name, "tenant", fmt.Sprintf("applications: {a: {replicas: %d}}", i)),
		})
	}
	want := make([][]byte, len(rels))
	for i, rls := range rels {
		want[i] = helmEncoding(t, rls)
	}
	got := make([][]byte, len(rels))
	errs := make([]error, len(rels))
	var wg sync.WaitGroup
	for round := 0; round < 4; round++ {
		for i, rls := range rels {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i], errs[i] = helmrecord.Encode(rls)
			}()
		}
		wg.Wait()
		for i := range rels {
			if errs[i] != nil {
				t.Fatalf("round %d, %s: %v", round, rels[i].Name, errs[i])
			}
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("round %d, %s: the record differs from Helm's (%d bytes, Helm's %d)", round, rels[i].Name, len(got[i]), len(want[i]))
			}
		}
	}

	// What Helm's driver reads back.
	raw, err := base64.StdEncoding.DecodeString(string(got[3]))
	if err != nil {
		t.Fatal(err)
	}
	r, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	var back release.Release
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Name != rels[3].Name || back.Version != rels[3].Version || back.Manifest != rels[3].Manifest ||
		!reflect.DeepEqual(back.Config, map[string]any{"applications": map[string]any{"a": map[string]any{"replicas": float64(3)}}}) ||
		back.Chart.Metadata.Version != c.Metadata.Version {
		t.Errorf("decoded %s v%d, config %v, want %s v%d, config %v", back.Name, back.Version, back.Config, rels[3].Name, rels[3].Version, rels[3].Config)
	}
}
