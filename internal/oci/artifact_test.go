package oci

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func testImage(t *testing.T, content string) v1.Image {
	t.Helper()
	l, err := LayerCache{}.Layer([]Entry{File("a.txt", 0o644, []byte(content))}, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	img, err := Image(Config{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Created: time.Unix(0, 0)}, []LayerSpec{{Layer: l}})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestArtifactsAttachToALayoutWithoutChangingTheImage(t *testing.T) {
	img := testImage(t, "a")
	subject, err := partial.Descriptor(img)
	if err != nil {
		t.Fatal(err)
	}
	subject.Annotations = map[string]string{RefNameAnnotation: "1.0.0"}
	mk := func(kind, body string) v1.Image {
		a, err := Artifact("application/vnd.example."+kind, *subject,
			[]Blob{{MediaType: types.MediaType("application/vnd.example." + kind), Data: []byte(body), Annotations: map[string]string{TitleAnnotation: kind + ".json"}}},
			map[string]string{"kind": kind})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	sbom, prov := mk("sbom", `{"sbom":1}`), mk("prov", `{"prov":1}`)

	// Deterministic, and the subject is the bare descriptor.
	d1, _ := sbom.Digest()
	d2, _ := mk("sbom", `{"sbom":1}`).Digest()
	if d1 != d2 {
		t.Fatal("artifact digest not deterministic")
	}
	m, _ := sbom.Manifest()
	if m.ArtifactType != "application/vnd.example.sbom" || m.Config.MediaType != EmptyConfigMediaType || m.Config.Size != 2 ||
		m.Subject == nil || m.Subject.Digest != subject.Digest || m.Subject.Annotations != nil || len(m.Layers) != 1 {
		t.Fatalf("manifest %+v", m)
	}

	dir := filepath.Join(t.TempDir(), "layout")
	if err := WriteLayout(dir, img, nil, "1.0.0"); err != nil {
		t.Fatal(err)
	}
	if err := Attach(dir, sbom, prov); err != nil {
		t.Fatal(err)
	}
	if err := Attach(dir, sbom); err != nil { // again: listed once
		t.Fatal(err)
	}
	top, err := ReadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	if top.Descriptor.Digest != subject.Digest || top.Descriptor.Annotations[RefNameAnnotation] != "1.0.0" {
		t.Fatalf("top %+v", top.Descriptor)
	}
	if len(top.Referrers) != 2 || top.Referrers[0].ArtifactType != "application/vnd.example.sbom" || top.Referrers[1].Digest.String() == "" {
		t.Fatalf("referrers %+v", top.Referrers)
	}
	if got := top.ReferrersOfType("application/vnd.example.prov"); len(got) != 1 {
		t.Fatalf("prov referrers %+v", got)
	}
	a, err := top.Referrer(top.Referrers[0])
	if err != nil {
		t.Fatal(err)
	}
	am, data, err := ArtifactBlob(a)
	if err != nil || string(data) != `{"sbom":1}` || am.Layers[0].Annotations[TitleAnnotation] != "sbom.json" {
		t.Fatalf("blob %q %v", data, err)
	}
	if _, err := top.Image(); err != nil {
		t.Fatal(err)
	}

	// An artifact of another image is refused.
	other := testImage(t, "b")
	od, _ := partial.Descriptor(other)
	foreign, _ := Artifact("application/vnd.example.sbom", *od, []Blob{{MediaType: "text/plain", Data: []byte("x")}}, nil)
	if err := Attach(dir, foreign); err == nil || !strings.Contains(err.Error(), "does not refer to the layout's image") {
		t.Fatalf("foreign artifact: %v", err)
	}

	// A blob changed on disk is detected when read.
	blob := filepath.Join(dir, "blobs", "sha256", am.Layers[0].Digest.Hex)
	os.WriteFile(blob, bytes.ToUpper(data), 0o644)
	if _, _, err := ArtifactBlob(a); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("tampered blob: %v", err)
	}
}
