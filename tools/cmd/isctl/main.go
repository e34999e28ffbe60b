// Command isctl builds, pushes, releases and verifies the operator, bundle
// and catalog images without Docker. It is the build of record of the
// repository (see tools/README.md); `make images`, `make push`,
// `make release` and `make bench-images` run it.
//
//	isctl build   [flags]   build out/images/{operator,bundle,catalog} and out/images/digests.txt
//	isctl push    [flags]   push the built images (operator, bundle, then catalog)
//	isctl release [flags]   build, push, record the release in catalog/, push the catalog
//	isctl verify  [flags]   rebuild recorded releases from their commit and compare digests;
//	                        with -catalog and -key, verify a published catalog image by image
//	isctl bench   [flags]   time a cold and a no-op build from a clean clone; report sizes
//	isctl keygen  [flags]   write a cosign key pair for signing (as cosign generate-key-pair)
//	isctl migrate [flags] <name>  move a ModelOrchestra onto an InferenceStack, keeping its pods
//	isctl bazel-compile [flags] inputs...   one `go build` of the operator (a Bazel action)
//	isctl bazel-image   [flags] inputs...   one image from compiled binaries (a Bazel action)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/sirupsen/logrus"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/e2e/bench/imagebench"
	"github.com/titanml/inference-stack-operator/internal/attest/signing"
	"github.com/titanml/inference-stack-operator/internal/build"
	"github.com/titanml/inference-stack-operator/internal/build/gobuild"
	"github.com/titanml/inference-stack-operator/internal/catalog"
	"github.com/titanml/inference-stack-operator/internal/push"
	"github.com/titanml/inference-stack-operator/internal/release"
)

const usage = `usage: isctl <command> [flags]

commands:
  build     build the operator, bundle and catalog images into out/images
  push      push the built images to their registry
  release   build, push, record the release in catalog/ and push the catalog
  verify    rebuild recorded releases from their commits and compare digests;
            with -catalog REF -key cosign.pub: verify a published catalog, one
            line per image (rebuild, SBOM, provenance, signature)
  bench     measure a cold and a no-op build from a clean clone
  keygen    write a cosign key pair (cosign.key, cosign.pub) for push -sign-key
  migrate   move a ModelOrchestra (the Model Orchestra operator's resource)
            onto an InferenceStack, keeping its Helm release and its pods
  bazel-compile  compile the operator for one platform, as build does
                 (an action of the Bazel build)
  bazel-image    write one of the three images from compiled binaries, as
                 build does (an action of the Bazel build)

Run "isctl <command> -h" for the flags of a command.
`

func main() {
	logrus.SetLevel(logrus.WarnLevel)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "isctl:", err)
		os.Exit(1)
	}
}

// A command is one subcommand of isctl. flags declares the command's flags
// on its flag set and returns what runs once they are parsed, with the
// arguments left after them.
type command struct {
	name  string
	flags func(fs *flag.FlagSet) action
	// usage, when set, is printed before the flags on -h, to stdout, and
	// -h is then no error; without it the flag package's defaults hold.
	usage string
}

type action func(ctx context.Context, args []string, stdout io.Writer) error

// commands are isctl's subcommands, in the order of usage.
var commands = []command{
	{name: "build", flags: cmdBuild},
	{name: "push", flags: cmdPush},
	{name: "release", flags: cmdRelease},
	{name: "verify", flags: cmdVerify},
	{name: "bench", flags: cmdBench},
	{name: "keygen", flags: cmdKeygen},
	{name: "migrate", flags: cmdMigrate, usage: migrateUsage},
	{name: "bazel-compile", flags: cmdBazelCompile},
	{name: "bazel-image", flags: cmdBazelImage},
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return nil
	}
	name, args := args[0], args[1:]
	for _, c := range commands {
		if c.name == name {
			return c.run(ctx, args, stdout)
		}
	}
	return fmt.Errorf("unknown command %q\n%s", name, usage)
}

// run parses the command's flags from args and runs it.
func (c command) run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("isctl "+c.name, flag.ContinueOnError)
	if c.usage != "" {
		fs.SetOutput(stdout)
		fs.Usage = func() {
			fmt.Fprint(fs.Output(), c.usage)
			fs.PrintDefaults()
		}
	}
	act := c.flags(fs)
	if err := fs.Parse(args); err != nil {
		if c.usage != "" && errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	return act(ctx, fs.Args(), stdout)
}

