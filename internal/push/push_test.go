package push

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/titanml/inference-stack-operator/internal/attest/provenance"
	"github.com/titanml/inference-stack-operator/internal/attest/sbom"
	"github.com/titanml/inference-stack-operator/internal/build"
	"github.com/titanml/inference-stack-operator/internal/oci"
)

// newRegistry starts go-containerregistry's in-memory registry on
// 127.0.0.1, optionally behind a wrapper. It has no referrers API (like
// many registries still); newRegistryWith takes its options.
func newRegistry(t *testing.T, wrap func(http.Handler) http.Handler) string {
	return newRegistryWith(t, wrap)
}

func newRegistryWith(t *testing.T, wrap func(http.Handler) http.Handler, opts ...registry.Option) string {
	t.Helper()
	var h http.Handler = registry.New(append([]registry.Option{registry.Logger(nopLogger())}, opts...)...)
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	if !strings.HasPrefix(srv.URL, "http://127.0.0.1:") {
		t.Fatalf("registry not on loopback: %s", srv.URL)
	}
	return strings.TrimPrefix(srv.URL, "http://")
}

// buildOut writes an output directory like `isctl build` does: an operator
// index, a bundle and a catalog whose FBC references the bundle, for
// repositories under reg.
func buildOut(t *testing.T, reg string) (string, map[string]oci.Digest) {
	t.Helper()
	out := t.TempDir()
	created := time.Unix(0, 0)
	cache := oci.LayerCache{}
	repos := build.ReposFor(reg + "/tytn")
	mk := func(arch string, files ...oci.Entry) v1.Image {
		l, err := cache.Layer(files, created)
		if err != nil {
			t.Fatal(err)
		}
		img, err := oci.Image(oci.Config{Platform: v1.Platform{OS: "linux", Architecture: arch}, Created: created},
			[]oci.LayerSpec{{Layer: l, CreatedBy: "test"}})
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	// A layer large enough to take several progress updates.
	big := bytes.Repeat([]byte("operator binary "), 1<<16)
	idx, err := oci.Index([]v1.Image{
		mk("amd64", oci.File("operator", 0o755, append([]byte("amd64"), big...))),
		mk("arm64", oci.File("operator", 0o755, append([]byte("arm64"), big...))),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bundle := mk("amd64", oci.File("manifests/csv.yaml", 0o644, []byte("kind: ClusterServiceVersion\n")))
	refs := map[string]oci.Digest{}
	write := func(n, repo string, img v1.Image, ii v1.ImageIndex) {
		var d v1.Hash
		if img != nil {
			d, _ = img.Digest()
		} else {
			d, _ = ii.Digest()
		}
		r, err := oci.ParseDigest(repo + "@" + d.String())
		if err != nil {
			t.Fatal(err)
		}
		refs[n] = r
		dir := filepath.Join(out, "images", n)
		if err := oci.WriteLayout(dir, img, ii, "0.1.0"); err != nil {
			t.Fatal(err)
		}
		attachDocs(t, dir, r, img, ii)
	}
	write(build.Operator, repos.Operator, nil, idx)
	write(build.Bundle, repos.Bundle, bundle, nil)
	fbc := fmt.Sprintf(`{"schema":"olm.package","name":"p","defaultChannel":"stable-v0"}
{"schema":"olm.channel","name":"stable-v0","package":"p","entries":[{"name":"p.v0.1.0"}]}
{"schema":"olm.bundle","name":"p.v0.1.0","package":"p","image":%q,"properties":[{"type":"olm.package","value":{"packageName":"p","version":"0.1.0"}}]}
`, refs[build.Bundle].String())
	write(build.Catalog, repos.Catalog, mk("amd64", oci.File("configs/p/catalog.json", 0o644, []byte(fbc))), nil)
	var lines string
	for _, n := range build.Names {
		lines += n + " " + refs[n].String() + "\n"
	}
	if err := os.WriteFile(filepath.Join(out, "images", "digests.txt"), []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	return out, refs
}

// attachDocs attaches an SBOM and a provenance statement to the image of
// the layout at dir, as `isctl build` does.
func attachDocs(t *testing.T, dir string, ref oci.Digest, img v1.Image, idx v1.ImageIndex) {
	t.Helper()
	top, err := oci.ReadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := sbom.Generate(sbom.Input{Subject: sbom.Subject{Repository: ref.Repository, Digest: top.Descriptor.Digest, Version: "0.1.0"}, Image: img, Index: idx, Tool: sbom.Tool{Name: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := provenance.Statement(provenance.Input{
		Repository: ref.Repository, Digest: top.Descriptor.Digest, BuildType: "https://example.com/test", BuilderID: "https://example.com/test",
		ExternalParameters: map[string]any{"version": "0.1.0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := build.AttachDocuments(dir, top, doc, st); err != nil {
		t.Fatal(err)
	}
}

func testOptions(log *bytes.Buffer) Options {
	return Options{
		Keychain:      authn.NewMultiKeychain(), // anonymous: tests never read the user's docker config
		Backoff:       time.Millisecond,
		Log:           log,
		ProgressEvery: time.Nanosecond,
		Sleep:         func(context.Context, time.Duration) error { return nil },
	}
}

// checkPulled pulls ref by digest and compares it with the layout's image.
func checkPulled(t *testing.T, out, n string, ref oci.Digest) {
	t.Helper()
	top, err := oci.ReadLayout(filepath.Join(out, "images", n))
	if err != nil {
		t.Fatal(err)
	}
	d, err := name.NewDigest(ref.String())
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(d)
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	if desc.Digest != top.Descriptor.Digest {
		t.Fatalf("%s: registry has %s, layout %s", n, desc.Digest, top.Descriptor.Digest)
	}
	var imgs []v1.Image
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			t.Fatal(err)
		}
		m, _ := idx.IndexManifest()
		for _, md := range m.Manifests {
			img, err := idx.Image(md.Digest)
			if err != nil {
				t.Fatal(err)
			}
			imgs = append(imgs, img)
		}
	} else {
		img, err := desc.Image()
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, img)
	}
	for _, img := range imgs {
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range layers {
			rc, err := l.Compressed() // verifies the digest while reading
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if _, err := buf.ReadFrom(rc); err != nil {
				t.Fatalf("%s: layer: %v", n, err)
			}
			rc.Close()
		}
	}
	tag, _ := name.NewTag(ref.Repository + ":0.1.0")
	if td, err := remote.Head(tag); err != nil || td.Digest.String() != ref.Digest {
		t.Errorf("%s: tag 0.1.0 -> %v, %v", n, td, err)
	}
}

func TestPushPullRoundTripAndIdempotence(t *testing.T) {
	reg := newRegistry(t, nil)
	out, refs := buildOut(t, reg)
	var log bytes.Buffer
	pushed, err := Outputs(context.Background(), out, build.Names, testOptions(&log))
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(pushed) != 3 {
		t.Fatalf("pushed %v", pushed)
	}
	for _, n := range build.Names {
		checkPulled(t, out, n, refs[n])
		if !strings.Contains(log.String(), "pushed "+refs[n].String()) {
			t.Errorf("log does not show %s:\n%s", refs[n], log.String())
		}
	}
	if !strings.Contains(log.String(), "MB /") {
		t.Errorf("no progress in the log:\n%s", log.String())
	}
	// Again: nothing changes, nothing fails.
	if _, err := Outputs(context.Background(), out, build.Names, testOptions(&log)); err != nil {
		t.Fatalf("second push: %v", err)
	}
}

func TestCatalogGuard(t *testing.T) {
	var requests []string
	var mu sync.Mutex
	reg := newRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			requests = append(requests, r.Method+" "+r.URL.Path)
			mu.Unlock()
			h.ServeHTTP(w, r)
		})
	})
	out, refs := buildOut(t, reg)
	var log bytes.Buffer
	// Push the operator and the catalog, but not the bundle.
	_, err := Outputs(context.Background(), out, []string{build.Operator, build.Catalog}, testOptions(&log))
	if err == nil || !strings.Contains(err.Error(), refs[build.Bundle].String()) || !strings.Contains(err.Error(), "not in their registry") {
		t.Fatalf("got %v", err)
	}
	mu.Lock()
	seen := append([]string(nil), requests...)
	mu.Unlock()
	for _, r := range seen {
		if strings.Contains(r, "operator-catalog") && (strings.HasPrefix(r, "PUT") || strings.HasPrefix(r, "POST") || strings.HasPrefix(r, "PATCH")) {
			t.Errorf("the catalog was uploaded: %s", r)
		}
	}
	d, _ := name.NewDigest(refs[build.Catalog].String())
	if _, err := remote.Head(d); err == nil {
		t.Error("the catalog is in the registry")
	}
}

// flaky fails some requests with server errors and drops some connections
// without answering.
func flaky(every5xx, everyDrop int64, injected *atomic.Int64) func(http.Handler) http.Handler {
	var n atomic.Int64
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			i := n.Add(1)
			switch {
			case i%everyDrop == 0:
				injected.Add(1)
				hj, ok := w.(http.Hijacker)
				if !ok {
					panic("no hijacker")
				}
				conn, _, err := hj.Hijack()
				if err == nil {
					conn.Close()
				}
				return
			case i%every5xx == 0:
				injected.Add(1)
				code := []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable}[i%3]
				http.Error(w, "injected failure", code)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
}

func TestPushSurvivesAFlakyRegistry(t *testing.T) {
	var injected atomic.Int64
	reg := newRegistry(t, flaky(7, 11, &injected))
	out, refs := buildOut(t, reg)
	var log bytes.Buffer
	o := testOptions(&log)
	o.Attempts = 20
	if _, err := Outputs(context.Background(), out, build.Names, o); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if injected.Load() == 0 {
		t.Fatal("no failure was injected")
	}
	t.Logf("survived %d injected failures", injected.Load())
	for _, n := range build.Names {
		checkPulled(t, out, n, refs[n])
	}
}

func TestPushGivesUpOnPersistentFailure(t *testing.T) {
	reg := newRegistry(t, func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "down", http.StatusServiceUnavailable)
		})
	})
	out, _ := buildOut(t, reg)
	var log bytes.Buffer
	o := testOptions(&log)
	o.Attempts = 3
	_, err := Outputs(context.Background(), out, build.Names, o)
	if err == nil || !strings.Contains(err.Error(), "push "+reg) {
		t.Fatalf("got %v", err)
	}
	if got := strings.Count(log.String(), "retrying"); got != 2 {
		t.Errorf("%d retries logged, want 2:\n%s", got, log.String())
	}
}

