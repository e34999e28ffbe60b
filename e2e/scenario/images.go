package scenario

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/blang/semver/v4"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/olmlocal"
	"github.com/titanml/inference-stack-operator/e2e/harness/olmv0local"
	"github.com/titanml/inference-stack-operator/e2e/harness/testinputs"
	"github.com/titanml/inference-stack-operator/internal/build"
	"github.com/titanml/inference-stack-operator/internal/build/gobuild"
	"github.com/titanml/inference-stack-operator/internal/crdcompat"
	"github.com/titanml/inference-stack-operator/internal/push"
	"github.com/titanml/inference-stack-operator/internal/release"
	"github.com/titanml/inference-stack-operator/internal/srctree"
)

// Images are the digest references of one build.
type Images struct {
	Version                   string
	Operator, Bundle, Catalog string
}

func imagesOf(res *build.Result) *Images {
	return &Images{
		Version:  res.Version,
		Operator: res.Image(build.Operator).Ref.String(),
		Bundle:   res.Image(build.Bundle).Ref.String(),
		Catalog:  res.Image(build.Catalog).Ref.String(),
	}
}

// Builder builds and publishes the operator, bundle and catalog images with
// the project's own build of record (internal/build: hermetic build
// into OCI layouts, bundle generation pinning the operator by digest, FBC
// from the semver template; internal/push and internal/release: push with
// retries, release recording), in-process.
//
// It works on a copy of the source tree in its own git repository (under
// Dir/src), so that a version can be released there the way `make release`
// does — recording it in catalog/released/ and the template — without
// touching the real tree: the next build's catalog then holds both
// versions, as a real catalog would.
type Builder struct {
	// Root is the repository whose source is copied.
	Root string
	// Dir is the builder's work directory.
	Dir string
	// Registry is the registry and namespace of the three repositories
	// (isctl -registry), e.g. 127.0.0.1:40123/tytn. Image references in the
	// bundle and catalog name it, so the cluster must be able to pull from
	// it under that name.
	Registry string
	// RegistryCAFile is a PEM file of the CA the registry's certificate
	// chains to, trusted in addition to the system's roots when pushing.
	RegistryCAFile string
	// Platforms of the operator image; default this machine's
	// (linux/<GOARCH>): a test cluster needs nothing else, and each
	// platform costs a compile.
	Platforms string
	// Binaries, when set, are operator binaries for this machine's
	// platform by the version they are stamped with (under Bazel, see
	// BuildInputs); the builder packages them with the build of record
	// instead of compiling, so it needs no go command.
	Binaries map[string]string
	// CatalogBinaries go with Binaries: the catalog image's programs for
	// this machine's platform (build.Prebuilt.Catalog).
	CatalogBinaries map[string]string
	// Files, when set, are the only files of Root the copy holds (under
	// Bazel: the build inputs, whose runfiles are links into the build's
	// inputs, so they are copied by content and an edit stays in the copy).
	Files []string
	Log   io.Writer

	src      string
	prepared bool
	// mu serialises the builder's operations (one git work tree).
	mu sync.Mutex
}

func (b *Builder) logf(format string, args ...any) {
	if b.Log != nil {
		fmt.Fprintf(b.Log, format+"\n", args...)
	}
}

// Prepare copies the source tree (what git would commit: tracked and
// untracked-but-not-ignored files) into a fresh git repository with one
// commit.
func (b *Builder) Prepare(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.prepare(ctx)
}

func (b *Builder) prepare(ctx context.Context) error {
	if b.prepared {
		return nil
	}
	if b.Platforms == "" {
		b.Platforms = "linux/" + runtime.GOARCH
	}
	begin := time.Now()
	b.src = filepath.Join(b.Dir, "src")
	if err := os.RemoveAll(b.src); err != nil {
		return fmt.Errorf("clearing the source copy: %w", err)
	}
	if b.Files != nil {
		if err := copyFiles(b.Root, b.src, b.Files); err != nil {
			return fmt.Errorf("copying the build inputs: %w", err)
		}
	} else if err := srctree.Copy(ctx, b.Root, b.src); err != nil {
		return fmt.Errorf("copying the source tree: %w", err)
	}
	if err := b.git(ctx, "init", "-q"); err != nil {
		return err
	}
	if err := b.commit(ctx, "source"); err != nil {
		return err
	}
	b.prepared = true
	b.logf("source copied to %s in %s", b.src, time.Since(begin).Round(10*time.Millisecond))
	return nil
}

