// Package imagebuild is the build graph of the three images: operator binary
// → operator image (multi-arch index) → bundle directory pinned to the
// operator digest → bundle image → catalog rendered from the template,
// released entries and the bundle (pinned by digest) → catalog image. Every
// step is a pure function of the source tree, VERSION, the revision and
// SOURCE_DATE_EPOCH.
//
// Outputs (under Config.Out, "out/" by default):
//
//	images/operator/, images/bundle/, images/catalog/   OCI image layouts
//	images/digests.txt                                   <name> <repository>@sha256:<digest>
//	bundle/                                              the bundle directory
//	catalog/configs/                                     the file-based catalog
//	build/<os>_<arch>/operator                           the operator binaries
//	cache/layers/                                        compressed layers by content (a cache)
//
// Inputs are validated before anything is compiled, and outputs are staged
// and moved into place only when every step succeeded, so a failed build
// leaves the previous outputs untouched.
package imagebuild

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/internal/bundlegen"
	"github.com/titanml/inference-stack-operator/internal/catalogrender"
	"github.com/titanml/inference-stack-operator/internal/gitrev"
	"github.com/titanml/inference-stack-operator/internal/gobuild"
	"github.com/titanml/inference-stack-operator/internal/imageref"
	"github.com/titanml/inference-stack-operator/internal/ociimage"
	"github.com/titanml/inference-stack-operator/internal/versionfile"
)

const (
	// SourceURL is recorded in the org.opencontainers.image.source label.
	SourceURL = "https://" + inferencestack.ModulePath
	// DefaultRegistry holds the seeds' repositories.
	DefaultRegistry = "docker.io/tytn"

	versionVar = inferencestack.ModulePath + "/operator/internal/version.Version"
	commitVar  = inferencestack.ModulePath + "/operator/internal/version.GitCommit"

	// NonRootID is the uid and gid the operator runs as.
	NonRootID = 65532

	// Names of the images in digests.txt and under images/.
	Operator = "operator"
	Bundle   = "bundle"
	Catalog  = "catalog"

	// CatalogConfigsLabel tells catalogd where the FBC is.
	CatalogConfigsLabel = "operators.operatorframework.io.index.configs.v1"
)

// Names lists the images in build and push order.
var Names = []string{Operator, Bundle, Catalog}

// DefaultPlatforms are the operator image's platforms.
var DefaultPlatforms = []gobuild.Target{{OS: "linux", Arch: "amd64"}, {OS: "linux", Arch: "arm64"}}

// Repos are the repositories of the three images.
type Repos struct {
	Operator, Bundle, Catalog string
}

// ReposFor returns the seeds' repository names under registry
// ("docker.io/tytn" gives docker.io/tytn/operator, .../operator-bundle,
// .../operator-catalog).
func ReposFor(registry string) Repos {
	r := strings.TrimSuffix(registry, "/")
	return Repos{Operator: r + "/operator", Bundle: r + "/operator-bundle", Catalog: r + "/operator-catalog"}
}

