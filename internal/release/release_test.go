package release

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/cosign/v2/pkg/cosign"

	"github.com/titanml/inference-stack-operator/internal/attest/sbom"
	"github.com/titanml/inference-stack-operator/internal/attest/signing"
	"github.com/titanml/inference-stack-operator/internal/build"
	"github.com/titanml/inference-stack-operator/internal/build/gobuild"
	"github.com/titanml/inference-stack-operator/internal/catalog"
	"github.com/titanml/inference-stack-operator/internal/crdcompat"
	"github.com/titanml/inference-stack-operator/internal/oci"
	"github.com/titanml/inference-stack-operator/internal/push"
	"github.com/titanml/inference-stack-operator/internal/srctree"
)

const repoRoot = "../.."

// git runs git in dir with a fixed identity and fixed dates.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=isctl test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// committedCopy copies the repository's source tree (as a clone would hold
// it) into a new git repository with one commit.
func committedCopy(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not available")
	}
	dir := filepath.Join(t.TempDir(), "origin")
	if err := srctree.Copy(context.Background(), repoRoot, dir); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "init", "-q")
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "source")
	return dir
}

func goEnv(t *testing.T, key string) string {
	t.Helper()
	out, err := exec.Command("go", "env", key).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// TestFreshClonesBuildIdenticalImages: `make images` in two fresh clones, in
// two different directories, with different TMPDIR, time zones and file
// times, produces byte-identical digests.txt (and identical outputs).
func TestFreshClonesBuildIdenticalImages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the operator twice from fresh clones")
	}
	origin := committedCopy(t)
	base := t.TempDir()
	type clone struct{ dir, tmp, tz string }
	clones := []clone{
		{filepath.Join(base, "first", "src"), filepath.Join(base, "tmp-a"), "UTC"},
		{filepath.Join(base, "elsewhere", "deeper", "checkout"), filepath.Join(base, "tmp-b"), "Asia/Tokyo"},
	}
	for i, c := range clones {
		git(t, base, "clone", "-q", origin, c.dir)
		os.MkdirAll(c.tmp, 0o755)
		if i == 1 {
			// Another machine's clock: every file looks written in 2001.
			old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
			filepath.WalkDir(c.dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil {
					os.Chtimes(p, old, old)
				}
				return nil
			})
		}
		args := []string{"images"}
		if _, err := os.Stat(filepath.Join(c.dir, "Makefile")); err != nil {
			args = []string{"-f", "tools/tools.mk", "images"}
		}
		cmd := exec.Command("make", args...)
		cmd.Dir = c.dir
		env := []string{}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "SOURCE_DATE_EPOCH=") && !strings.HasPrefix(kv, "REGISTRY=") && !strings.HasPrefix(kv, "VERSION=") {
				env = append(env, kv)
			}
		}
		cmd.Env = append(env, "TMPDIR="+c.tmp, "TZ="+c.tz, "GOCACHE="+goEnv(t, "GOCACHE"), "GOMODCACHE="+goEnv(t, "GOMODCACHE"), "GOFLAGS=-mod=readonly")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make images in %s: %v\n%s", c.dir, err, out)
		}
		t.Logf("clone %d built in %s", i+1, time.Since(start).Round(time.Second))
	}
	a, err := os.ReadFile(filepath.Join(clones[0].dir, "out", "images", "digests.txt"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(clones[1].dir, "out", "images", "digests.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatalf("digests differ:\n%s\nvs\n%s", a, b)
	}
	t.Logf("digests.txt:\n%s", a)
	// Everything else the build wrote is identical too.
	for _, sub := range []string{"images", "bundle", "catalog"} {
		da, db := filepath.Join(clones[0].dir, "out", sub), filepath.Join(clones[1].dir, "out", sub)
		filepath.WalkDir(da, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(da, p)
			x, _ := os.ReadFile(p)
			y, err := os.ReadFile(filepath.Join(db, rel))
			if err != nil || !bytes.Equal(x, y) {
				t.Errorf("out/%s/%s differs between the clones", sub, rel)
			}
			return nil
		})
	}
}