type buildFlags struct {
	root, out, registry, opRepo, bundleRepo, catRepo, version, channels, revision, platforms, catalog string
}

func (b *buildFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&b.root, "root", "", "repository root (default: the directory holding go.mod, found upwards from the working directory)")
	fs.StringVar(&b.out, "out", "", "output directory (default <root>/out)")
	fs.StringVar(&b.registry, "registry", envOr("REGISTRY", build.DefaultRegistry), "registry and namespace of the three repositories (<registry>/operator, /operator-bundle, /operator-catalog); $REGISTRY")
	fs.StringVar(&b.opRepo, "operator-repo", "", "operator repository (overrides -registry)")
	fs.StringVar(&b.bundleRepo, "bundle-repo", "", "bundle repository (overrides -registry)")
	fs.StringVar(&b.catRepo, "catalog-repo", "", "catalog repository (overrides -registry)")
	fs.StringVar(&b.version, "version", "", "version to build (default: the VERSION file)")
	fs.StringVar(&b.channels, "channels", strings.Join(inferencestack.DefaultArchetypes(), ","), "channel archetypes an unreleased bundle joins (candidate, fast, stable)")
	fs.StringVar(&b.revision, "revision", "", "source revision to stamp (default: git HEAD, with -dirty for a modified tree)")
	fs.StringVar(&b.platforms, "platforms", "linux/amd64,linux/arm64", "platforms of the operator image")
	fs.StringVar(&b.catalog, "catalog", "full", "catalog content: full (template + released bundles + this bundle) or current (only this bundle, for development clusters)")
}

func (b *buildFlags) config(log io.Writer) (build.Config, error) {
	root, err := orFindRoot(b.root)
	if err != nil {
		return build.Config{}, err
	}
	root, err = filepath.Abs(root)
	if err != nil {
		return build.Config{}, fmt.Errorf("-root: %w", err)
	}
	repos := build.ReposFor(b.registry)
	if b.opRepo != "" {
		repos.Operator = b.opRepo
	}
	if b.bundleRepo != "" {
		repos.Bundle = b.bundleRepo
	}
	if b.catRepo != "" {
		repos.Catalog = b.catRepo
	}
	arch, err := catalog.ParseArchetypes(b.channels)
	if err != nil {
		return build.Config{}, err
	}
	plats, err := gobuild.ParseTargets(b.platforms)
	if err != nil {
		return build.Config{}, err
	}
	if b.catalog != "full" && b.catalog != "current" {
		return build.Config{}, fmt.Errorf("-catalog must be full or current, not %q", b.catalog)
	}
	out := b.out
	if out == "" {
		out = filepath.Join(root, "out")
	}
	if out, err = filepath.Abs(out); err != nil {
		return build.Config{}, fmt.Errorf("-out: %w", err)
	}
	return build.Config{
		Root: root, Out: out, Repos: repos, Version: b.version, Archetypes: arch,
		Revision: b.revision, Platforms: plats, CurrentOnly: b.catalog == "current", Log: log,
		Binaries: goBuild(),
	}, nil
}

// goBuild compiles the images' programs from source (catalogPackages).
func goBuild() *build.GoBuild {
	return &build.GoBuild{OPMPackage: catalogPackages.opm, HealthProbePackage: catalogPackages.healthProbe}
}

// catalogPackages are the main packages of the catalog image's programs;
// empty means build's (tests point them at stand-ins, which compile
// in a second where opm takes minutes).
var catalogPackages struct{ opm, healthProbe string }

type pushFlags struct {
	insecure bool
	attempts int
	jobs     int
	signKey  string
}

func (p *pushFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&p.insecure, "insecure", false, "allow plain HTTP to the registry (loopback and private addresses always use it)")
	fs.IntVar(&p.attempts, "attempts", 5, "attempts per image push (with exponential backoff)")
	fs.IntVar(&p.jobs, "jobs", 4, "concurrent blob uploads")
	fs.StringVar(&p.signKey, "sign-key", envOr("SIGN_KEY", ""), "cosign private key (cosign generate-key-pair) to sign every image and attest its SBOM and provenance; its password is read from $"+signing.PasswordEnv+"; without a key nothing is signed; $SIGN_KEY")
}