// Config configures a build.
type Config struct {
	// Root is the repository root (holding go.mod and VERSION).
	Root string
	// Out is the output directory; default Root/out.
	Out   string
	Repos Repos
	// Version overrides the VERSION file when set.
	Version string
	// Archetypes are the channel archetypes an unreleased bundle joins;
	// default stable and fast.
	Archetypes []string
	// Revision overrides the git revision when set.
	Revision string
	// SourceDateEpoch is the time recorded in images (seconds since the Unix
	// epoch); nil means the SOURCE_DATE_EPOCH environment variable, or 0.
	SourceDateEpoch *int64
	// Platforms of the operator image; default DefaultPlatforms.
	Platforms []gobuild.Target
	// OperatorPackage is the operator's main package; default "./operator".
	OperatorPackage string
	// GoEnv holds extra environment entries for `go build`.
	GoEnv []string
	// CurrentOnly builds a development catalog holding only the bundle
	// being built (e.g. for a test cluster without access to the registry
	// of released bundles). A release never uses it.
	CurrentOnly bool
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Image is one built image.
type Image struct {
	Name string
	Ref  imageref.Digest
	// Tag is the human tag pushed alongside the digest (the version).
	Tag   string
	Sizes []ociimage.PlatformSize
}

// Result describes a successful build.
type Result struct {
	Version         string
	Revision        string
	SourceDateEpoch int64
	GoVersion       string
	Images          []Image
	// CurrentEntry is the catalog entry of the bundle built.
	CurrentEntry catalogrender.Release
	// Released reports that VERSION was already released and the build
	// reproduced the recorded digests.
	Released bool
	Out      string
}

// Image returns the image called name.
func (r *Result) Image(name string) Image {
	for _, i := range r.Images {
		if i.Name == name {
			return i
		}
	}
	return Image{}
}

// Inputs are the validated inputs of a build.
type Inputs struct {
	Version  versionfile.Version
	Template []byte
	Released []catalogrender.Release
	Bundle   bundlegen.Inputs
	// Release is the record of Version when it is already released.
	Release *catalogrender.Release
}

// LoadInputs reads and validates everything a build reads from the source
// tree besides the Go code, without writing anything.
func LoadInputs(cfg Config) (*Inputs, error) {
	cfg = withDefaults(cfg)
	in := &Inputs{}
	var err error
	if cfg.Version != "" {
		in.Version, err = versionfile.Parse(cfg.Version)
	} else {
		in.Version, err = versionfile.Read(filepath.Join(cfg.Root, "VERSION"))
	}
	if err != nil {
		return nil, err
	}
	for _, repo := range []string{cfg.Repos.Operator, cfg.Repos.Bundle, cfg.Repos.Catalog} {
		if err := imageref.CheckRepository(repo); err != nil {
			return nil, err
		}
	}
	if in.Template, err = os.ReadFile(filepath.Join(cfg.Root, catalogrender.TemplatePath)); err != nil {
		return nil, fmt.Errorf("catalog template: %w", err)
	}
	if in.Released, err = catalogrender.LoadReleases(filepath.Join(cfg.Root, catalogrender.ReleasedDir)); err != nil {
		return nil, err
	}
	if _, err := catalogrender.Precheck(catalogrender.Inputs{Template: in.Template, Released: in.Released}); err != nil {
		return nil, err
	}
	if cfg.CurrentOnly {
		// A development catalog: the template's settings, none of its
		// bundles, no released entries.
		if in.Template, err = catalogrender.WithoutBundles(in.Template); err != nil {
			return nil, err
		}
		in.Released = nil
	}
	if rel, ok := catalogrender.Find(in.Released, in.Version.String()); ok {
		in.Release = &rel
		op, _ := imageref.ParseDigest(rel.OperatorImage)
		b, _ := imageref.ParseDigest(rel.BundleImage)
		if op.Repository != cfg.Repos.Operator || b.Repository != cfg.Repos.Bundle {
			return nil, fmt.Errorf("VERSION %s is released (%s) with operator %s and bundle %s; a build of it must use the same repositories (got %s and %s). Bump VERSION to build something new",
				in.Version, rel.File, op.Repository, b.Repository, cfg.Repos.Operator, cfg.Repos.Bundle)
		}
	}
	if in.Bundle, err = bundlegen.LoadInputs(cfg.Root); err != nil {
		return nil, err
	}
	// Generate once with a placeholder digest: bad bundle inputs (a
	// wildcard in the RBAC, a field the generator owns) stop the build
	// before anything is compiled.
	placeholder := cfg.Repos.Operator + "@sha256:" + strings.Repeat("0", 64)
	if _, err := bundlegen.Generate(in.Bundle, bundlegen.Options{Version: in.Version.Version, OperatorImage: placeholder}); err != nil {
		return nil, err
	}
	return in, nil
}

// Build runs the whole graph.
func Build(ctx context.Context, cfg Config) (*Result, error) {
	start := time.Now()
	cfg = withDefaults(cfg)
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", args...)
		}
	}

	in, err := LoadInputs(cfg)
	if err != nil {
		return nil, err
	}
	res := &Result{Version: in.Version.String(), Out: cfg.Out}
	switch {
	case in.Release != nil:
		// Rebuilding a released version: use what it was built with, so
		// that the digests reproduce.
		res.Revision, res.SourceDateEpoch = in.Release.Revision, in.Release.SourceDateEpoch
		res.Released = true
		if cfg.Platforms, err = gobuild.ParseTargets(strings.Join(in.Release.Platforms, ",")); err != nil {
			return nil, fmt.Errorf("%s: %w", in.Release.File, err)
		}
		logf("VERSION %s is released (%s): rebuilding it at revision %s to reproduce %s", res.Version, in.Release.File, short(res.Revision), in.Release.BundleImage)
	default:
		if res.Revision = cfg.Revision; res.Revision == "" {
			info, err := gitrev.Read(ctx, cfg.Root)
			if err != nil {
				return nil, err
			}
			res.Revision = info.Revision()
		}
		if res.SourceDateEpoch, err = sourceDateEpoch(cfg.SourceDateEpoch); err != nil {
			return nil, err
		}
	}
	if res.GoVersion, err = gobuild.GoVersion(ctx, cfg.Root); err != nil {
		return nil, err
	}
	if in.Release != nil && in.Release.GoVersion != res.GoVersion {
		logf("warning: %s was built with %s, this is %s: the operator digest will probably differ", res.Version, in.Release.GoVersion, res.GoVersion)
	}
	created := time.Unix(res.SourceDateEpoch, 0).UTC()
	logf("building %s (revision %s, %s, SOURCE_DATE_EPOCH=%d)", res.Version, short(res.Revision), res.GoVersion, res.SourceDateEpoch)
	if cfg.CurrentOnly {
		logf("  development catalog: only the bundle being built, no released bundles")
	}

	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	staging, err := os.MkdirTemp(cfg.Out, ".staging-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(staging)
	cache := ociimage.LayerCache{Dir: filepath.Join(cfg.Out, "cache", "layers")}
	labels := func(title string) map[string]string {
		return map[string]string{
			"org.opencontainers.image.title":    title,
			"org.opencontainers.image.version":  res.Version,
			"org.opencontainers.image.revision": res.Revision,
			"org.opencontainers.image.source":   SourceURL,
		}
	}

	// 1. Operator binaries and image.
	t := time.Now()
	bins, err := buildBinaries(ctx, cfg, res, filepath.Join(staging, "build"))
	if err != nil {
		return nil, err
	}
	logf("  compiled operator for %s (%s)", targets(cfg.Platforms), since(t))
	t = time.Now()
	opIdx, err := operatorIndex(cache, cfg.Platforms, bins, created, labels(inferencestack.PackageName))
	if err != nil {
		return nil, err
	}
	opRef, err := digestRef(cfg.Repos.Operator, opIdx)
	if err != nil {
		return nil, err
	}
	if err := ociimage.WriteLayout(filepath.Join(staging, "images", Operator), nil, opIdx, res.Version); err != nil {
		return nil, err
	}
	logf("  operator image %s (%s)", opRef, since(t))
	if in.Release != nil && in.Release.OperatorImage != opRef.String() {
		return nil, fmt.Errorf("VERSION %s is released (%s) with operator image %s, but this tree builds %s: the source changed since the release commit %s.\n"+
			"A released version is immutable: bump VERSION to build something new", res.Version, in.Release.File, in.Release.OperatorImage, opRef, short(in.Release.Revision))
	}

	// 2. Bundle directory and image.
	t = time.Now()
	b, err := bundlegen.Generate(in.Bundle, bundlegen.Options{Version: in.Version.Version, OperatorImage: opRef.String()})
	if err != nil {
		return nil, err
	}
	bundleDir := filepath.Join(staging, "bundle")
	if err := b.WriteDir(bundleDir); err != nil {
		return nil, err
	}
	if err := bundlegen.ValidateDir(bundleDir).Err(); err != nil {
		return nil, err
	}
	var entries []ociimage.Entry
	for _, p := range b.Paths() {
		entries = append(entries, ociimage.File(p, 0o644, b.Files[p]))
	}
	bundleLayer, err := cache.Layer(entries, created)
	if err != nil {
		return nil, err
	}
	bundleImg, err := ociimage.Image(ociimage.Config{
		Platform: v1.Platform{OS: "linux", Architecture: "amd64"},
		Created:  created,
		Labels:   ociimage.Labels(labels(inferencestack.PackageName+"-bundle"), bundlegen.Annotations(in.Version.Version)),
	}, []ociimage.LayerSpec{{Layer: bundleLayer, CreatedBy: "isctl: registry+v1 bundle " + bundlegen.CSVName(in.Version.Version)}})
	if err != nil {
		return nil, err
	}
	bundleRef, err := digestRef(cfg.Repos.Bundle, bundleImg)
	if err != nil {
		return nil, err
	}
	if err := ociimage.WriteLayout(filepath.Join(staging, "images", Bundle), bundleImg, nil, res.Version); err != nil {
		return nil, err
	}
	logf("  bundle image %s (%s)", bundleRef, since(t))

	// 3. Catalog.
	t = time.Now()
	cat, err := catalogrender.Render(ctx, catalogrender.Inputs{Template: in.Template, Released: in.Released}, catalogrender.Current{
		Dir: bundleDir, Image: bundleRef, Version: in.Version.Version, Archetypes: cfg.Archetypes,
	})
	if err != nil {
		return nil, err
	}
	res.CurrentEntry = catalogrender.Release{
		Version: res.Version, Revision: res.Revision, SourceDateEpoch: res.SourceDateEpoch, GoVersion: res.GoVersion,
		Platforms:     targetStrings(cfg.Platforms),
		OperatorImage: opRef.String(), BundleImage: bundleRef.String(), Bundle: cat.CurrentEntry,
	}
	fbcDir := filepath.Join(staging, "catalog", "configs")
	if err := os.MkdirAll(filepath.Join(fbcDir, inferencestack.PackageName), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(fbcDir, filepath.FromSlash(catalogrender.FBCPath)), cat.FBC, 0o644); err != nil {
		return nil, err
	}
	catLayer, err := cache.Layer([]ociimage.Entry{ociimage.File("configs/"+catalogrender.FBCPath, 0o644, cat.FBC)}, created)
	if err != nil {
		return nil, err
	}
	catImg, err := ociimage.Image(ociimage.Config{
		Platform: v1.Platform{OS: "linux", Architecture: "amd64"},
		Created:  created,
		Labels:   ociimage.Labels(labels(inferencestack.PackageName+"-catalog"), map[string]string{CatalogConfigsLabel: "/configs"}),
	}, []ociimage.LayerSpec{{Layer: catLayer, CreatedBy: "isctl: file-based catalog"}})
	if err != nil {
		return nil, err
	}
	catRef, err := digestRef(cfg.Repos.Catalog, catImg)
	if err != nil {
		return nil, err
	}
	if err := ociimage.WriteLayout(filepath.Join(staging, "images", Catalog), catImg, nil, res.Version); err != nil {
		return nil, err
	}
	logf("  catalog image %s (%s)", catRef, since(t))

	// 4. digests.txt, sizes, then move everything into place.
	refs := map[string]imageref.Digest{Operator: opRef, Bundle: bundleRef, Catalog: catRef}
	var lines strings.Builder
	for _, n := range Names {
		top, err := ociimage.ReadLayout(filepath.Join(staging, "images", n))
		if err != nil {
			return nil, err
		}
		sizes, err := top.Sizes()
		if err != nil {
			return nil, err
		}
		res.Images = append(res.Images, Image{Name: n, Ref: refs[n], Tag: res.Version, Sizes: sizes})
		fmt.Fprintf(&lines, "%s %s\n", n, refs[n])
	}
	if err := os.WriteFile(filepath.Join(staging, "images", "digests.txt"), []byte(lines.String()), 0o644); err != nil {
		return nil, err
	}
	for _, d := range []string{"images", "bundle", "catalog", "build"} {
		if err := replaceDir(filepath.Join(staging, d), filepath.Join(cfg.Out, d)); err != nil {
			return nil, err
		}
	}
	logf("done in %s; digests in %s", since(start), filepath.Join(cfg.Out, "images", "digests.txt"))
	return res, nil
}

