package localcluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/e2e/harness/testinputs"
)

// Pinned versions of the test binaries. They must match the wrapper modules
// in e2e/binaries (the wrappers' go.mod is the source of truth for what is
// compiled) and binaries.json (cache entry names and version ldflags; a test
// checks they agree).
const (
	KubernetesVersion = "v1.34.4"
	EtcdVersion       = "v3.6.8"
	KwokVersion       = "v0.8.0"
)

// Binaries holds absolute paths of the built binaries.
type Binaries struct {
	KubeApiserver         string
	KubeControllerManager string
	KubeScheduler         string
	Kubectl               string
	Etcd                  string
	Kwok                  string
	Kwokctl               string
	// Kubelet and KubeProxy are set only for a cluster with a real node
	// (EnsureNodeBinaries).
	Kubelet   string `json:",omitempty"`
	KubeProxy string `json:",omitempty"`
}

// all returns every path, resolved through symlinks (as /proc/<pid>/exe
// shows them).
func (b Binaries) all() []string {
	var out []string
	for _, p := range []string{b.KubeApiserver, b.KubeControllerManager, b.KubeScheduler, b.Kubectl, b.Etcd, b.Kwok, b.Kwokctl, b.Kubelet, b.KubeProxy} {
		if p == "" {
			continue
		}
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		out = append(out, p)
	}
	return out
}

// CachedBuild describes Go binaries built from one module directory and
// cached on disk under a key made of Name, Version and a hash of everything
// that changes the output (go.mod, go.sum, packages, flags, target
// platform). Concurrent callers, in this process or in other processes (e.g.
// several test packages started by `go test ./...`), build each entry once:
// the build holds an exclusive flock and publishes its outputs with an atomic
// directory rename.
type CachedBuild struct {
	Name      string   // cache entry name, e.g. "kubernetes"
	Version   string   // human-readable version, part of the cache path
	ModuleDir string   // directory holding the go.mod to build with
	Packages  []string // import paths (or ./relative paths) to build
	// Outputs are the binary names the build produces, in Packages order.
	// With one package the binary is written under this name; with several,
	// `go build -o dir/` names each binary after its package's last element.
	Outputs []string
	Tags    []string
	LDFlags string
	// Estimate is shown in the progress message of a cold build.
	Estimate string
}