// TestReleaseToALoopbackRegistry releases 0.1.0 and then 0.2.0 of a copy of
// the repository, signed, to an in-process registry without the referrers
// API (SBOM and provenance go through the referrers tag schema), checks
// that each recorded release rebuilds to the recorded digests from its
// commit, and verifies the final catalog, which pins both bundles.
func TestReleaseToALoopbackRegistry(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and releases the operator")
	}
	reg := loopbackRegistry(t)
	signer, key, _ := testKeys(t)
	repo := committedCopy(t)
	ctx := context.Background()
	var logs bytes.Buffer
	defer func() {
		if t.Failed() {
			t.Logf("log:\n%s", logs.String())
		}
	}()
	cfg := build.Config{
		Root: repo, Repos: build.ReposFor(reg + "/tytn"), Archetypes: []string{"stable", "fast"},
		Platforms: []gobuild.Target{{OS: "linux", Arch: "amd64"}}, Log: &logs,
	}
	po := push.Options{Keychain: authn.NewMultiKeychain(), Backoff: time.Millisecond, Log: &logs, Signer: signer}
	head := func(ref string) error {
		r, err := name.ParseReference(ref)
		if err != nil {
			return err
		}
		_, err = remote.Head(r)
		return err
	}

	// A dirty tree is refused.
	os.WriteFile(filepath.Join(repo, "stray.txt"), []byte("x"), 0o644)
	if _, err := Run(ctx, cfg, po); err == nil || !strings.Contains(err.Error(), "uncommitted") {
		t.Fatalf("release from a dirty tree: %v", err)
	}
	os.Remove(filepath.Join(repo, "stray.txt"))

	commit := git(t, repo, "rev-parse", "HEAD")
	res, err := Run(ctx, cfg, po)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Released || res.Revision != commit {
		t.Fatalf("result %+v", res)
	}
	for _, n := range build.Names {
		if err := head(res.Image(n).Ref.String()); err != nil {
			t.Errorf("%s not in the registry: %v", n, err)
		}
		if err := head(res.Image(n).Ref.Repository + ":0.1.0"); err != nil {
			t.Errorf("%s tag: %v", n, err)
		}
	}
	rels, err := catalog.LoadReleases(filepath.Join(repo, catalog.ReleasedDir))
	if err != nil || len(rels) != 1 || rels[0].BundleImage != res.Image(build.Bundle).Ref.String() || rels[0].Revision != commit {
		t.Fatalf("released entries %+v, %v", rels, err)
	}
	tmpl, _ := os.ReadFile(filepath.Join(repo, catalog.TemplatePath))
	if strings.Count(string(tmpl), res.Image(build.Bundle).Ref.String()) != 2 {
		t.Errorf("template not updated:\n%s", tmpl)
	}
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "release 0.1.0")

	// Rebuilding at the new commit reproduces the release, catalog included.
	again, err := build.Build(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range build.Names {
		if again.Image(n).Ref != res.Image(n).Ref {
			t.Errorf("%s: rebuild %s, released %s", n, again.Image(n).Ref, res.Image(n).Ref)
		}
	}
	// Re-running the release is harmless.
	if _, err := Run(ctx, cfg, po); err != nil {
		t.Fatalf("second release of 0.1.0: %v", err)
	}

	// A source change without a VERSION bump is refused.
	csv := filepath.Join(repo, "bundle", "csv.base.yaml")
	src, _ := os.ReadFile(csv)
	os.WriteFile(csv, bytes.Replace(src, []byte("displayName: Inference Stack Operator"), []byte("displayName: Inference Stack Operator (changed)"), 1), 0o644)
	git(t, repo, "commit", "-q", "-am", "change")
	if _, err := build.Build(ctx, cfg); err == nil || !strings.Contains(err.Error(), "bump VERSION") {
		t.Fatalf("changed source at a released VERSION: %v", err)
	}

	// 0.2.0 goes to fast only; 0.1.0 stays the head of stable.
	os.WriteFile(filepath.Join(repo, "VERSION"), []byte("0.2.0\n"), 0o644)
	git(t, repo, "commit", "-q", "-am", "0.2.0")
	cfg2 := cfg
	cfg2.Archetypes = []string{"fast"}
	res2, err := Run(ctx, cfg2, po)
	if err != nil {
		t.Fatal(err)
	}
	fbc, _ := os.ReadFile(filepath.Join(repo, "out", "catalog", "configs", "inference-stack-operator", "catalog.json"))
	for _, want := range []string{res.Image(build.Bundle).Ref.String(), res2.Image(build.Bundle).Ref.String(), `"replaces": "inference-stack-operator.v0.1.0"`} {
		if !strings.Contains(string(fbc), want) {
			t.Errorf("catalog lacks %s", want)
		}
	}
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "release 0.2.0")

	// Anyone can check the published digests against the source.
	work := t.TempDir()
	vs, err := Verify(ctx, repo, VerifyOptions{WorkDir: work, Log: &logs})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 2 {
		t.Fatalf("%d verifications", len(vs))
	}
	for _, v := range vs {
		if !v.OK() {
			t.Errorf("%s does not reproduce: %+v", v.Version, v)
		}
	}
	// And the published catalog, image by image (reusing those rebuilds).
	var out bytes.Buffer
	checks, err := VerifyCatalog(ctx, repo, CatalogOptions{
		Catalog: res2.Image(build.Catalog).Ref.String(), Key: key, Registry: push.Options{Keychain: authn.NewMultiKeychain()},
		WorkDir: work, Out: &out, Log: &logs,
	})
	t.Logf("isctl verify -catalog:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, c := range checks {
		kinds = append(kinds, c.Kind+" "+c.Version)
	}
	if got := strings.Join(kinds, ", "); got != "catalog , bundle 0.1.0, operator 0.1.0, bundle 0.2.0, operator 0.2.0" {
		t.Errorf("checked %s", got)
	}
	op, _ := name.NewDigest(res2.Image(build.Operator).Ref.String())
	if mode, _, err := po.Referrers(ctx, op); err != nil || mode != push.ReferrersTag {
		t.Errorf("referrers mode %q, %v", mode, err)
	}
}