func withDefaults(cfg Config) Config {
	if cfg.Out == "" {
		cfg.Out = filepath.Join(cfg.Root, "out")
	}
	if cfg.Repos == (Repos{}) {
		cfg.Repos = ReposFor(DefaultRegistry)
	}
	if len(cfg.Archetypes) == 0 {
		cfg.Archetypes = inferencestack.DefaultArchetypes()
	}
	if len(cfg.Platforms) == 0 {
		cfg.Platforms = DefaultPlatforms
	}
	if cfg.OperatorPackage == "" {
		cfg.OperatorPackage = "./operator"
	}
	return cfg
}

// sourceDateEpoch resolves the image time: explicit value, else
// $SOURCE_DATE_EPOCH, else 0.
func sourceDateEpoch(explicit *int64) (int64, error) {
	if explicit != nil {
		return *explicit, nil
	}
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return 0, nil
	}
	var n int64
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil || fmt.Sprint(n) != s || n < 0 {
		return 0, fmt.Errorf("invalid SOURCE_DATE_EPOCH %q: want a non-negative integer number of seconds", s)
	}
	return n, nil
}

func buildBinaries(ctx context.Context, cfg Config, res *Result, dir string) (map[gobuild.Target]string, error) {
	bins := map[gobuild.Target]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, len(cfg.Platforms))
	for i, p := range cfg.Platforms {
		out := filepath.Join(dir, p.OS+"_"+p.Arch, "operator")
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = gobuild.Build(ctx, gobuild.Options{
				ModuleRoot: cfg.Root,
				Package:    cfg.OperatorPackage,
				Output:     out,
				Target:     p,
				Stamp:      map[string]string{versionVar: res.Version, commitVar: res.Revision},
				Env:        cfg.GoEnv,
			})
			mu.Lock()
			bins[p] = out
			mu.Unlock()
		}()
	}
	wg.Wait()
	return bins, errors.Join(errs...)
}

