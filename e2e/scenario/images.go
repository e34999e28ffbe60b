package scenario

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Images are the digest references of one build, as recorded in the
// build's out/images/digests.txt.
type Images struct {
	Version                   string
	Operator, Bundle, Catalog string
}

// Builder builds and publishes the operator, bundle and catalog images with
// the project's own build of record (tools/cmd/isctl: hermetic build into
// OCI layouts, bundle generation pinning the operator by digest, FBC from
// the semver template, push with retries) — run as a command, because its
// packages are internal to tools/.
//
// It works on a copy of the source tree in its own git repository (under
// Dir/src), so that a version can be released there the way `make release`
// does — recording it in catalog/released/ and the template — without
// touching the real tree: the next build's catalog then holds both
// versions, as a real catalog would.
type Builder struct {
	// Root is the repository (the source copied, and where isctl is built).
	Root string
	// Dir is the builder's work directory.
	Dir string
	// Registry is the registry and namespace of the three repositories
	// (isctl -registry), e.g. 127.0.0.1:40123/tytn. Image references in the
	// bundle and catalog name it, so the cluster must be able to pull from
	// it under that name.
	Registry string
	// PushEnv is added to isctl's environment when it pushes (e.g.
	// SSL_CERT_FILE trusting the registry's CA).
	PushEnv []string
	// Platforms of the operator image; default this machine's
	// (linux/<GOARCH>): a test cluster needs nothing else, and each
	// platform costs a compile.
	Platforms string
	Log       io.Writer

	isctl    string
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

// Prepare builds isctl and copies the source tree (what git would commit:
// tracked and untracked-but-not-ignored files) into a fresh git repository
// with one commit.
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
	if err := os.MkdirAll(b.Dir, 0o755); err != nil {
		return err
	}
	begin := time.Now()
	b.isctl = filepath.Join(b.Dir, "isctl")
	build := exec.CommandContext(ctx, "go", "build", "-tags", "containers_image_openpgp", "-o", b.isctl, "./tools/cmd/isctl")
	build.Dir = b.Root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building isctl: %w\n%s", err, out)
	}
	b.src = filepath.Join(b.Dir, "src")
	if err := os.RemoveAll(b.src); err != nil {
		return err
	}
	files, err := sourceFiles(ctx, b.Root)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := copyFile(filepath.Join(b.Root, f), filepath.Join(b.src, f)); err != nil {
			return err
		}
	}
	if err := b.git(ctx, "init", "-q"); err != nil {
		return err
	}
	if err := b.commit(ctx, "source"); err != nil {
		return err
	}
	b.prepared = true
	b.logf("isctl built and %d source files copied to %s in %s", len(files), b.src, time.Since(begin).Round(10*time.Millisecond))
	return nil
}

// sourceFiles lists what a clone of root would hold plus untracked files
// that are not ignored (work in progress is built too).
func sourceFiles(ctx context.Context, root string) ([]string, error) {
	cmd := exec.CommandContext(ctx, "git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing source files (git ls-files in %s): %w", root, err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		if fi, err := os.Lstat(filepath.Join(root, f)); err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or a symlink
		}
		files = append(files, f)
	}
	return files, nil
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, data, fi.Mode().Perm())
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
		return err
	}
	return b.commit(ctx, "VERSION "+version)
}

func (b *Builder) run(ctx context.Context, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, b.isctl, args...)
	cmd.Dir = b.src
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off"), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	begin := time.Now()
	err := cmd.Run()
	b.logf("isctl %s (%s)", strings.Join(args, " "), time.Since(begin).Round(100*time.Millisecond))
	if err != nil {
		return out.String(), fmt.Errorf("isctl %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// OutDir is the build output directory of version.
func (b *Builder) OutDir(version string) string { return filepath.Join(b.Dir, "out-"+version) }

func (b *Builder) buildFlags(version string) []string {
	return []string{"-root", b.src, "-out", b.OutDir(version), "-registry", b.Registry, "-platforms", b.Platforms}
}

// Release releases version in the copy like `make release`: build, push
// operator and bundle, record the release in catalog/, rebuild, push the
// catalog (which lists every recorded release). The record is committed,
// so later builds include the version in their catalog.
func (b *Builder) Release(ctx context.Context, version string) (*Images, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.prepare(ctx); err != nil {
		return nil, err
	}
	if err := b.setVersion(ctx, version); err != nil {
		return nil, err
	}
	if _, err := b.run(ctx, b.PushEnv, append([]string{"release"}, b.buildFlags(version)...)...); err != nil {
		return nil, err
	}
	if err := b.commit(ctx, "release "+version); err != nil {
		return nil, err
	}
	return readDigests(b.OutDir(version), version)
}

// BuildAndPush builds version (its catalog: every recorded release plus
// this build's bundle) and pushes the three images.
func (b *Builder) BuildAndPush(ctx context.Context, version string) (*Images, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.prepare(ctx); err != nil {
		return nil, err
	}
	if err := b.setVersion(ctx, version); err != nil {
		return nil, err
	}
	if _, err := b.run(ctx, nil, append([]string{"build"}, b.buildFlags(version)...)...); err != nil {
		return nil, err
	}
	if _, err := b.run(ctx, b.PushEnv, "push", "-root", b.src, "-out", b.OutDir(version)); err != nil {
		return nil, err
	}
	return readDigests(b.OutDir(version), version)
}

// Warm builds isctl and the operator at version without pushing (into a
// scratch output, under a placeholder registry: the operator binary does not
// depend on it), so that a later Release or BuildAndPush of that version
// finds every package compiled. Meant to run while the cluster's binaries
// build, on a first run.
func (b *Builder) Warm(ctx context.Context, version string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.prepare(ctx); err != nil {
		return err
	}
	if err := b.setVersion(ctx, version); err != nil {
		return err
	}
	out := filepath.Join(b.Dir, "warm")
	defer os.RemoveAll(out)
	_, err := b.run(ctx, nil, "build", "-root", b.src, "-out", out, "-registry", "127.0.0.1:1/warm", "-platforms", b.Platforms)
	return err
}

// readDigests parses <out>/images/digests.txt ("<name> <repo>@sha256:...").
func readDigests(out, version string) (*Images, error) {
	f, err := os.Open(filepath.Join(out, "images", "digests.txt"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	im := &Images{Version: version}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			continue
		}
		switch fields[0] {
		case "operator":
			im.Operator = fields[1]
		case "bundle":
			im.Bundle = fields[1]
		case "catalog":
			im.Catalog = fields[1]
		}
	}
	if im.Operator == "" || im.Bundle == "" || im.Catalog == "" {
		return nil, fmt.Errorf("%s/images/digests.txt lacks an image: %+v", out, im)
	}
	return im, sc.Err()
}