// TestRecordedReleasesReproduce rebuilds the releases recorded in this
// repository, if any, from their commits; and, so that it always checks
// something, records a release in a temporary copy (signed with a test key,
// pushed to a loopback registry with the OCI referrers API) and verifies
// the published catalog as anyone would (`isctl verify -catalog -key`).
// Tampered publications must be rejected: a catalog signed with another
// key; a bundle built from changed source that claims the release commit
// and is signed with the right key (a leaked key); a forged SBOM attached
// next to the genuine one.
func TestRecordedReleasesReproduce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds, releases and rebuilds the operator")
	}
	ctx := context.Background()
	rels, err := catalog.LoadReleases(filepath.Join(repoRoot, catalog.ReleasedDir))
	if err != nil {
		t.Fatal(err)
	}
	recorded := len(rels) > 0
	for _, r := range rels {
		if err := exec.Command("git", "-C", repoRoot, "cat-file", "-e", r.Revision+"^{commit}").Run(); err != nil {
			t.Logf("release commit %s of %s is not in this clone (shallow?): this repository's records are not rebuilt", r.Revision, r.Version)
			recorded = false
		}
	}
	if recorded {
		vs, err := Verify(ctx, repoRoot, VerifyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			if !v.OK() {
				t.Errorf("%s does not reproduce: %+v", v.Version, v)
			}
		}
	}

	reg := loopbackRegistry(t, registry.WithReferrersSupport(true))
	repo := committedCopy(t)
	var logs bytes.Buffer
	defer func() {
		if t.Failed() {
			t.Logf("log:\n%s", logs.String())
		}
	}()
	signer, key, otherKey := testKeys(t)
	cfg := build.Config{
		Root: repo, Repos: build.ReposFor(reg + "/tytn"), Archetypes: []string{"stable", "fast"},
		Platforms: []gobuild.Target{{OS: "linux", Arch: "amd64"}}, Log: &logs,
	}
	po := push.Options{Keychain: authn.NewMultiKeychain(), Backoff: time.Millisecond, Log: &logs, Signer: signer}
	res, err := Run(ctx, cfg, po)
	if err != nil {
		t.Fatal(err)
	}
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "release 0.1.0")
	commit := res.Revision
	catalogRef := res.Image(build.Catalog).Ref.String()
	work := t.TempDir()
	verify := func(catalogRef string, key *signing.Verifier) ([]Check, string, error) {
		var out bytes.Buffer
		checks, err := VerifyCatalog(ctx, repo, CatalogOptions{
			Catalog: catalogRef, Key: key, Registry: push.Options{Keychain: authn.NewMultiKeychain(), Backoff: time.Millisecond},
			WorkDir: work, Out: &out, Log: &logs,
		})
		t.Logf("isctl verify -catalog %s:\n%s", catalogRef, out.String())
		return checks, out.String(), err
	}

	// The published catalog verifies, by digest and by tag: one line per image.
	for _, ref := range []string{catalogRef, res.Image(build.Catalog).Ref.Repository + ":0.1.0"} {
		checks, out, err := verify(ref, key)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"catalog", "bundle", "operator"}
		if len(checks) != 3 || strings.Count(out, "\n") != 3 {
			t.Fatalf("checks %+v", checks)
		}
		for i, c := range checks {
			if !c.OK || c.Kind != want[i] || (i > 0 && !strings.Contains(c.Detail, "rebuilt from "+commit[:12])) {
				t.Errorf("check %d: %+v", i, c)
			}
		}
		if checks[1].Ref != res.Image(build.Bundle).Ref.String() || checks[2].Ref != res.Image(build.Operator).Ref.String() {
			t.Errorf("checked %s and %s", checks[1].Ref, checks[2].Ref)
		}
	}

	// Signed with another key: rejected at the catalog.
	checks, _, err := verify(catalogRef, otherKey)
	if !errors.Is(err, ErrMismatch) || len(checks) != 1 || checks[0].OK || !strings.Contains(checks[0].Detail, "signature") {
		t.Fatalf("another key: %v %+v", err, checks)
	}

	// A leaked key: the bundle is built from changed source, claims the
	// release commit, and is signed and attested with the right key; its
	// catalog is consistent and signed. The rebuild unmasks it.
	tampered := filepath.Join(t.TempDir(), "tampered")
	if err := srctree.Copy(ctx, repo, tampered); err != nil {
		t.Fatal(err)
	}
	// Its tree as before the release was recorded (so 0.1.0 builds anew).
	os.Remove(filepath.Join(tampered, catalog.ReleasedDir, "0.1.0.yaml"))
	os.WriteFile(filepath.Join(tampered, catalog.TemplatePath), []byte(git(t, repo, "show", "HEAD~1:"+catalog.TemplatePath)+"\n"), 0o644)
	csv := filepath.Join(tampered, "bundle", "csv.base.yaml")
	src, _ := os.ReadFile(csv)
	os.WriteFile(csv, bytes.Replace(src, []byte("displayName: Inference Stack Operator"), []byte("displayName: Inference Stack Operator (tampered)"), 1), 0o644)
	tcfg := cfg
	tcfg.Root, tcfg.Revision, tcfg.CurrentOnly = tampered, commit, true
	tcfg.Repos.Catalog = reg + "/tampered/operator-catalog"
	bad, err := build.Build(ctx, tcfg)
	if err != nil {
		t.Fatal(err)
	}
	if bad.Image(build.Bundle).Ref == res.Image(build.Bundle).Ref || bad.Image(build.Operator).Ref != res.Image(build.Operator).Ref {
		t.Fatalf("the tampered build: bundle %s, operator %s", bad.Image(build.Bundle).Ref, bad.Image(build.Operator).Ref)
	}
	if _, err := push.Outputs(ctx, bad.Out, build.Names, po); err != nil {
		t.Fatal(err)
	}
	checks, out, err := verify(bad.Image(build.Catalog).Ref.String(), key)
	if !errors.Is(err, ErrMismatch) || len(checks) != 2 || !checks[0].OK || checks[1].OK || checks[1].Kind != "bundle" ||
		!strings.Contains(checks[1].Detail, "gives "+res.Image(build.Bundle).Ref.String()) {
		t.Fatalf("tampered bundle: %v\n%s", err, out)
	}

	// A forged SBOM attached to the genuine operator next to its own.
	op := res.Image(build.Operator).Ref
	top, err := oci.ReadLayout(filepath.Join(repo, "out", "images", build.Operator))
	if err != nil {
		t.Fatal(err)
	}
	forged, err := oci.Artifact(sbom.MediaType, top.Descriptor, []oci.Blob{{MediaType: sbom.MediaType,
		Data: []byte(`{"bomFormat":"CycloneDX","specVersion":"1.6","version":1,"components":[]}`)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fd, _ := forged.Digest()
	dref, _ := name.NewDigest(op.Repository + "@" + fd.String())
	if err := remote.Write(dref, forged); err != nil {
		t.Fatal(err)
	}
	checks, out, err = verify(catalogRef, key)
	if !errors.Is(err, ErrMismatch) || len(checks) != 3 || !checks[1].OK || checks[2].OK || !strings.Contains(checks[2].Detail, "another SBOM") {
		t.Fatalf("forged SBOM: %v\n%s", err, out)
	}
}

// loopbackRegistry starts go-containerregistry's registry on 127.0.0.1.
func loopbackRegistry(t *testing.T, opts ...registry.Option) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(append([]registry.Option{registry.Logger(log.New(io.Discard, "", 0))}, opts...)...))
	t.Cleanup(srv.Close)
	reg := strings.TrimPrefix(srv.URL, "http://")
	if !strings.HasPrefix(reg, "127.0.0.1:") {
		t.Fatalf("registry not on loopback: %s", reg)
	}
	return reg
}