// baseEntries is the operator image's filesystem besides the binary: a
// passwd and group file naming the non-root user, its home and /tmp.
func baseEntries() []ociimage.Entry {
	return []ociimage.Entry{
		ociimage.File("etc/passwd", 0o644, []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRootID, NonRootID))),
		ociimage.File("etc/group", 0o644, []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRootID))),
		ociimage.Dir("home/nonroot", 0o700, NonRootID, NonRootID),
		ociimage.Dir("tmp", 0o1777, 0, 0),
	}
}

func operatorIndex(cache ociimage.LayerCache, platforms []gobuild.Target, bins map[gobuild.Target]string, created time.Time, labels map[string]string) (v1.ImageIndex, error) {
	base, err := cache.Layer(baseEntries(), created)
	if err != nil {
		return nil, err
	}
	var imgs []v1.Image
	for _, p := range platforms {
		bin, err := cache.Layer([]ociimage.Entry{{Path: "operator", Mode: 0o755, Source: bins[p]}}, created)
		if err != nil {
			return nil, err
		}
		plat := v1.Platform{OS: p.OS, Architecture: p.Arch}
		if p.Arch == "arm64" {
			plat.Variant = "v8"
		}
		img, err := ociimage.Image(ociimage.Config{
			Platform:   plat,
			Created:    created,
			User:       fmt.Sprintf("%d:%d", NonRootID, NonRootID),
			Entrypoint: []string{"/operator"},
			Env:        []string{"HOME=/home/nonroot"},
			WorkingDir: "/",
			Labels:     labels,
		}, []ociimage.LayerSpec{
			{Layer: base, CreatedBy: "isctl: /etc/passwd, /etc/group, /home/nonroot, /tmp"},
			{Layer: bin, CreatedBy: "isctl: /operator (go build -trimpath, CGO_ENABLED=0)"},
		})
		if err != nil {
			return nil, err
		}
		imgs = append(imgs, img)
	}
	ann := map[string]string{}
	for _, k := range []string{"org.opencontainers.image.version", "org.opencontainers.image.revision", "org.opencontainers.image.source"} {
		ann[k] = labels[k]
	}
	return ociimage.Index(imgs, ann)
}

