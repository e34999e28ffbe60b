package oci

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func entries() []Entry {
	return []Entry{
		File("usr/share/b.txt", 0o644, []byte("b")),
		Dir("home/nonroot", 0o700, 65532, 65532),
		{Path: "/bin/tool", Mode: 0o755, Data: []byte("#!")},
		File("a.txt", 0o600, []byte("a")),
	}
}

func readTar(t *testing.T, data []byte) []*tar.Header {
	t.Helper()
	var hs []*tar.Header
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hs
		}
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
}

func TestTarIsDeterministicAndNormalized(t *testing.T) {
	mtime := time.Unix(1700000000, 123456789)
	var a, b bytes.Buffer
	if err := Tar(&a, entries(), mtime); err != nil {
		t.Fatal(err)
	}
	rev := entries()
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	if err := Tar(&b, rev, mtime.In(time.FixedZone("X", 3600))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("the same entries in another order (and another time zone) gave different bytes")
	}
	var names []string
	for _, h := range readTar(t, a.Bytes()) {
		names = append(names, h.Name)
		if !h.ModTime.Equal(time.Unix(1700000000, 0)) || h.Uname != "" || h.Gname != "" || !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Errorf("%s: mtime %v, uname %q, gname %q, atime %v", h.Name, h.ModTime, h.Uname, h.Gname, h.AccessTime)
		}
		switch h.Name {
		case "home/nonroot/":
			if h.Uid != 65532 || h.Gid != 65532 || h.Mode != 0o700 || h.Typeflag != tar.TypeDir {
				t.Errorf("home/nonroot/: %+v", h)
			}
		case "bin/tool":
			if h.Uid != 0 || h.Mode != 0o755 {
				t.Errorf("bin/tool: %+v", h)
			}
		case "usr/", "usr/share/", "bin/", "home/":
			if h.Mode != 0o755 || h.Uid != 0 || h.Typeflag != tar.TypeDir {
				t.Errorf("implicit parent %s: %+v", h.Name, h)
			}
		}
	}
	want := "a.txt bin/ bin/tool home/ home/nonroot/ usr/ usr/share/ usr/share/b.txt"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("entries %q, want %q", got, want)
	}
}

func TestTarRejectsBadEntries(t *testing.T) {
	for name, es := range map[string][]Entry{
		"escape":    {File("../x", 0o644, nil)},
		"root":      {File("/", 0o644, nil)},
		"duplicate": {File("a", 0o644, nil), File("./a", 0o644, nil)},
		"file dir":  {File("a", 0o644, nil), File("a/b", 0o644, nil)},
		"mode bits": {{Path: "a", Mode: 0o100644}},
	} {
		if err := Tar(io.Discard, es, time.Unix(0, 0)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestLayerCache(t *testing.T) {
	dir := t.TempDir()
	c := LayerCache{Dir: dir}
	l1, err := c.Layer(entries(), time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := l1.Digest()
	diff1, _ := l1.DiffID()
	if _, err := os.Stat(filepath.Join(dir, diff1.Hex+".tar.gz")); err != nil {
		t.Fatalf("layer not cached: %v", err)
	}
	l2, err := c.Layer(entries(), time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if d2, _ := l2.Digest(); d2 != d1 {
		t.Fatalf("cached layer digest %s != %s", d2, d1)
	}
	// Without a cache the bytes are the same: gzip output is deterministic.
	l3, err := LayerCache{}.Layer(entries(), time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if d3, _ := l3.Digest(); d3 != d1 {
		t.Fatalf("uncached layer digest %s != %s", d3, d1)
	}
	// Another SOURCE_DATE_EPOCH is another layer.
	l4, err := c.Layer(entries(), time.Unix(86400, 0))
	if err != nil {
		t.Fatal(err)
	}
	if d4, _ := l4.DiffID(); d4 == diff1 {
		t.Fatal("mtime did not change the layer")
	}
	rc, err := l1.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(rc)
	if len(readTar(t, raw)) != 8 {
		t.Fatal("uncompressed layer does not read back")
	}
	if mt, _ := l1.MediaType(); mt != types.OCILayer {
		t.Fatalf("media type %s", mt)
	}
}

func TestImageIndexAndLayout(t *testing.T) {
	created := time.Unix(0, 0)
	layer, err := LayerCache{}.Layer(entries(), created)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(arch, variant string) v1.Image {
		img, err := Image(Config{
			Platform:   v1.Platform{OS: "linux", Architecture: arch, Variant: variant},
			Created:    created,
			User:       "65532:65532",
			Entrypoint: []string{"/operator"},
			Labels:     map[string]string{"org.opencontainers.image.version": "1.2.3"},
		}, []LayerSpec{{Layer: layer, CreatedBy: "test"}})
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	amd, arm := mk("amd64", ""), mk("arm64", "v8")
	cf, err := amd.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Created.Time.Unix() != 0 || cf.Config.User != "65532:65532" || cf.Config.Entrypoint[0] != "/operator" ||
		len(cf.RootFS.DiffIDs) != 1 || len(cf.History) != 1 || cf.History[0].Created.Time.Unix() != 0 {
		t.Fatalf("config %+v", cf)
	}
	raw, _ := amd.RawConfigFile()
	if !bytes.Contains(raw, []byte(`"created":"1970-01-01T00:00:00Z"`)) {
		t.Fatalf("created time not the epoch: %s", raw)
	}
	if mt, _ := amd.MediaType(); mt != types.OCIManifestSchema1 {
		t.Fatalf("manifest media type %s", mt)
	}
	m, _ := amd.Manifest()
	if m.Config.MediaType != types.OCIConfigJSON {
		t.Fatalf("config media type %s", m.Config.MediaType)
	}
	again := mk("amd64", "")
	if d1, _ := amd.Digest(); true {
		if d2, _ := again.Digest(); d1 != d2 {
			t.Fatal("image digest not deterministic")
		}
	}
	idx, err := Index([]v1.Image{amd, arm}, map[string]string{"a": "b"})
	if err != nil {
		t.Fatal(err)
	}
	im, _ := idx.IndexManifest()
	if im.MediaType != types.OCIImageIndex || len(im.Manifests) != 2 || im.Manifests[1].Platform.Variant != "v8" || im.Annotations["a"] != "b" {
		t.Fatalf("index %+v", im)
	}

	dir := filepath.Join(t.TempDir(), "layout")
	if err := WriteLayout(dir, nil, idx, "1.2.3"); err != nil {
		t.Fatal(err)
	}
	if err := WriteLayout(dir, amd, nil, ""); err == nil {
		t.Fatal("WriteLayout over an existing directory succeeded")
	}
	top, err := ReadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := idx.Digest(); top.Descriptor.Digest != d || top.Descriptor.Annotations[RefNameAnnotation] != "1.2.3" {
		t.Fatalf("top %+v", top.Descriptor)
	}
	sizes, err := top.Sizes()
	if err != nil {
		t.Fatal(err)
	}
	if len(sizes) != 2 || sizes[0].Platform != "linux/amd64" || sizes[1].Platform != "linux/arm64/v8" || sizes[0].Bytes <= 0 {
		t.Fatalf("sizes %+v", sizes)
	}
	if _, err := top.Image(); err == nil {
		t.Fatal("an index opened as an image")
	}
}