func (p *pushFlags) options(log io.Writer) (push.Options, error) {
	o := push.Options{Insecure: p.insecure, Attempts: p.attempts, Jobs: p.jobs, Log: log}
	if p.signKey != "" {
		s, err := signing.LoadSigner(p.signKey, []byte(os.Getenv(signing.PasswordEnv)))
		if err != nil {
			return o, err
		}
		o.Signer = s
	}
	return o, nil
}

func cmdBuild(fs *flag.FlagSet) action {
	var bf buildFlags
	bf.register(fs)
	return func(ctx context.Context, _ []string, stdout io.Writer) error {
		cfg, err := bf.config(stdout)
		if err != nil {
			return err
		}
		res, err := build.Build(ctx, cfg)
		if err != nil {
			return err
		}
		printResult(stdout, res)
		return nil
	}
}

func cmdPush(fs *flag.FlagSet) action {
	var root, out string
	var pf pushFlags
	fs.StringVar(&root, "root", "", rootHelp)
	fs.StringVar(&out, "out", "", "build output directory (default <root>/out)")
	pf.register(fs)
	return func(ctx context.Context, _ []string, stdout io.Writer) error {
		if out == "" {
			root, err := orFindRoot(root)
			if err != nil {
				return err
			}
			out = filepath.Join(root, "out")
		}
		po, err := pf.options(stdout)
		if err != nil {
			return err
		}
		refs, err := push.Outputs(ctx, out, build.Names, po)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, "pushed:")
		for _, r := range refs {
			fmt.Fprintf(stdout, "  %s\n", r)
		}
		return nil
	}
}

func cmdRelease(fs *flag.FlagSet) action {
	var bf buildFlags
	var pf pushFlags
	bf.register(fs)
	pf.register(fs)
	return func(ctx context.Context, _ []string, stdout io.Writer) error {
		cfg, err := bf.config(stdout)
		if err != nil {
			return err
		}
		po, err := pf.options(stdout)
		if err != nil {
			return err
		}
		res, err := release.Run(ctx, cfg, po)
		if err != nil {
			return err
		}
		printResult(stdout, res)
		return nil
	}
}

func cmdVerify(fs *flag.FlagSet) action {
	var root, versions, catalogRef, key, workDir string
	var insecure, verbose bool
	fs.StringVar(&root, "root", "", rootHelp)
	fs.StringVar(&versions, "versions", "", "comma-separated versions to verify (default: all recorded); without -catalog")
	fs.StringVar(&catalogRef, "catalog", "", "a published catalog image (tag or digest): verify every bundle it pins and every operator those pin (rebuild from the recorded commit, SBOM, provenance, signature)")
	fs.StringVar(&key, "key", envOr("VERIFY_KEY", ""), "with -catalog: the public key (cosign.pub) the images must be signed with; $VERIFY_KEY")
	fs.StringVar(&workDir, "work-dir", "", "keep the rebuilt trees here (default: a temporary directory); a rebuild of the same revision found there is reused")
	fs.BoolVar(&insecure, "insecure", false, "allow plain HTTP to the registry (loopback and private addresses always use it)")
	fs.BoolVar(&verbose, "v", false, "show the rebuilds' progress")
	return func(ctx context.Context, _ []string, stdout io.Writer) error {
		root, err := orFindRoot(root)
		if err != nil {
			return err
		}
		if catalogRef != "" {
			if key == "" {
				return errors.New("verify -catalog needs -key, the public key the images are signed with")
			}
			v, err := signing.LoadVerifier(key)
			if err != nil {
				return err
			}
			o := release.CatalogOptions{Catalog: catalogRef, Key: v, Registry: push.Options{Insecure: insecure}, WorkDir: workDir, Out: stdout}
			if verbose {
				o.Log = stdout
			}
			if _, err := release.VerifyCatalog(ctx, root, o); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s verified: every image reproduces from its recorded commit, carries that SBOM and provenance, and is signed by %s\n", catalogRef, key)
			return nil
		}
		var vs []string
		for _, v := range strings.Split(versions, ",") {
			if v = strings.TrimSpace(v); v != "" {
				vs = append(vs, v)
			}
		}
		results, err := release.Verify(ctx, root, release.VerifyOptions{Versions: vs, WorkDir: workDir, Log: stdout})
		if err != nil {
			return err
		}
		if len(results) == 0 {
			fmt.Fprintf(stdout, "no released versions recorded in %s\n", catalog.ReleasedDir)
			return nil
		}
		failed := false
		for _, r := range results {
			status := "reproduced"
			if !r.OK() {
				status, failed = "DIFFERS", true
			}
			fmt.Fprintf(stdout, "%s (%s): %s\n  operator recorded %s\n           rebuilt  %s\n  bundle   recorded %s\n           rebuilt  %s\n",
				r.Version, r.Revision, status, r.Operator.Recorded, r.Operator.Rebuilt, r.Bundle.Recorded, r.Bundle.Rebuilt)
		}
		if failed {
			return errors.New("some recorded releases do not reproduce")
		}
		return nil
	}
}