type digester interface{ Digest() (v1.Hash, error) }

func digestRef(repo string, d digester) (imageref.Digest, error) {
	h, err := d.Digest()
	if err != nil {
		return imageref.Digest{}, err
	}
	return imageref.ParseDigest(repo + "@" + h.String())
}

// replaceDir moves src to dst, replacing dst.
func replaceDir(src, dst string) error {
	old := dst + ".old"
	if err := os.RemoveAll(old); err != nil {
		return err
	}
	if err := os.Rename(dst, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Rename(src, dst); err != nil {
		return err
	}
	return os.RemoveAll(old)
}

// ReadDigests parses images/digests.txt under out.
func ReadDigests(out string) (map[string]imageref.Digest, error) {
	p := filepath.Join(out, "images", "digests.txt")
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("%w (run `make images` first)", err)
	}
	refs := map[string]imageref.Digest{}
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("%s:%d: want `<name> <repository>@sha256:<digest>`", p, i+1)
		}
		ref, err := imageref.ParseDigest(f[1])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", p, i+1, err)
		}
		refs[f[0]] = ref
	}
	for _, n := range Names {
		if _, ok := refs[n]; !ok {
			return nil, fmt.Errorf("%s: no %s image", p, n)
		}
	}
	return refs, nil
}

func targets(ts []gobuild.Target) string { return strings.Join(targetStrings(ts), ", ") }

func targetStrings(ts []gobuild.Target) []string {
	var s []string
	for _, t := range ts {
		s = append(s, t.String())
	}
	return s
}

func short(rev string) string {
	if len(rev) > 12 && !strings.HasSuffix(rev, "-dirty") {
		return rev[:12]
	}
	return rev
}

func since(t time.Time) string { return time.Since(t).Round(10 * time.Millisecond).String() }
