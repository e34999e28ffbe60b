package main

// The `bazel-compile` and `bazel-image` commands are the steps of
// `isctl build` as Bazel actions (operator/BUILD.bazel, bundle/BUILD.bazel,
// catalog/BUILD.bazel): one `go build` per platform of the operator, and
// of the catalog image's opm and health probe (-program), then one image's
// builder of internal/build (with the builders of the images it pins)
// over the compiled binaries (build.Prebuilt), published as an OCI layout
// (build.Layout). They resolve
// the version, revision and image time as `isctl build` does
// (build.ResolveStamp: a released VERSION is rebuilt with what its
// record says), run `go build` with the same arguments (internal/build/gobuild)
// and assemble with the same code (build.Build), so that with the
// same Go (go.mod's toolchain line) and the same revision Bazel produces
// the digests of the Go-native build, which `isctl verify` checks.
//
// Both take the build inputs as arguments: files relative to the working
// directory (Bazel's execution root), copied into a scratch tree as
// regular files. Copies, because Bazel's sandbox presents inputs as
// symbolic links, which //go:embed refuses; and only those files, so the
// build sees exactly what the BUILD file declares.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/internal/build"
	"github.com/titanml/inference-stack-operator/internal/build/gobuild"
	"github.com/titanml/inference-stack-operator/internal/catalog"
)

// stampFlags are the version and revision flags of both steps.
type stampFlags struct {
	version, revision, statusFile string
}

func (s *stampFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.version, "version", "", "version to build (default: the VERSION file among the inputs)")
	fs.StringVar(&s.revision, "revision", "", "source revision to stamp (default: STABLE_GIT_COMMIT of -status-file, else \"unknown\")")
	fs.StringVar(&s.statusFile, "status-file", os.Getenv("BAZEL_STABLE_STATUS_FILE"),
		"Bazel's stable workspace status file, which run_binary passes as $BAZEL_STABLE_STATUS_FILE when stamping (--config=release)")
}

// resolveRevision is -revision, else STABLE_GIT_COMMIT of the status file
// (tools/bazelcheck/status.sh writes it as the Go-native build computes
// it), else "unknown" (what the Go-native build stamps outside git).
func (s *stampFlags) resolveRevision() (string, error) {
	if s.revision != "" {
		return s.revision, nil
	}
	if s.statusFile == "" {
		return "unknown", nil
	}
	data, err := os.ReadFile(s.statusFile)
	if err != nil {
		return "", fmt.Errorf("-status-file: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && k == "STABLE_GIT_COMMIT" && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v), nil
		}
	}
	return "unknown", nil
}

// inputTree copies files (relative to the working directory) into a new
// scratch directory, keeping their relative paths; the caller removes it.
func inputTree(files []string) (string, error) {
	if len(files) == 0 {
		return "", errors.New("no build inputs given (list them after the flags)")
	}
	dir, err := os.MkdirTemp("", "isctl-inputs-")
	if err != nil {
		return "", fmt.Errorf("creating the input tree: %w", err)
	}
	for _, f := range files {
		clean := path.Clean(filepath.ToSlash(f))
		if filepath.IsAbs(f) || clean == ".." || strings.HasPrefix(clean, "../") {
			os.RemoveAll(dir)
			return "", fmt.Errorf("build input %s: want a path relative to the working directory, inside it", f)
		}
		if err := copyRegular(f, filepath.Join(dir, filepath.FromSlash(clean))); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("build input %s: %w", f, err)
		}
	}
	return dir, nil
}

// copyRegular copies the file src (following symbolic links) to dst as a
// regular file, keeping the executable bit.
func copyRegular(src, dst string) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("not a regular file (%s)", st.Mode().Type())
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, data, st.Mode().Perm()|0o200)
}

// goProxyEnv is the environment of an offline `go build`: modules come
// only from the module proxy directory proxy (a GOPROXY=file:// tree that
// the operator_go_modules repository filled from go.sum at fetch time),
// checked against go.sum; caches live in scratch (removed afterwards; the
// module cache is writable so that it can be removed); the go command
// never switches toolchains or reads a user configuration.
func goProxyEnv(proxy, scratch string) []string {
	return []string{
		"GOPROXY=file://" + filepath.ToSlash(proxy),
		"GOSUMDB=off",
		"GONOSUMDB=", "GONOPROXY=", "GOPRIVATE=", "GOINSECURE=",
		"GOFLAGS=-mod=readonly -modcacherw",
		"GOMODCACHE=" + filepath.Join(scratch, "mod"),
		"GOCACHE=" + filepath.Join(scratch, "cache"),
		"GOPATH=" + filepath.Join(scratch, "gopath"),
		"GOTOOLCHAIN=local",
		"GOENV=off",
		"HOME=" + scratch,
	}
}