// Ensure returns the directory holding b.Outputs, building them first if the
// cache does not have them yet. Progress goes to log (may be nil).
func (b CachedBuild) Ensure(ctx context.Context, log io.Writer) (string, error) {
	if log == nil {
		log = io.Discard
	}
	if len(b.Outputs) == 0 || len(b.Packages) == 0 {
		return "", fmt.Errorf("build %s: no packages or outputs", b.Name)
	}
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	binDir := filepath.Join(cache, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", fmt.Errorf("creating binary cache %s: %w", binDir, err)
	}
	key, err := b.key()
	if err != nil {
		return "", err
	}
	final := filepath.Join(binDir, b.Name+"-"+b.Version+"-"+key)
	if b.complete(final) {
		return final, nil
	}

	unlock, err := lockFile(ctx, final+".lock", func() {
		fmt.Fprintf(log, "waiting for another process building %s %s…\n", b.Name, b.Version)
	})
	if err != nil {
		return "", fmt.Errorf("locking cache entry %s: %w", final, err)
	}
	defer unlock()
	// Another process may have finished the build while we waited.
	if b.complete(final) {
		return final, nil
	}

	tmp, err := os.MkdirTemp(binDir, ".tmp-"+b.Name+"-")
	if err != nil {
		return "", fmt.Errorf("creating temp build dir: %w", err)
	}
	defer os.RemoveAll(tmp)

	estimate := ""
	if b.Estimate != "" {
		estimate = ", ~" + b.Estimate
	}
	fmt.Fprintf(log, "building %s %s (first run only%s)…\n", strings.Join(b.Outputs, ", "), b.Version, estimate)
	start := time.Now()
	if err := b.run(ctx, tmp); err != nil {
		return "", err
	}
	for _, o := range b.Outputs {
		if _, err := os.Stat(filepath.Join(tmp, o)); err != nil {
			return "", fmt.Errorf("build %s: expected output %s: %w", b.Name, o, err)
		}
	}
	// A stale, incomplete entry (e.g. files deleted by hand) would make the
	// rename fail; it is not in use by anyone who checked complete().
	if err := os.RemoveAll(final); err != nil {
		return "", fmt.Errorf("removing incomplete cache entry %s: %w", final, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("publishing %s: %w", final, err)
	}
	fmt.Fprintf(log, "built %s %s in %s → %s\n", b.Name, b.Version, time.Since(start).Round(time.Second), final)
	return final, nil
}

func (b CachedBuild) complete(dir string) bool {
	for _, o := range b.Outputs {
		fi, err := os.Stat(filepath.Join(dir, o))
		if err != nil || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

func (b CachedBuild) args(outDir string) []string {
	args := []string{"build", "-mod=readonly", "-trimpath"}
	if len(b.Tags) > 0 {
		args = append(args, "-tags", strings.Join(b.Tags, ","))
	}
	if b.LDFlags != "" {
		args = append(args, "-ldflags", b.LDFlags)
	}
	if len(b.Packages) == 1 {
		args = append(args, "-o", filepath.Join(outDir, b.Outputs[0]))
	} else {
		// One invocation for several commands shares the compile work of
		// their common dependencies.
		args = append(args, "-o", outDir+string(filepath.Separator))
	}
	return append(args, b.Packages...)
}

// key hashes everything that determines the build output besides the
// compiler, so editing a wrapper module invalidates its cache entry while a
// Go patch release does not force a multi-minute rebuild.
func (b CachedBuild) key() (string, error) {
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(b.ModuleDir, f))
		if err != nil {
			return "", fmt.Errorf("build %s: reading %s: %w", b.Name, f, err)
		}
		fmt.Fprintf(h, "%s %d\n", f, len(data))
		h.Write(data)
	}
	fmt.Fprintf(h, "%s/%s\n%q\n", runtime.GOOS, runtime.GOARCH, b.args("OUT"))
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

func (b CachedBuild) run(ctx context.Context, outDir string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("build %s: the go command is needed to build test binaries: %w", b.Name, err)
	}
	cmd := exec.CommandContext(ctx, goBin, b.args(outDir)...)
	cmd.Dir = b.ModuleDir
	cmd.Env = append(os.Environ(),
		"CGO_ENABLED=0",
		// Replace (not extend) the caller's GOFLAGS: e.g. -mod=vendor from
		// the environment would break the wrapper build.
		"GOFLAGS=-buildvcs=false",
		// A go.work at the repository root must not pull the wrapper into
		// the product's module graph.
		"GOWORK=off",
		// The binaries run on this machine whatever the test was
		// cross-configured for.
		"GOOS="+runtime.GOOS,
		"GOARCH="+runtime.GOARCH,
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build %s %s (go %s in %s): %w\n%s", b.Name, b.Version,
			strings.Join(cmd.Args[1:], " "), b.ModuleDir, err, out.String())
	}
	return nil
}

// lockFile takes an exclusive flock on path, polling so that ctx can cancel
// the wait. waiting is called once if the lock is held by someone else.
func lockFile(ctx context.Context, path string, waiting func()) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("flock %s: %w", path, err)
		}
		if !told && waiting != nil {
			waiting()
			told = true
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for lock %s: %w", path, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// CacheDir is the root of this project's on-disk cache:
// $INFERENCE_STACK_CACHE if set, else <user cache dir>/inference-stack-operator.
// Binaries live under its bin/ subdirectory.
func CacheDir() (string, error) {
	if d := os.Getenv("INFERENCE_STACK_CACHE"); d != "" {
		return filepath.Abs(d)
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the user cache dir (set INFERENCE_STACK_CACHE): %w", err)
	}
	return filepath.Join(d, "inference-stack-operator"), nil
}

// RepoRoot finds the repository root (the directory whose go.mod declares
// this project's module) by walking up from the working directory, which
// for `go test` is the package directory under test.
func RepoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("getwd: %w", err)
	}
	for dir := wd; ; {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && modulePath(data) == inferencestack.ModulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod for module %s in %s or any parent directory", inferencestack.ModulePath, wd)
		}
		dir = parent
	}
}

