// Package push uploads the built OCI layouts to any OCI registry: by digest
// first, then the artifacts attached to each image (SBOM, provenance) as
// its OCI referrers, with a key its cosign signature and attestations, then
// the human tag; with credentials from the docker config
// (go-containerregistry's default keychain); with retries and backoff; with
// progress; and with a guard that refuses to publish a catalog whose bundles
// are not in their registry.
package push

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"sort"
	"strings"
	"syscall"
	"testing/fstest"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/operator-framework/operator-registry/alpha/declcfg"

	"github.com/titanml/inference-stack-operator/internal/attest/signing"
	"github.com/titanml/inference-stack-operator/internal/oci"
)

// Options configure pushes.
type Options struct {
	// Keychain resolves credentials; default authn.DefaultKeychain (the
	// docker config and its credential helpers).
	Keychain authn.Keychain
	// Transport is the HTTP transport; default remote.DefaultTransport.
	Transport http.RoundTripper
	// Insecure allows plain HTTP to registries other than loopback and
	// private addresses (which go-containerregistry already reaches over
	// HTTP).
	Insecure bool
	// Attempts is how many times a whole image push is tried; default 5.
	Attempts int
	// Backoff is the first wait between attempts, doubled each time; it is
	// also the first wait of go-containerregistry's per-request retries.
	// Default 1s.
	Backoff time.Duration
	// Jobs is the number of concurrent blob uploads; default 4.
	Jobs int
	// Log receives progress and results; nil discards them.
	Log io.Writer
	// ProgressEvery is the minimum time between progress lines; default 2s.
	ProgressEvery time.Duration
	// Sleep waits between attempts (tests shorten it); default time.Sleep
	// honouring ctx.
	Sleep func(context.Context, time.Duration) error
	// Signer, when set, signs every pushed image and attests its SBOM and
	// provenance in cosign's format. Without it nothing is signed.
	Signer *signing.Signer
}

func (o Options) withDefaults() Options {
	if o.Keychain == nil {
		o.Keychain = authn.DefaultKeychain
	}
	if o.Transport == nil {
		o.Transport = remote.DefaultTransport
	}
	if o.Attempts <= 0 {
		o.Attempts = 5
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.Jobs <= 0 {
		o.Jobs = 4
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = 2 * time.Second
	}
	if o.Sleep == nil {
		o.Sleep = func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				return nil
			}
		}
	}
	return o
}

func (o Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

func (o Options) nameOpts() []name.Option {
	opts := []name.Option{name.StrictValidation}
	if o.Insecure {
		opts = append(opts, name.Insecure)
	}
	return opts
}

// Remote returns the go-containerregistry options of o (credentials,
// transport, retries) for other reads and writes of the same registries.
func (o Options) Remote(ctx context.Context) []remote.Option {
	return o.withDefaults().remoteOpts(ctx)
}

// Names returns the options to parse references with (-insecure).
func (o Options) Names() []name.Option { return o.nameOpts() }

// Retry runs op with o's retries (see Retryable).
func (o Options) Retry(ctx context.Context, what string, op func() error) error {
	return o.withDefaults().retry(ctx, what, op)
}

func (o Options) remoteOpts(ctx context.Context) []remote.Option {
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(o.Keychain),
		remote.WithTransport(o.Transport),
		remote.WithJobs(o.Jobs),
		remote.WithUserAgent("isctl"),
		remote.WithRetryBackoff(remote.Backoff{Duration: o.Backoff, Factor: 2, Jitter: 0.1, Steps: 3}),
	}
}

// Image pushes the top-level manifest of a layout (an image or an index)
// to ref (which must carry the same digest), then the artifacts attached
// to it as its referrers, then (with a Signer) its signature and signed
// attestations, and finally tags it with tag unless tag is empty. Pushing
// again is harmless: blobs already present are skipped, manifests are
// rewritten identically, and an existing signature by the same key is
// kept.
func Image(ctx context.Context, top oci.Top, ref oci.Digest, tag string, o Options) error {
	o = o.withDefaults()
	if top.Descriptor.Digest.String() != ref.Digest {
		return fmt.Errorf("push %s: the layout holds %s, not %s; rebuild with `make images`", ref, top.Descriptor.Digest, ref.Digest)
	}
	dref, err := name.NewDigest(ref.String(), o.nameOpts()...)
	if err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	var t remote.Taggable
	var upload func(opts ...remote.Option) error
	if top.Descriptor.MediaType.IsIndex() {
		idx, err := top.Index()
		if err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		t, upload = idx, func(opts ...remote.Option) error { return remote.WriteIndex(dref, idx, opts...) }
	} else {
		img, err := top.Image()
		if err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		t, upload = img, func(opts ...remote.Option) error { return remote.Write(dref, img, opts...) }
	}
	start := time.Now()
	if err := o.retry(ctx, "push "+ref.String(), func() error {
		updates := make(chan v1.Update, 16)
		done := make(chan struct{})
		go func() {
			defer close(done)
			o.progress(ref.Repository, updates)
		}()
		err := upload(append(o.remoteOpts(ctx), remote.WithProgress(updates))...)
		<-done
		return err
	}); err != nil {
		return err
	}
	o.logf("pushed %s (%s)", ref, time.Since(start).Round(10*time.Millisecond))
	// What is attached goes before the tag, so that a tag never names an
	// image without its SBOM, provenance and (with a key) signature.
	if err := o.pushReferrers(ctx, top, dref); err != nil {
		return err
	}
	if o.Signer != nil {
		if err := o.sign(ctx, top, ref.Repository, dref); err != nil {
			return err
		}
	}
	if tag == "" {
		return nil
	}
	tref, err := name.NewTag(ref.Repository+":"+tag, o.nameOpts()...)
	if err != nil {
		return fmt.Errorf("tag %s: %w", ref, err)
	}
	if err := o.retry(ctx, "tag "+tref.String(), func() error { return remote.Tag(tref, t, o.remoteOpts(ctx)...) }); err != nil {
		return err
	}
	o.logf("tagged %s -> %s", tref, ref.Digest)
	return nil
}