func cmdBazelCompile(fs *flag.FlagSet) action {
	var sf stampFlags
	sf.register(fs)
	platform := fs.String("platform", "", "GOOS/GOARCH to build for, e.g. linux/amd64 (required)")
	goCmd := fs.String("go", "", "the go command of the Go SDK to build with (required)")
	proxyRoot := fs.String("goproxy", "", "the ROOT file of the module proxy directory (required)")
	out := fs.String("out", "", "the binary to write (required)")
	pkg := fs.String("package", "./operator", "the operator's main package")
	program := fs.String("program", "operator", "what to compile: operator, or a program of the catalog image ("+strings.Join(build.CatalogPrograms, ", ")+")")
	replace := replaceFlags{}
	fs.Var(replace, "replace", "an input replaced by another file, as path=file (repeatable): a source change built without editing the source (the OLM scenario's next chart version)")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		for _, f := range []struct{ name, v string }{{"-platform", *platform}, {"-go", *goCmd}, {"-goproxy", *proxyRoot}, {"-out", *out}} {
			if f.v == "" {
				return fmt.Errorf("isctl bazel-compile: %s is required", f.name)
			}
		}
		targets, err := gobuild.ParseTargets(*platform)
		if err != nil || len(targets) != 1 {
			return fmt.Errorf("-platform %q: want one platform (%v)", *platform, err)
		}
		goAbs, err := filepath.Abs(*goCmd)
		if err != nil {
			return fmt.Errorf("-go: %w", err)
		}
		proxy, err := filepath.Abs(filepath.Dir(*proxyRoot))
		if err != nil {
			return fmt.Errorf("-goproxy: %w", err)
		}
		outAbs, err := filepath.Abs(*out)
		if err != nil {
			return fmt.Errorf("-out: %w", err)
		}
		revision, err := sf.resolveRevision()
		if err != nil {
			return err
		}
		tree, err := inputTree(args)
		if err != nil {
			return err
		}
		defer os.RemoveAll(tree)
		if err := replace.apply(tree); err != nil {
			return err
		}
		scratch, err := os.MkdirTemp("", "isctl-gobuild-")
		if err != nil {
			return fmt.Errorf("creating the Go caches: %w", err)
		}
		defer os.RemoveAll(scratch)
		if *program != "operator" {
			// opm or the health probe: no stamp of this repository's.
			src := goBuild()
			src.Env, src.Go = goProxyEnv(proxy, scratch), goAbs
			if err := build.CompileCatalogProgram(ctx, tree, src, *program, targets[0], outAbs); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s for %s\n", *program, targets[0])
			return nil
		}
		// The operator's stamp reads VERSION and the release records only.
		cfg := build.Config{Root: tree, Version: sf.version, Revision: revision, Images: []string{build.Operator}}
		in, err := build.LoadInputs(cfg)
		if err != nil {
			return err
		}
		st, err := build.ResolveStamp(ctx, cfg, in)
		if err != nil {
			return err
		}
		err = gobuild.Build(ctx, gobuild.Options{
			ModuleRoot: tree,
			Package:    *pkg,
			Output:     outAbs,
			Target:     targets[0],
			Stamp:      st.OperatorVars(),
			Env:        goProxyEnv(proxy, scratch),
			Go:         goAbs,
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s %s (revision %s) for %s\n", *pkg, st.Version, st.Revision, targets[0])
		return nil
	}
}

// replaceFlags collects -replace path=file flags.
type replaceFlags map[string]string

func (r replaceFlags) String() string { return fmt.Sprint(map[string]string(r)) }

func (r replaceFlags) Set(v string) error {
	dst, src, ok := strings.Cut(v, "=")
	if !ok || dst == "" || src == "" {
		return fmt.Errorf("%q: want path=file", v)
	}
	clean := path.Clean(filepath.ToSlash(dst))
	if filepath.IsAbs(dst) || clean == ".." || strings.HasPrefix(clean, "../") {
		return fmt.Errorf("%q: the path must be relative, inside the input tree", v)
	}
	r[clean] = src
	return nil
}

// apply copies each replacement over its input in tree; the input must be
// there (a replacement changes a file, it adds none).
func (r replaceFlags) apply(tree string) error {
	for dst, src := range r {
		target := filepath.Join(tree, filepath.FromSlash(dst))
		if _, err := os.Stat(target); err != nil {
			return fmt.Errorf("-replace %s: not a build input (%w)", dst, err)
		}
		if err := copyRegular(src, target); err != nil {
			return fmt.Errorf("-replace %s: %w", dst, err)
		}
	}
	return nil
}

// binaryFlags collects -binary os/arch=path flags.
type binaryFlags map[gobuild.Target]string

func (b binaryFlags) String() string { return fmt.Sprint(map[gobuild.Target]string(b)) }

func (b binaryFlags) Set(v string) error {
	plat, p, ok := strings.Cut(v, "=")
	if !ok || p == "" {
		return fmt.Errorf("%q: want os/arch=path", v)
	}
	ts, err := gobuild.ParseTargets(plat)
	if err != nil || len(ts) != 1 {
		return fmt.Errorf("%q: want one platform (%v)", plat, err)
	}
	if _, dup := b[ts[0]]; dup {
		return fmt.Errorf("two binaries for %s", ts[0])
	}
	b[ts[0]] = p
	return nil
}

func cmdBazelImage(fs *flag.FlagSet) action {
	var sf stampFlags
	sf.register(fs)
	bins := binaryFlags{}
	fs.Var(bins, "binary", "a compiled operator binary, as os/arch=path (repeat for each platform)")
	catalogBins := replaceFlags{}
	fs.Var(catalogBins, "catalog-binary", "a compiled program of the catalog image for its platform (the first), as name=path: "+strings.Join(build.CatalogPrograms, ", ")+" (required for the catalog)")
	image := fs.String("image", "", "the image to write: "+strings.Join(build.Names, ", ")+" (required)")
	out := fs.String("out", "", "the OCI image layout directory to write (required; empty or absent)")
	registry := fs.String("registry", build.DefaultRegistry, "registry and namespace of the three repositories")
	channels := fs.String("channels", strings.Join(inferencestack.DefaultArchetypes(), ","), "channel archetypes an unreleased bundle joins")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		known := false
		for _, n := range build.Names {
			known = known || *image == n
		}
		if !known || *out == "" || len(bins) == 0 {
			return fmt.Errorf("isctl bazel-image: -image (one of %s), -out and -binary are required", strings.Join(build.Names, ", "))
		}
		catalogAbs := map[string]string{}
		for n, p := range catalogBins {
			var err error
			if catalogAbs[n], err = filepath.Abs(p); err != nil {
				return fmt.Errorf("-catalog-binary %s: %w", n, err)
			}
		}
		arch, err := catalog.ParseArchetypes(*channels)
		if err != nil {
			return err
		}
		revision, err := sf.resolveRevision()
		if err != nil {
			return err
		}
		abs := binaryFlags{}
		for t, p := range bins {
			if abs[t], err = filepath.Abs(p); err != nil {
				return fmt.Errorf("-binary %s: %w", t, err)
			}
		}
		platforms := make([]gobuild.Target, 0, len(bins))
		for _, t := range build.DefaultPlatforms {
			if _, ok := bins[t]; ok {
				platforms = append(platforms, t)
			}
		}
		if len(platforms) != len(bins) {
			return fmt.Errorf("-binary: only %v are image platforms", build.DefaultPlatforms)
		}
		tree, err := inputTree(args)
		if err != nil {
			return err
		}
		defer os.RemoveAll(tree)
		work, err := os.MkdirTemp("", "isctl-image-")
		if err != nil {
			return fmt.Errorf("creating the build directory: %w", err)
		}
		defer os.RemoveAll(work)
		var log strings.Builder
		res, err := build.Build(ctx, build.Config{
			Root: tree, Out: work, Repos: build.ReposFor(*registry), Version: sf.version,
			Archetypes: arch, Revision: revision, Platforms: platforms, Images: []string{*image},
			Binaries: &build.Prebuilt{Operator: map[gobuild.Target]string(abs), Catalog: catalogAbs}, Log: &log,
		})
		if err != nil {
			return fmt.Errorf("%w\n%s", err, log.String())
		}
		ref := res.Image(*image).Ref
		if err := (build.Layout{Dir: *out}).Publish(ctx, *image, filepath.Join(work, "images", *image), ref); err != nil {
			return fmt.Errorf("-out: %w", err)
		}
		fmt.Fprintf(stdout, "%s %s\n", *image, ref)
		return nil
	}
}