// testKeys returns a signer with a fresh cosign key, the verifier of its
// public key, and the verifier of another key.
func testKeys(t *testing.T) (*signing.Signer, *signing.Verifier, *signing.Verifier) {
	t.Helper()
	dir := t.TempDir()
	var vs []*signing.Verifier
	var signer *signing.Signer
	for i := 0; i < 2; i++ {
		keys, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return []byte("test"), nil })
		if err != nil {
			t.Fatal(err)
		}
		priv, pub := filepath.Join(dir, fmt.Sprintf("cosign%d.key", i)), filepath.Join(dir, fmt.Sprintf("cosign%d.pub", i))
		os.WriteFile(priv, keys.PrivateBytes, 0o600)
		os.WriteFile(pub, keys.PublicBytes, 0o644)
		v, err := signing.LoadVerifier(pub)
		if err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
		if i == 0 {
			if signer, err = signing.LoadSigner(priv, []byte("test")); err != nil {
				t.Fatal(err)
			}
		}
	}
	return signer, vs[0], vs[1]
}

// A release whose CRD breaks existing stacks is refused before anything is
// built or pushed, with the field named.
func TestReleaseRefusesABreakingCRD(t *testing.T) {
	repo := committedCopy(t)
	crdPath := filepath.Join(repo, crdcompat.CRDPath)
	crd, err := os.ReadFile(crdPath)
	if err != nil {
		t.Fatal(err)
	}
	// Narrow every device enum to cpu only: stacks with cuda readers would
	// no longer validate.
	narrowed := strings.ReplaceAll(string(crd), "                        enum:\n                        - cpu\n                        - cuda\n", "                        enum:\n                        - cpu\n")
	if narrowed == string(crd) {
		t.Fatal("the test's edit did not apply: update it to the CRD's layout")
	}
	if err := os.WriteFile(crdPath, []byte(narrowed), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, repo, "commit", "-qam", "narrow device")
	var logs bytes.Buffer
	cfg := build.Config{Root: repo, Repos: build.ReposFor("127.0.0.1:1/unused"), Log: &logs}
	_, err = Run(context.Background(), cfg, push.Options{Keychain: authn.NewMultiKeychain(), Log: &logs})
	if err == nil || !strings.Contains(err.Error(), "refusing to release 0.1.0") || !strings.Contains(err.Error(), "readerConfig.device (enum)") {
		t.Fatalf("release with a narrowed enum: %v", err)
	}
	t.Logf("%v", err)
	if _, err := os.Stat(filepath.Join(repo, "out")); err == nil {
		t.Error("the refused release built something")
	}
}