// progress prints upload progress at most every ProgressEvery, and once at
// the end when something was uploaded.
func (o Options) progress(what string, updates <-chan v1.Update) {
	var last v1.Update
	lastPrint := time.Now()
	for u := range updates {
		last = u
		if time.Since(lastPrint) >= o.ProgressEvery && u.Total > 0 {
			o.logf("  %s: %s / %s (%d%%)", what, mb(u.Complete), mb(u.Total), min(100, 100*u.Complete/u.Total))
			lastPrint = time.Now()
		}
	}
	if last.Total > 0 && time.Since(lastPrint) >= o.ProgressEvery/2 {
		o.logf("  %s: %s / %s", what, mb(last.Complete), mb(last.Total))
	}
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

// retry runs op up to Attempts times with exponential backoff while the
// error is worth retrying (server errors, throttling, dropped connections).
func (o Options) retry(ctx context.Context, what string, op func() error) error {
	wait := o.Backoff
	var err error
	for attempt := 1; ; attempt++ {
		if err = op(); err == nil {
			return nil
		}
		if ctx.Err() != nil || !Retryable(err) || attempt >= o.Attempts {
			break
		}
		o.logf("  %s: attempt %d/%d failed (%v); retrying in %s", what, attempt, o.Attempts, oneLine(err), wait)
		if serr := o.Sleep(ctx, wait); serr != nil {
			return serr
		}
		wait *= 2
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Retryable reports whether err may go away when tried again.
func Retryable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var te *transport.Error
	if errors.As(err, &te) {
		switch {
		case te.StatusCode == http.StatusRequestTimeout, te.StatusCode == http.StatusTooManyRequests, te.StatusCode >= 500:
			return true
		case te.StatusCode >= 400:
			return false
		}
		return te.Temporary()
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) ||
		strings.Contains(err.Error(), "connection reset")
}

func oneLine(err error) string {
	s := strings.ReplaceAll(err.Error(), "\n", " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// CatalogBundles lists the bundle images the catalog image refers to, read
// from the FBC inside the image itself.
func CatalogBundles(ctx context.Context, catalog v1.Image) ([]string, error) {
	cfg, err := CatalogConfig(ctx, catalog)
	if err != nil {
		return nil, err
	}
	var refs []string
	seen := map[string]bool{}
	for _, b := range cfg.Bundles {
		if !seen[b.Image] {
			seen[b.Image] = true
			refs = append(refs, b.Image)
		}
	}
	sort.Strings(refs)
	return refs, nil
}

// CatalogConfig reads the file-based catalog under /configs of a catalog
// image.
func CatalogConfig(ctx context.Context, catalog v1.Image) (*declcfg.DeclarativeConfig, error) {
	layers, err := catalog.Layers()
	if err != nil {
		return nil, fmt.Errorf("reading the catalog image's layers: %w", err)
	}
	fsys := fstest.MapFS{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return nil, fmt.Errorf("reading the catalog image's layers: %w", err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				rc.Close()
				return nil, err
			}
			p := path.Clean(strings.TrimPrefix(h.Name, "/"))
			rest, ok := strings.CutPrefix(p, "configs/")
			if !ok || h.Typeflag != tar.TypeReg {
				continue
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				rc.Close()
				return nil, err
			}
			fsys[rest] = &fstest.MapFile{Data: data, Mode: 0o644}
		}
		rc.Close()
	}
	cfg, err := declcfg.LoadFS(ctx, fsys)
	if err != nil {
		return nil, fmt.Errorf("read the catalog's FBC: %w", err)
	}
	return cfg, nil
}

// CheckPresent verifies that every reference exists in its registry, by
// digest. The error lists all missing references.
func CheckPresent(ctx context.Context, refs []string, o Options) error {
	o = o.withDefaults()
	var missing []string
	for _, r := range refs {
		d, err := oci.ParseDigest(r)
		if err != nil {
			return fmt.Errorf("catalog bundle %q: %w", r, err)
		}
		ref, err := name.NewDigest(d.String(), o.nameOpts()...)
		if err != nil {
			return fmt.Errorf("catalog bundle %q: %w", r, err)
		}
		err = o.retry(ctx, "check "+r, func() error {
			_, err := remote.Head(ref, o.remoteOpts(ctx)...)
			return err
		})
		var te *transport.Error
		switch {
		case err == nil:
		case errors.As(err, &te) && te.StatusCode == http.StatusNotFound:
			missing = append(missing, r)
		default:
			return fmt.Errorf("check that %s exists: %w", r, err)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the catalog references bundles that are not in their registry:\n  - %s\n"+
			"Push them first (`make push` pushes the operator and bundle of this build before the catalog); the catalog was not pushed",
			strings.Join(missing, "\n  - "))
	}
	return nil
}