func TestRetryable(t *testing.T) {
	for err, want := range map[error]bool{
		&transport.Error{StatusCode: 500}:                            true,
		&transport.Error{StatusCode: 503}:                            true,
		&transport.Error{StatusCode: 429}:                            true,
		&transport.Error{StatusCode: 401}:                            false,
		&transport.Error{StatusCode: 404}:                            false,
		fmt.Errorf("wrapped: %w", &transport.Error{StatusCode: 502}): true,
		context.Canceled:                                             false,
		errors.New("read: connection reset by peer"):                 true,
		errors.New("manifest invalid"):                               false,
	} {
		if got := Retryable(err); got != want {
			t.Errorf("Retryable(%v) = %v, want %v", err, got, want)
		}
	}
}

func TestOutputsRejectsAStaleLayout(t *testing.T) {
	reg := newRegistry(t, nil)
	out, _ := buildOut(t, reg)
	p := filepath.Join(out, "images", "digests.txt")
	data, _ := os.ReadFile(p)
	lines := strings.Split(string(data), "\n")
	lines[1] = strings.Split(lines[1], "@")[0] + "@sha256:" + strings.Repeat("0", 64)
	os.WriteFile(p, []byte(strings.Join(lines, "\n")), 0o644)
	var log bytes.Buffer
	_, err := Outputs(context.Background(), out, build.Names, testOptions(&log))
	if err == nil || !strings.Contains(err.Error(), "rebuild") {
		t.Fatalf("got %v", err)
	}
	if strings.Contains(log.String(), "pushed") {
		t.Errorf("something was pushed:\n%s", log.String())
	}
}