func modulePath(gomod []byte) string {
	for _, line := range strings.Split(string(gomod), "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "module"); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "\t")) {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// kubernetesLDFlags stamps the version that kwokctl reads with `--version`
// to choose component flags; the two packages back component-base's and
// client-go's version reporting respectively.
func kubernetesLDFlags() string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(KubernetesVersion, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	var flags []string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		flags = append(flags,
			"-X", pkg+".gitVersion="+KubernetesVersion,
			"-X", pkg+".gitMajor="+major,
			"-X", pkg+".gitMinor="+minor,
			"-X", pkg+".gitTreeState=clean",
		)
	}
	return strings.Join(flags, " ")
}

// The test binaries are described once, in binaries.json: the Go-native
// path below builds them into the binary cache from it, and under Bazel the
// go_fetch module extension (tools/bazel/go_fetch.bzl) reads the same file and
// runs the same `go build` at fetch time (see e2e/BUILD.bazel). A source is
// one module: a wrapper module under e2e/binaries (ModuleDir, relative to
// the repository root) or a downloaded module (Module@Version, checked
// against Sum); its builds share that module and, under Bazel, one
// repository named e2e_<source name>.
//
//go:embed binaries.json
var binariesJSON []byte

// BinarySource is one module the test binaries are built from.
type BinarySource struct {
	Name      string      `json:"name"`
	ModuleDir string      `json:"module_dir,omitempty"`
	Module    string      `json:"module,omitempty"`
	Version   string      `json:"version,omitempty"`
	Sum       string      `json:"sum,omitempty"`
	Files     []string    `json:"files,omitempty"`
	Builds    []BuildSpec `json:"builds"`
}

// BuildSpec is one `go build` of a source (see CachedBuild).
type BuildSpec struct {
	Name     string   `json:"name"`
	Version  string   `json:"version"`
	Packages []string `json:"packages"`
	Outputs  []string `json:"outputs"`
	Tags     []string `json:"tags,omitempty"`
	LDFlags  string   `json:"ldflags,omitempty"`
	Estimate string   `json:"estimate,omitempty"`
}

// Cached is the build of b in moduleDir, cached under CacheDir().
func (b BuildSpec) Cached(moduleDir string) CachedBuild {
	return CachedBuild{
		Name: b.Name, Version: b.Version, ModuleDir: moduleDir, Packages: b.Packages,
		Outputs: b.Outputs, Tags: b.Tags, LDFlags: b.LDFlags, Estimate: b.Estimate,
	}
}

// BinarySources returns the sources of binaries.json.
func BinarySources() ([]BinarySource, error) {
	var doc struct {
		Sources []BinarySource `json:"sources"`
	}
	dec := json.NewDecoder(bytes.NewReader(binariesJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("binaries.json: %w", err)
	}
	return doc.Sources, nil
}

// Source returns the source called name and, if build is not empty, its
// build called build.
func Source(name, build string) (BinarySource, BuildSpec, error) {
	srcs, err := BinarySources()
	if err != nil {
		return BinarySource{}, BuildSpec{}, err
	}
	for _, s := range srcs {
		if s.Name != name {
			continue
		}
		if build == "" {
			return s, BuildSpec{}, nil
		}
		for _, b := range s.Builds {
			if b.Name == build {
				return s, b, nil
			}
		}
		return BinarySource{}, BuildSpec{}, fmt.Errorf("binaries.json: source %s has no build %s", name, build)
	}
	return BinarySource{}, BuildSpec{}, fmt.Errorf("binaries.json: no source %s", name)
}

// wrapperBuild is the build called build of the wrapper-module source
// name, rooted at the repository root.
func wrapperBuild(root, name, build string) (CachedBuild, error) {
	s, b, err := Source(name, build)
	if err != nil {
		return CachedBuild{}, err
	}
	if s.ModuleDir == "" {
		return CachedBuild{}, fmt.Errorf("binaries.json: source %s is not a wrapper module", name)
	}
	return b.Cached(filepath.Join(root, filepath.FromSlash(s.ModuleDir))), nil
}

// builds returns the control plane's three wrapper-module builds, rooted
// at the repository.
func builds(root string) ([]CachedBuild, error) {
	var out []CachedBuild
	for _, n := range []string{"kubernetes", "etcd", "kwok"} {
		b, err := wrapperBuild(root, n, n)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// EnsureOutputs returns the paths of the outputs of the build called build
// of the wrapper-module source called source in binaries.json, in the
// build's Outputs order, building them into the binary cache the first
// time on a machine. Under Bazel they are runfiles (testinputs.Binaries,
// from the go_fetch repository e2e_<source>), found by file name, and
// nothing is built.
func EnsureOutputs(ctx context.Context, source, build string, log io.Writer) ([]string, error) {
	_, spec, err := Source(source, build)
	if err != nil {
		return nil, err
	}
	if found, ok, err := testinputs.Executables(testinputs.Binaries); ok || err != nil {
		if err != nil {
			return nil, err
		}
		return testinputs.Pick(testinputs.Binaries, found, spec.Outputs...)
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	b, err := wrapperBuild(root, source, build)
	if err != nil {
		return nil, err
	}
	dir, err := b.Ensure(ctx, log)
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(b.Outputs))
	for i, o := range b.Outputs {
		paths[i] = filepath.Join(dir, o)
	}
	return paths, nil
}

// EnsureNodeBinaries returns the paths of the kubelet and kube-proxy: the
// real node's, from the same wrapper module (and so the same pinned
// Kubernetes) as the control plane, a separate cache entry, so clusters
// without a real node never build them. See EnsureOutputs.
func EnsureNodeBinaries(ctx context.Context, log io.Writer) (kubelet, kubeProxy string, err error) {
	p, err := EnsureOutputs(ctx, "kubernetes", "kubernetes-node", log)
	if err != nil {
		return "", "", err
	}
	if len(p) != 2 {
		return "", "", fmt.Errorf("binaries.json: the kubernetes-node build has %d outputs, want kubelet and kube-proxy", len(p))
	}
	return p[0], p[1], nil
}

// controlPlane are the binaries every cluster runs.
var controlPlane = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "etcd", "kwok", "kwokctl"}

// EnsureBinaries returns the cluster's binaries, building any that are not
// cached yet (about 6 minutes on 2 cores the first time on a machine, then
// instant). Progress goes to log (may be nil). Under Bazel they are
// runfiles (testinputs.Binaries) and nothing is built.
func EnsureBinaries(ctx context.Context, log io.Writer) (*Binaries, error) {
	var paths []string
	if found, ok, err := testinputs.Executables(testinputs.Binaries); ok || err != nil {
		if err != nil {
			return nil, err
		}
		if paths, err = testinputs.Pick(testinputs.Binaries, found, controlPlane...); err != nil {
			return nil, err
		}
	} else {
		root, err := RepoRoot()
		if err != nil {
			return nil, err
		}
		bs, err := builds(root)
		if err != nil {
			return nil, err
		}
		// Sequential on purpose: each build already uses every core.
		dirs := map[string]string{}
		for _, b := range bs {
			dir, err := b.Ensure(ctx, log)
			if err != nil {
				return nil, err
			}
			for _, o := range b.Outputs {
				dirs[o] = dir
			}
		}
		for _, name := range controlPlane {
			paths = append(paths, filepath.Join(dirs[name], name))
		}
	}
	return &Binaries{
		KubeApiserver:         paths[0],
		KubeControllerManager: paths[1],
		KubeScheduler:         paths[2],
		Kubectl:               paths[3],
		Etcd:                  paths[4],
		Kwok:                  paths[5],
		Kwokctl:               paths[6],
	}, nil
}
