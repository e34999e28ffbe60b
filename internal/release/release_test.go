package release

import (
	"bytes"
	"context"
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

	"github.com/titanml/inference-stack-operator/internal/catalogrender"
	"github.com/titanml/inference-stack-operator/internal/crdcompat"
	"github.com/titanml/inference-stack-operator/internal/gobuild"
	"github.com/titanml/inference-stack-operator/internal/imagebuild"
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
// the repository to an in-process registry, and checks that each recorded
// release rebuilds to the recorded digests from its commit.
func TestReleaseToALoopbackRegistry(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and releases the operator")
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	reg := strings.TrimPrefix(srv.URL, "http://")
	if !strings.HasPrefix(reg, "127.0.0.1:") {
		t.Fatalf("registry not on loopback: %s", reg)
	}
	repo := committedCopy(t)
	ctx := context.Background()
	var logs bytes.Buffer
	defer func() {
		if t.Failed() {
			t.Logf("log:\n%s", logs.String())
		}
	}()
	cfg := imagebuild.Config{
		Root: repo, Repos: imagebuild.ReposFor(reg + "/tytn"), Archetypes: []string{"stable", "fast"},
		Platforms: []gobuild.Target{{OS: "linux", Arch: "amd64"}}, Log: &logs,
	}
	po := push.Options{Keychain: authn.NewMultiKeychain(), Backoff: time.Millisecond, Log: &logs}
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
	for _, n := range imagebuild.Names {
		if err := head(res.Image(n).Ref.String()); err != nil {
			t.Errorf("%s not in the registry: %v", n, err)
		}
		if err := head(res.Image(n).Ref.Repository + ":0.1.0"); err != nil {
			t.Errorf("%s tag: %v", n, err)
		}
	}
	rels, err := catalogrender.LoadReleases(filepath.Join(repo, catalogrender.ReleasedDir))
	if err != nil || len(rels) != 1 || rels[0].BundleImage != res.Image(imagebuild.Bundle).Ref.String() || rels[0].Revision != commit {
		t.Fatalf("released entries %+v, %v", rels, err)
	}
	tmpl, _ := os.ReadFile(filepath.Join(repo, catalogrender.TemplatePath))
	if strings.Count(string(tmpl), res.Image(imagebuild.Bundle).Ref.String()) != 2 {
		t.Errorf("template not updated:\n%s", tmpl)
	}
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "release 0.1.0")

	// Rebuilding at the new commit reproduces the release, catalog included.
	again, err := imagebuild.Build(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range imagebuild.Names {
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
	if _, err := imagebuild.Build(ctx, cfg); err == nil || !strings.Contains(err.Error(), "bump VERSION") {
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
	for _, want := range []string{res.Image(imagebuild.Bundle).Ref.String(), res2.Image(imagebuild.Bundle).Ref.String(), `"replaces": "inference-stack-operator.v0.1.0"`} {
		if !strings.Contains(string(fbc), want) {
			t.Errorf("catalog lacks %s", want)
		}
	}
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "release 0.2.0")

	// Anyone can check the published digests against the source.
	vs, err := Verify(ctx, repo, VerifyOptions{Log: &logs})
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
}

// TestRecordedReleasesReproduce rebuilds every release recorded in this
// repository's catalog/released/ from its commit and compares the digests.
func TestRecordedReleasesReproduce(t *testing.T) {
	rels, err := catalogrender.LoadReleases(filepath.Join(repoRoot, catalogrender.ReleasedDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(rels) == 0 {
		t.Skip("no release recorded in catalog/released/ yet")
	}
	if testing.Short() {
		t.Skip("rebuilds every recorded release")
	}
	for _, r := range rels {
		if err := exec.Command("git", "-C", repoRoot, "cat-file", "-e", r.Revision+"^{commit}").Run(); err != nil {
			t.Skipf("release commit %s of %s is not in this clone (shallow?)", r.Revision, r.Version)
		}
	}
	vs, err := Verify(context.Background(), repoRoot, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if !v.OK() {
			t.Errorf("%s does not reproduce: %+v", v.Version, v)
		}
	}
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
	cfg := imagebuild.Config{Root: repo, Repos: imagebuild.ReposFor("127.0.0.1:1/unused"), Log: &logs}
	_, err = Run(context.Background(), cfg, push.Options{Keychain: authn.NewMultiKeychain(), Log: &logs})
	if err == nil || !strings.Contains(err.Error(), "refusing to release 0.1.0") || !strings.Contains(err.Error(), "readerConfig.device (enum)") {
		t.Fatalf("release with a narrowed enum: %v", err)
	}
	t.Logf("%v", err)
	if _, err := os.Stat(filepath.Join(repo, "out")); err == nil {
		t.Error("the refused release built something")
	}
}