// git runs git in the copy with a fixed identity and dates, so the same
// source gives the same commits (and revision stamps) on every run.
func (b *Builder) git(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "git", append([]string{
		"-c", "user.name=inference-stack e2e", "-c", "user.email=e2e@example.invalid",
		"-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main", "-c", "core.hooksPath=/dev/null",
	}, args...)...)
	cmd.Dir = b.src
	cmd.Env = append(os.Environ(),
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_DATE=2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2000-01-01T00:00:00Z")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func (b *Builder) commit(ctx context.Context, msg string) error {
	if err := b.git(ctx, "add", "-A"); err != nil {
		return err
	}
	return b.git(ctx, "commit", "-q", "--allow-empty", "-m", msg)
}

func (b *Builder) setVersion(ctx context.Context, version string) error {
	if err := os.WriteFile(filepath.Join(b.src, "VERSION"), []byte(version+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing VERSION: %w", err)
	}
	return b.commit(ctx, "VERSION "+version)
}

// Change edits the copy of the source with edit (given the copy's root) and
// commits the result, as a change made between two releases would be.
func (b *Builder) Change(ctx context.Context, what string, edit func(root string) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.prepare(ctx); err != nil {
		return err
	}
	if err := edit(b.src); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return b.commit(ctx, what)
}

// BumpChartMinor raises the minor version of the inference-stack chart in
// the source tree at root, as an operator release that changes the chart
// does, and returns the new version.
func BumpChartMinor(root string) (string, error) {
	file := filepath.Join(root, "charts", "inference-stack", "Chart.yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("reading the chart's metadata: %w", err)
	}
	var next string
	out := chartVersionLine.ReplaceAllStringFunc(string(data), func(line string) string {
		v, err := semver.Parse(strings.TrimSpace(strings.TrimPrefix(line, "version:")))
		if err != nil {
			return line
		}
		v.Minor, v.Patch, v.Pre = v.Minor+1, 0, nil
		next = v.String()
		return "version: " + next
	})
	if next == "" {
		return "", fmt.Errorf("%s has no semver version line", file)
	}
	return next, os.WriteFile(file, []byte(out), 0o644)
}

var chartVersionLine = regexp.MustCompile(`(?m)^version:.*$`)

// OutDir is the build output directory of version.
func (b *Builder) OutDir(version string) string { return filepath.Join(b.Dir, "out-"+version) }

// config is the build of version of the copy into out, its progress going
// to log.
func (b *Builder) config(version, out, registry string, log io.Writer) (build.Config, error) {
	plats, err := gobuild.ParseTargets(b.Platforms)
	if err != nil {
		return build.Config{}, fmt.Errorf("builder platforms: %w", err)
	}
	cfg := build.Config{Root: b.src, Out: out, Repos: build.ReposFor(registry), Platforms: plats, Log: log}
	if b.Binaries != nil {
		host := gobuild.Target{OS: "linux", Arch: runtime.GOARCH}
		bin, ok := b.Binaries[version]
		if !ok || len(plats) != 1 || plats[0] != host {
			return build.Config{}, fmt.Errorf("no prebuilt operator binary of version %s for %s (have %v for %s)", version, b.Platforms, keys(b.Binaries), host)
		}
		cfg.Binaries = &build.Prebuilt{Operator: map[gobuild.Target]string{host: bin}, Catalog: b.CatalogBinaries}
	}
	return cfg, nil
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// copyFiles copies files (relative to root) into dst by content.
func copyFiles(root, dst string, files []string) error {
	for _, f := range files {
		src := filepath.Join(root, filepath.FromSlash(f))
		st, err := os.Stat(src)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(target, data, st.Mode().Perm()|0o200); err != nil {
			return err
		}
	}
	return nil
}

// Inputs are what the scenario builds its images from.
type Inputs struct {
	// Root is the source root the Builder copies; Files, when set, the
	// files of it to copy.
	Root  string
	Files []string
	// Binaries are prebuilt operator binaries by version (nil: compile),
	// CatalogBinaries the catalog image's programs that go with them.
	Binaries, CatalogBinaries map[string]string
}

// builder is a Builder of these inputs working in dir.
func (in Inputs) builder(dir string, log io.Writer) *Builder {
	return &Builder{Root: in.Root, Files: in.Files, Binaries: in.Binaries, CatalogBinaries: in.CatalogBinaries, Dir: dir, Log: log}
}

// BuildInputs returns the scenario's inputs. Under Bazel: the release
// inputs and the chart the scenario changes (testinputs.BuildInputs, runfiles
// whose root is the directory of VERSION) and the prebuilt operator
// binaries (testinputs.OperatorBinaries), so nothing needs a go command or
// a checkout. Outside Bazel: the repository root, and no binaries (the
// Builder compiles).
func BuildInputs() (Inputs, error) {
	root, files, ok, err := testinputs.Tree(testinputs.BuildInputs, "VERSION")
	if err != nil {
		return Inputs{}, err
	}
	if !ok {
		root, err := localcluster.RepoRoot()
		return Inputs{Root: root}, err
	}
	bins, _, err := testinputs.Pairs(testinputs.OperatorBinaries)
	if err != nil {
		return Inputs{}, err
	}
	found, _, err := testinputs.Executables(testinputs.Binaries)
	if err != nil {
		return Inputs{}, err
	}
	programs, err := testinputs.Pick(testinputs.Binaries, found, build.CatalogPrograms...)
	if err != nil {
		return Inputs{}, err
	}
	catalog := map[string]string{}
	for i, n := range build.CatalogPrograms {
		catalog[n] = programs[i]
	}
	return Inputs{Root: root, Files: files, Binaries: bins, CatalogBinaries: catalog}, nil
}

// FindInputs finds, under Bazel, every input of the local providers (see
// localcluster.FindInputs): the cluster's, OLM v1's and OLM v0's, the
// build inputs, the catalog image's programs and an operator binary for
// each version the scenario builds.
func FindInputs(ctx context.Context, log io.Writer, versions ...string) error {
	if err := olmlocal.FindInputs(ctx, log); err != nil {
		return err
	}
	if err := olmv0local.FindInputs(ctx, log); err != nil {
		return err
	}
	in, err := BuildInputs()
	if err != nil {
		return err
	}
	for _, v := range versions {
		if _, ok := in.Binaries[v]; !ok && in.Binaries != nil {
			return fmt.Errorf("%s has no operator binary of version %s (have %v)", testinputs.OperatorBinaries, v, keys(in.Binaries))
		}
	}
	// What the Builder's copy holds: the build's inputs, and the chart
	// Builder.Change bumps (BumpChartMinor).
	dst, err := os.MkdirTemp("", "scenario-inputs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dst)
	if in.Files != nil {
		if err := copyFiles(in.Root, dst, in.Files); err != nil {
			return fmt.Errorf("copying the build inputs: %w", err)
		}
	} else if err := srctree.Copy(ctx, in.Root, dst); err != nil {
		return fmt.Errorf("copying the source tree: %w", err)
	}
	if _, err := build.LoadInputs(build.Config{Root: dst}); err != nil {
		return fmt.Errorf("the build inputs of the copy: %w", err)
	}
	// A release also checks the CRD against the last release's
	// (crdcompat.Check, from the copy's git history).
	if _, err := os.Stat(filepath.Join(dst, filepath.FromSlash(crdcompat.CRDPath))); err != nil {
		return fmt.Errorf("the CRD a release checks: %w", err)
	}
	if _, err := crdcompat.LoadAcceptances(dst); err != nil {
		return fmt.Errorf("the accepted CRD changes a release reads: %w", err)
	}
	if _, err := BumpChartMinor(dst); err != nil {
		return fmt.Errorf("the chart the scenario changes: %w", err)
	}
	return nil
}

func (b *Builder) pushOptions(log io.Writer) (push.Options, error) {
	o := push.Options{Log: log}
	if b.RegistryCAFile == "" {
		return o, nil
	}
	pem, err := os.ReadFile(b.RegistryCAFile)
	if err != nil {
		return o, fmt.Errorf("reading the registry's CA: %w", err)
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if !roots.AppendCertsFromPEM(pem) {
		return o, fmt.Errorf("%s holds no PEM certificate", b.RegistryCAFile)
	}
	t := remote.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	o.Transport = t
	return o, nil
}

// atVersion sets version in the copy, then runs op on the build of the
// copy into out (images named under registry) as one logged step; its
// progress is shown only when it fails.
func (b *Builder) atVersion(ctx context.Context, version, what, out, registry string, op func(build.Config, push.Options) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.prepare(ctx); err != nil {
		return err
	}
	if err := b.setVersion(ctx, version); err != nil {
		return err
	}
	var log bytes.Buffer
	begin := time.Now()
	err := func() error {
		if err := b.shareLayerCache(out); err != nil {
			return err
		}
		cfg, err := b.config(version, out, registry, &log)
		if err != nil {
			return err
		}
		po, err := b.pushOptions(&log)
		if err != nil {
			return err
		}
		return op(cfg, po)
	}()
	b.logf("%s %s (%s)", what, version, time.Since(begin).Round(100*time.Millisecond))
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", what, version, err, log.String())
	}
	return nil
}

// shareLayerCache makes out's layer cache (out/cache, content-addressed)
// the builder's one, so the layers versions share — the catalog image's
// opm above all, and a warm build's operator — are compressed once.
func (b *Builder) shareLayerCache(out string) error {
	shared := filepath.Join(b.Dir, "layer-cache")
	if err := os.MkdirAll(shared, 0o755); err != nil {
		return fmt.Errorf("creating the shared layer cache: %w", err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", out, err)
	}
	link := filepath.Join(out, "cache")
	if target, err := os.Readlink(link); err == nil && target == shared {
		return nil
	}
	if err := os.RemoveAll(link); err != nil {
		return err
	}
	if err := os.Symlink(shared, link); err != nil {
		return fmt.Errorf("sharing the layer cache: %w", err)
	}
	return nil
}

// Release releases version in the copy like `make release`: build, push
// operator and bundle, record the release in catalog/, rebuild, push the
// catalog (which lists every recorded release). The record is committed,
// so later builds include the version in their catalog.
func (b *Builder) Release(ctx context.Context, version string) (*Images, error) {
	var res *build.Result
	err := b.atVersion(ctx, version, "release", b.OutDir(version), b.Registry, func(cfg build.Config, po push.Options) (err error) {
		if res, err = release.Run(ctx, cfg, po); err != nil {
			return err
		}
		return b.commit(ctx, "release "+version)
	})
	if err != nil {
		return nil, err
	}
	return imagesOf(res), nil
}

// BuildAndPush builds version (its catalog: every recorded release plus
// this build's bundle) and pushes the three images.
func (b *Builder) BuildAndPush(ctx context.Context, version string) (*Images, error) {
	var res *build.Result
	err := b.atVersion(ctx, version, "build and push", b.OutDir(version), b.Registry, func(cfg build.Config, po push.Options) (err error) {
		if res, err = build.Build(ctx, cfg); err != nil {
			return err
		}
		_, err = push.Outputs(ctx, res.Out, build.Names, po)
		return err
	})
	if err != nil {
		return nil, err
	}
	return imagesOf(res), nil
}

// Warm builds the operator at version without pushing (into a scratch
// output, under a placeholder registry: the operator binary does not
// depend on it), so that a later Release or BuildAndPush of that version
// finds every package compiled. Meant to run while the cluster's binaries
// build, on a first run.
func (b *Builder) Warm(ctx context.Context, version string) error {
	if b.Binaries != nil {
		return nil // prebuilt: nothing to compile
	}
	out := filepath.Join(b.Dir, "warm")
	defer os.RemoveAll(out)
	return b.atVersion(ctx, version, "warm build", out, "127.0.0.1:1/warm", func(cfg build.Config, _ push.Options) error {
		_, err := build.Build(ctx, cfg)
		return err
	})
}