func cmdBench(fs *flag.FlagSet) action {
	var root, report string
	var coldCache bool
	fs.StringVar(&root, "root", "", rootHelp)
	fs.StringVar(&report, "report", "", "write the report (markdown) here too (default <root>/out/bench/images.md)")
	fs.BoolVar(&coldCache, "cold-go-cache", false, "use an empty Go build cache for the cold build (compiles every dependency)")
	return func(ctx context.Context, _ []string, stdout io.Writer) error {
		root, err := orFindRoot(root)
		if err != nil {
			return err
		}
		if report == "" {
			report = filepath.Join(root, "out", "bench", "images.md")
		}
		rep, err := imagebench.Run(ctx, imagebench.Options{Root: root, ColdGoCache: coldCache, Log: stdout})
		if err != nil {
			return err
		}
		md := rep.Markdown()
		fmt.Fprint(stdout, "\n"+md)
		if err := os.MkdirAll(filepath.Dir(report), 0o755); err != nil {
			return fmt.Errorf("writing the report: %w", err)
		}
		return os.WriteFile(report, []byte(md), 0o644)
	}
}

func cmdKeygen(fs *flag.FlagSet) action {
	var dir string
	fs.StringVar(&dir, "out", ".", "directory to write cosign.key and cosign.pub into (neither may exist)")
	return func(_ context.Context, _ []string, stdout io.Writer) error {
		priv, pub, err := signing.GenerateKeyPair(dir, []byte(os.Getenv(signing.PasswordEnv)))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s (encrypted with $%s; keep it secret) and %s (give it to whoever verifies)\n", priv, signing.PasswordEnv, pub)
		return nil
	}
}

func printResult(w io.Writer, res *build.Result) {
	fmt.Fprintf(w, "\n%s (revision %s, SOURCE_DATE_EPOCH=%d, %s)\n", res.Version, res.Revision, res.SourceDateEpoch, res.GoVersion)
	for _, img := range res.Images {
		var sizes []string
		for _, s := range img.Sizes {
			sizes = append(sizes, fmt.Sprintf("%s %s", s.Platform, imagebench.HumanSize(s.Bytes)))
		}
		fmt.Fprintf(w, "  %-8s %s  [%s]\n", img.Name, img.Ref, strings.Join(sizes, ", "))
		for _, a := range img.Artifacts {
			fmt.Fprintf(w, "           + %-30s %9s  %s\n", a.ArtifactType, imagebench.HumanSize(a.Size), a.Digest)
		}
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// rootHelp is the help of the -root flag of push, verify and bench.
const rootHelp = "repository root (default: found from the working directory)"

// orFindRoot is root, or if that is empty the repository root found from
// the working directory.
func orFindRoot(root string) (string, error) {
	if root != "" {
		return root, nil
	}
	return findRoot()
}

// findRoot walks up from the working directory to the go.mod of the
// repository's module.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(data), "module "+inferencestack.ModulePath+"\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("cannot find the repository root (go.mod of %s) above the working directory; pass -root", inferencestack.ModulePath)
		}
		dir = parent
	}
}
