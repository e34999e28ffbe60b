// Package build is the build graph of the three images: operator binary
// → operator image (multi-arch index) → bundle directory pinned to the
// operator digest → bundle image → catalog rendered from the template,
// released entries and the bundle (pinned by digest) → catalog image (the
// FBC plus opm and a gRPC health probe, so that OLM v1 reads it and OLM v0
// runs it). Every step is a pure function of the source tree, VERSION, the
// revision and SOURCE_DATE_EPOCH; so are the SBOM and provenance attached to
// each image (attest.go).
//
// Each image has its builder, which builds it from the images it pins
// (Config.Images picks the images; the operator image needs nothing but
// the operator's binaries and its stamp). The programs come from a
// BinarySource (source.go): GoBuild compiles them, Prebuilt takes what
// Bazel's compile actions built. A built image is published by a Publisher
// (publish.go): an OCI layout (Layout, Bazel's image actions) or a
// registry (push.Registry, `isctl push` and releases).
//
// Outputs (under Config.Out, "out/" by default):
//
//	images/operator/, images/bundle/, images/catalog/   OCI image layouts, each with
//	                                                     its SBOM and provenance as referrers
//	                                                     (none with Prebuilt binaries)
//	images/digests.txt                                   <name> <repository>@sha256:<digest>
//	bundle/                                              the bundle directory
//	catalog/configs/                                     the file-based catalog
//	build/<os>_<arch>/operator                           the operator binaries
//	build/<os>_<arch>/opm, grpc_health_probe             the catalog image's binaries
//	cache/layers/                                        compressed layers by content (a cache)
//
// Inputs are validated before anything is compiled, and outputs are staged
// and moved into place only when every step succeeded, so a failed build
// leaves the previous outputs untouched.
package build

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/blang/semver/v4"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/internal/build/gobuild"
	"github.com/titanml/inference-stack-operator/internal/bundle"
	"github.com/titanml/inference-stack-operator/internal/catalog"
	"github.com/titanml/inference-stack-operator/internal/oci"
	"github.com/titanml/inference-stack-operator/internal/srctree"
)

const (
	// SourceURL is recorded in the org.opencontainers.image.source label.
	SourceURL = "https://" + inferencestack.ModulePath
	// DefaultRegistry is the release namespace of the three repositories.
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

	// OPMPackage is opm's main package. go.mod pins its module (the
	// operator-registry version the catalog renderer uses) and lists it as
	// a tool, so go.sum covers every package it needs.
	OPMPackage = "github.com/operator-framework/operator-registry/cmd/opm"
	// HealthProbePackage is the probe OLM v0 runs in the catalog pod.
	HealthProbePackage = "./catalog/healthprobe"
	opmVersionVar      = "github.com/operator-framework/operator-registry/cmd/opm/version.opmVersion"
	// opmBuildTag lets containers/image (imported by opm) build without
	// cgo: it verifies signatures with a Go OpenPGP library instead of gpgme.
	opmBuildTag = "containers_image_openpgp"
)

// The catalog image's command: opm serves the FBC over gRPC on port 50051,
// as OLM v0 expects of a catalog pod (`opm serve /configs`). Without
// --cache-dir opm builds its cache in a fresh directory under /tmp at
// start: a cache baked into the image would have to be produced by running
// opm during the build and would tie the image to that opm's cache format,
// while this catalog takes milliseconds to index.
var (
	CatalogEntrypoint = []string{"/bin/opm"}
	CatalogCmd        = []string{"serve", "/configs"}
)

// Names lists the images in build and push order.
var Names = []string{Operator, Bundle, Catalog}

// DefaultPlatforms are the operator image's platforms.
var DefaultPlatforms = []gobuild.Target{{OS: "linux", Arch: "amd64"}, {OS: "linux", Arch: "arm64"}}

// Repos are the repositories of the three images.
type Repos struct {
	Operator, Bundle, Catalog string
}

// ReposFor returns the repositories of the three images under registry
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
	// CurrentOnly builds a development catalog holding only the bundle
	// being built (e.g. for a test cluster without access to the registry
	// of released bundles). A release never uses it.
	CurrentOnly bool
	// Images are the images to build, with the images they pin (the
	// bundle pins the operator, the catalog the bundle); default Names.
	Images []string
	// Binaries gives the programs the images package; default a GoBuild
	// (compile from Root).
	Binaries BinarySource
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Image is one built image.
type Image struct {
	Name string
	Ref  oci.Digest
	// Tag is the human tag pushed alongside the digest (the version).
	Tag   string
	Sizes []oci.PlatformSize
	// Artifacts are the SBOM and provenance attached to the image.
	Artifacts []Artifact
}

// Result describes a successful build.
type Result struct {
	Version         string
	Revision        string
	SourceDateEpoch int64
	GoVersion       string
	Images          []Image
	// CurrentEntry is the catalog entry of the bundle built.
	CurrentEntry catalog.Release
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
	Version  semver.Version
	Template []byte
	Released []catalog.Release
	Bundle   bundle.Inputs
	// Release is the record of Version when it is already released.
	Release *catalog.Release
}

// LoadInputs reads and validates everything a build reads from the source
// tree besides the Go code, without writing anything.
func LoadInputs(cfg Config) (*Inputs, error) {
	cfg = withDefaults(cfg)
	in := &Inputs{}
	var err error
	if cfg.Version != "" {
		in.Version, err = inferencestack.ParseVersionFile(cfg.Version)
	} else {
		in.Version, err = inferencestack.ReadVersionFile(filepath.Join(cfg.Root, "VERSION"))
	}
	if err != nil {
		return nil, err
	}
	for _, repo := range []string{cfg.Repos.Operator, cfg.Repos.Bundle, cfg.Repos.Catalog} {
		if err := oci.CheckRepository(repo); err != nil {
			return nil, err
		}
	}
	if in.Released, err = catalog.LoadReleases(filepath.Join(cfg.Root, catalog.ReleasedDir)); err != nil {
		return nil, err
	}
	// The operator image reads only VERSION and the release records (the
	// stamp of a released VERSION); the bundle and the catalog read the
	// rest.
	operatorOnly := !slices.Contains(cfg.Images, Bundle) && !slices.Contains(cfg.Images, Catalog)
	if !operatorOnly {
		if in.Template, err = os.ReadFile(filepath.Join(cfg.Root, catalog.TemplatePath)); err != nil {
			return nil, fmt.Errorf("catalog template: %w", err)
		}
		if _, err := catalog.Precheck(catalog.Inputs{Template: in.Template, Released: in.Released}); err != nil {
			return nil, err
		}
	}
	if cfg.CurrentOnly && !operatorOnly {
		// A development catalog: the template's settings, none of its
		// bundles, no released entries.
		if in.Template, err = catalog.WithoutBundles(in.Template); err != nil {
			return nil, err
		}
		in.Released = nil
	}
	if rel, ok := catalog.Find(in.Released, in.Version.String()); ok {
		in.Release = &rel
		op, _ := oci.ParseDigest(rel.OperatorImage)
		b, _ := oci.ParseDigest(rel.BundleImage)
		if op.Repository != cfg.Repos.Operator || b.Repository != cfg.Repos.Bundle {
			return nil, fmt.Errorf("VERSION %s is released (%s) with operator %s and bundle %s; a build of it must use the same repositories (got %s and %s). Bump VERSION to build something new",
				in.Version, rel.File, op.Repository, b.Repository, cfg.Repos.Operator, cfg.Repos.Bundle)
		}
	}
	if operatorOnly {
		return in, nil
	}
	if in.Bundle, err = bundle.LoadInputs(cfg.Root); err != nil {
		return nil, err
	}
	// Generate once with a placeholder digest: bad bundle inputs (a
	// wildcard in the RBAC, a field the generator owns) stop the build
	// before anything is compiled.
	placeholder := cfg.Repos.Operator + "@sha256:" + strings.Repeat("0", 64)
	if _, err := bundle.Generate(in.Bundle, bundle.Options{Version: in.Version, OperatorImage: placeholder}); err != nil {
		return nil, err
	}
	return in, nil
}

// Build builds cfg.Images with the images they pin, each with its
// builder, in order (operator, bundle, catalog); attaches their SBOM and
// provenance when it compiled the binaries; then the outputs move into
// place together.
func Build(ctx context.Context, cfg Config) (*Result, error) {
	start := time.Now()
	cfg, err := checkImages(withDefaults(cfg))
	if err != nil {
		return nil, err
	}
	b, err := newGraph(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(b.staging)
	refs := map[string]oci.Digest{}
	for _, ib := range builders {
		if !slices.Contains(b.cfg.Images, ib.name) {
			continue
		}
		if refs[ib.name], err = ib.build(b, ctx, refs); err != nil {
			return nil, err
		}
	}
	if src, ok := b.cfg.Binaries.(*GoBuild); ok {
		if err := b.attach(ctx, src.withDefaults(), refs); err != nil {
			return nil, err
		}
	} else {
		b.logf("  no SBOM or provenance attached: the binaries were compiled elsewhere")
	}
	if err := b.publish(refs); err != nil {
		return nil, err
	}
	b.logf("done in %s; digests in %s", since(start), filepath.Join(b.cfg.Out, "images", "digests.txt"))
	return b.res, nil
}

// An imageBuilder builds one image: it writes the image's layout under
// the staging directory and returns its reference; refs holds those of
// the images built before it, which it may pin.
type imageBuilder struct {
	name  string
	needs string // the image it pins, built first
	build func(b *graph, ctx context.Context, refs map[string]oci.Digest) (oci.Digest, error)
}

// builders are the images' builders in build order.
var builders = []imageBuilder{
	{name: Operator, build: (*graph).operator},
	{name: Bundle, needs: Operator, build: (*graph).bundle},
	{name: Catalog, needs: Bundle, build: (*graph).catalog},
}

// checkImages checks cfg.Images and adds the images they pin.
func checkImages(cfg Config) (Config, error) {
	want := map[string]bool{}
	for _, n := range cfg.Images {
		if !slices.Contains(Names, n) {
			return cfg, fmt.Errorf("no image %q (the images: %s)", n, strings.Join(Names, ", "))
		}
		want[n] = true
	}
	for i := len(builders) - 1; i >= 0; i-- {
		if ib := builders[i]; want[ib.name] && ib.needs != "" {
			want[ib.needs] = true
		}
	}
	cfg.Images = nil
	for _, n := range Names {
		if want[n] {
			cfg.Images = append(cfg.Images, n)
		}
	}
	return cfg, nil
}

// graph is one run of the build graph: its inputs, what it resolved (revision,
// time, Go version), and the staging directory its outputs are written to.
type graph struct {
	cfg     Config
	in      *Inputs
	res     *Result
	created time.Time
	staging string
	cache   oci.LayerCache
}

func (b *graph) logf(format string, args ...any) {
	if b.cfg.Log != nil {
		fmt.Fprintf(b.cfg.Log, format+"\n", args...)
	}
}

// newGraph validates the inputs, resolves the revision, the image time and
// the Go version (those recorded for a released VERSION), and creates the
// staging directory.
func newGraph(ctx context.Context, cfg Config) (*graph, error) {
	in, err := LoadInputs(cfg)
	if err != nil {
		return nil, err
	}
	b := &graph{cfg: cfg, in: in, res: &Result{Version: in.Version.String(), Out: cfg.Out}}
	if err := b.resolve(ctx); err != nil {
		return nil, err
	}
	b.created = time.Unix(b.res.SourceDateEpoch, 0).UTC()
	b.logf("building %s (revision %s, %s, SOURCE_DATE_EPOCH=%d)", b.res.Version, short(b.res.Revision), b.res.GoVersion, b.res.SourceDateEpoch)
	if cfg.CurrentOnly {
		b.logf("  development catalog: only the bundle being built, no released bundles")
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, fmt.Errorf("creating the output directory: %w", err)
	}
	if b.staging, err = os.MkdirTemp(cfg.Out, ".staging-"); err != nil {
		return nil, fmt.Errorf("creating the staging directory: %w", err)
	}
	b.cache = oci.LayerCache{Dir: filepath.Join(cfg.Out, "cache", "layers")}
	return b, nil
}

// Stamp is what a build records besides the source: the revision, the
// image time and the operator's platforms.
type Stamp struct {
	Version         string
	Revision        string
	SourceDateEpoch int64
	Platforms       []gobuild.Target
	// Release is the record of Version when it is already released.
	Release *catalog.Release
}

// OperatorVars are the string variables the operator binary is stamped
// with (go build -ldflags -X).
func (s Stamp) OperatorVars() map[string]string {
	return map[string]string{versionVar: s.Version, commitVar: s.Revision}
}

// ResolveStamp resolves the stamp of a build of in: a released VERSION is
// rebuilt with what it was built with (revision, SOURCE_DATE_EPOCH,
// platforms), so that the digests reproduce; otherwise cfg.Revision (or the
// git revision of cfg.Root), cfg.SourceDateEpoch (or $SOURCE_DATE_EPOCH, or
// 0) and cfg.Platforms. Build and the Bazel build's compile step both use
// it, so they stamp the same values.
func ResolveStamp(ctx context.Context, cfg Config, in *Inputs) (Stamp, error) {
	cfg = withDefaults(cfg)
	st := Stamp{Version: in.Version.String(), Platforms: cfg.Platforms, Release: in.Release}
	var err error
	if rel := in.Release; rel != nil {
		st.Revision, st.SourceDateEpoch = rel.Revision, rel.SourceDateEpoch
		if st.Platforms, err = gobuild.ParseTargets(strings.Join(rel.Platforms, ",")); err != nil {
			return Stamp{}, fmt.Errorf("%s: %w", rel.File, err)
		}
		return st, nil
	}
	if st.Revision = cfg.Revision; st.Revision == "" {
		info, err := srctree.ReadRevision(ctx, cfg.Root)
		if err != nil {
			return Stamp{}, fmt.Errorf("reading the source revision: %w", err)
		}
		st.Revision = info.String()
	}
	if st.SourceDateEpoch, err = sourceDateEpoch(cfg.SourceDateEpoch); err != nil {
		return Stamp{}, err
	}
	return st, nil
}

// resolve sets the revision, SOURCE_DATE_EPOCH, platforms and Go version
// (ResolveStamp; the Go version of the go command, or of the prebuilt
// binaries).
func (b *graph) resolve(ctx context.Context) error {
	res, rel := b.res, b.in.Release
	st, err := ResolveStamp(ctx, b.cfg, b.in)
	if err != nil {
		return err
	}
	res.Revision, res.SourceDateEpoch, b.cfg.Platforms = st.Revision, st.SourceDateEpoch, st.Platforms
	if rel != nil {
		res.Released = true
		b.logf("VERSION %s is released (%s): rebuilding it at revision %s to reproduce %s", res.Version, rel.File, short(res.Revision), rel.BundleImage)
	}
	if res.GoVersion, err = b.cfg.Binaries.GoVersion(ctx, b.cfg.Root, b.cfg.Platforms); err != nil {
		return fmt.Errorf("reading the Go version: %w", err)
	}
	if rel != nil && rel.GoVersion != res.GoVersion {
		b.logf("warning: %s was built with %s, this is %s: the operator digest will probably differ", res.Version, rel.GoVersion, res.GoVersion)
	}
	return nil
}

// labels are the OCI labels of the image titled title.
func (b *graph) labels(title string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    title,
		"org.opencontainers.image.version":  b.res.Version,
		"org.opencontainers.image.revision": b.res.Revision,
		"org.opencontainers.image.source":   SourceURL,
	}
}

// operator compiles the operator for every platform and writes its image
// index; a released VERSION must reproduce the recorded digest.
func (b *graph) operator(ctx context.Context, _ map[string]oci.Digest) (oci.Digest, error) {
	t := time.Now()
	bins, err := b.operatorBinaries(ctx)
	if err != nil {
		return oci.Digest{}, err
	}
	b.logf("  %s operator for %s (%s)", b.verb(), targets(b.cfg.Platforms), since(t))
	t = time.Now()
	idx, err := operatorIndex(b.cache, b.cfg.Platforms, bins, b.created, b.labels(inferencestack.PackageName))
	if err != nil {
		return oci.Digest{}, err
	}
	ref, err := digestRef(b.cfg.Repos.Operator, idx)
	if err != nil {
		return oci.Digest{}, err
	}
	if err := oci.WriteLayout(filepath.Join(b.staging, "images", Operator), nil, idx, b.res.Version); err != nil {
		return oci.Digest{}, fmt.Errorf("writing the operator image: %w", err)
	}
	b.logf("  operator image %s (%s)", ref, since(t))
	if rel := b.in.Release; rel != nil && rel.OperatorImage != ref.String() {
		return oci.Digest{}, fmt.Errorf("VERSION %s is released (%s) with operator image %s, but this tree builds %s: the source changed since the release commit %s.\n"+
			"A released version is immutable: bump VERSION to build something new", b.res.Version, rel.File, rel.OperatorImage, ref, short(rel.Revision))
	}
	return ref, nil
}

// bundle generates the bundle directory (staging bundle/) pinning the
// operator image, validates it and writes the bundle image.
func (b *graph) bundle(_ context.Context, refs map[string]oci.Digest) (oci.Digest, error) {
	t := time.Now()
	v := b.in.Version
	gen, err := bundle.Generate(b.in.Bundle, bundle.Options{Version: v, OperatorImage: refs[Operator].String()})
	if err != nil {
		return oci.Digest{}, err
	}
	dir := filepath.Join(b.staging, "bundle")
	if err := gen.WriteDir(dir); err != nil {
		return oci.Digest{}, fmt.Errorf("writing the bundle directory: %w", err)
	}
	if err := bundle.ValidateDir(dir).Err(); err != nil {
		return oci.Digest{}, err
	}
	var entries []oci.Entry
	for _, p := range gen.Paths() {
		entries = append(entries, oci.File(p, 0o644, gen.Files[p]))
	}
	layer, err := b.cache.Layer(entries, b.created)
	if err != nil {
		return oci.Digest{}, fmt.Errorf("the bundle layer: %w", err)
	}
	img, err := oci.Image(oci.Config{
		Platform: v1.Platform{OS: "linux", Architecture: "amd64"},
		Created:  b.created,
		Labels:   oci.Labels(b.labels(inferencestack.PackageName+"-bundle"), bundle.Annotations(v)),
	}, []oci.LayerSpec{{Layer: layer, CreatedBy: "isctl: registry+v1 bundle " + bundle.CSVName(v)}})
	if err != nil {
		return oci.Digest{}, fmt.Errorf("the bundle image: %w", err)
	}
	ref, err := b.writeImage(Bundle, b.cfg.Repos.Bundle, img)
	if err != nil {
		return oci.Digest{}, err
	}
	b.logf("  bundle image %s (%s)", ref, since(t))
	return ref, nil
}

// catalog renders the catalog with the staged bundle directory referenced
// as the bundle image, writes the FBC directory and the catalog image, and
// records the bundle's catalog entry in the result.
func (b *graph) catalog(ctx context.Context, refs map[string]oci.Digest) (oci.Digest, error) {
	t := time.Now()
	opRef, bundleRef, bundleDir := refs[Operator], refs[Bundle], filepath.Join(b.staging, "bundle")
	res := b.res
	cat, err := catalog.Render(ctx, catalog.Inputs{Template: b.in.Template, Released: b.in.Released}, catalog.Current{
		Dir: bundleDir, Image: bundleRef, Version: b.in.Version, Archetypes: b.cfg.Archetypes,
	})
	if err != nil {
		return oci.Digest{}, err
	}
	res.CurrentEntry = catalog.Release{
		Version: res.Version, Revision: res.Revision, SourceDateEpoch: res.SourceDateEpoch, GoVersion: res.GoVersion,
		Platforms:     targetStrings(b.cfg.Platforms),
		OperatorImage: opRef.String(), BundleImage: bundleRef.String(), Bundle: cat.CurrentEntry,
	}
	fbcDir := filepath.Join(b.staging, "catalog", "configs")
	if err := os.MkdirAll(filepath.Join(fbcDir, inferencestack.PackageName), 0o755); err != nil {
		return oci.Digest{}, fmt.Errorf("writing the catalog: %w", err)
	}
	if err := os.WriteFile(filepath.Join(fbcDir, filepath.FromSlash(catalog.FBCPath)), cat.FBC, 0o644); err != nil {
		return oci.Digest{}, fmt.Errorf("writing the catalog: %w", err)
	}
	img, err := b.catalogImage(ctx, cat.FBC)
	if err != nil {
		return oci.Digest{}, err
	}
	ref, err := b.writeImage(Catalog, b.cfg.Repos.Catalog, img)
	if err != nil {
		return oci.Digest{}, err
	}
	b.logf("  catalog image %s (%s)", ref, since(t))
	return ref, nil
}

// catalogImage assembles the catalog image for the first platform of the
// build (the catalog is one image, not an index): the operator image's base
// layer (passwd, group, home, /tmp), a layer with opm and the health probe
// in /bin, and the FBC under /configs on top, so that a new catalog only
// changes its last, small layer. catalogd reads /configs (the configs label)
// and never runs the image; OLM v0 runs it: opm serves the FBC and
// grpc_health_probe answers its probes (exec probes find it through PATH).
func (b *graph) catalogImage(ctx context.Context, fbc []byte) (v1.Image, error) {
	t := time.Now()
	p := b.cfg.Platforms[0]
	dir := filepath.Join(b.staging, "build", p.OS+"_"+p.Arch)
	opm, err := b.cfg.Binaries.Binary(ctx, b.cfg.Root, OPM, p, nil, filepath.Join(dir, OPM))
	if err != nil {
		return nil, err
	}
	probe, err := b.cfg.Binaries.Binary(ctx, b.cfg.Root, HealthProbe, p, nil, filepath.Join(dir, HealthProbe))
	if err != nil {
		return nil, err
	}
	b.logf("  %s opm and grpc_health_probe for %s (%s)", b.verb(), p, since(t))
	base, err := b.cache.Layer(baseEntries(), b.created)
	if err != nil {
		return nil, fmt.Errorf("the catalog's base layer: %w", err)
	}
	bins, err := b.cache.Layer([]oci.Entry{
		{Path: "bin/opm", Mode: 0o755, Source: opm},
		{Path: "bin/grpc_health_probe", Mode: 0o755, Source: probe},
	}, b.created)
	if err != nil {
		return nil, fmt.Errorf("the catalog's binaries layer: %w", err)
	}
	configs, err := b.cache.Layer([]oci.Entry{oci.File("configs/"+catalog.FBCPath, 0o644, fbc)}, b.created)
	if err != nil {
		return nil, fmt.Errorf("the catalog layer: %w", err)
	}
	img, err := oci.Image(oci.Config{
		Platform:   platform(p),
		Created:    b.created,
		User:       fmt.Sprintf("%d:%d", NonRootID, NonRootID),
		Entrypoint: CatalogEntrypoint,
		Cmd:        CatalogCmd,
		Env:        []string{"PATH=/bin", "HOME=/home/nonroot"},
		WorkingDir: "/",
		Labels:     oci.Labels(b.labels(inferencestack.PackageName+"-catalog"), map[string]string{CatalogConfigsLabel: "/configs"}),
	}, []oci.LayerSpec{
		{Layer: base, CreatedBy: "isctl: /etc/passwd, /etc/group, /home/nonroot, /tmp"},
		{Layer: bins, CreatedBy: "isctl: /bin/opm (operator-registry, go build -trimpath, CGO_ENABLED=0), /bin/grpc_health_probe"},
		{Layer: configs, CreatedBy: "isctl: file-based catalog"},
	})
	if err != nil {
		return nil, fmt.Errorf("the catalog image: %w", err)
	}
	return img, nil
}

// CompileCatalogProgram compiles the catalog image's program name (OPM,
// stamped with its module's version, or HealthProbe) for p into out, as
// Build does with src; the Bazel build's compile step runs it too.
func CompileCatalogProgram(ctx context.Context, root string, src *GoBuild, name string, p gobuild.Target, out string) error {
	if !slices.Contains(CatalogPrograms, name) {
		return fmt.Errorf("%q is not a program of the catalog image (%s)", name, strings.Join(CatalogPrograms, ", "))
	}
	_, err := src.Binary(ctx, root, name, p, nil, out)
	return err
}

// platform is the OCI platform of p (arm64 images say variant v8, as Go's
// GOARM64 default targets).
func platform(p gobuild.Target) v1.Platform {
	plat := v1.Platform{OS: p.OS, Architecture: p.Arch}
	if p.Arch == "arm64" {
		plat.Variant = "v8"
	}
	return plat
}

// writeImage writes img as the layout images/<name> in staging and returns
// its reference in repo.
func (b *graph) writeImage(name, repo string, img v1.Image) (oci.Digest, error) {
	ref, err := digestRef(repo, img)
	if err != nil {
		return oci.Digest{}, err
	}
	if err := oci.WriteLayout(filepath.Join(b.staging, "images", name), img, nil, b.res.Version); err != nil {
		return oci.Digest{}, fmt.Errorf("writing the %s image: %w", name, err)
	}
	return ref, nil
}

// publish writes digests.txt, reads the image sizes into the result, then
// moves every staged output into place.
func (b *graph) publish(refs map[string]oci.Digest) error {
	var lines strings.Builder
	for _, n := range b.cfg.Images {
		top, err := oci.ReadLayout(filepath.Join(b.staging, "images", n))
		if err != nil {
			return fmt.Errorf("reading the %s image: %w", n, err)
		}
		sizes, err := top.Sizes()
		if err != nil {
			return fmt.Errorf("sizing the %s image: %w", n, err)
		}
		arts, err := artifacts(top)
		if err != nil {
			return fmt.Errorf("reading the artifacts of the %s image: %w", n, err)
		}
		b.res.Images = append(b.res.Images, Image{Name: n, Ref: refs[n], Tag: b.res.Version, Sizes: sizes, Artifacts: arts})
		fmt.Fprintf(&lines, "%s %s\n", n, refs[n])
	}
	if err := os.WriteFile(filepath.Join(b.staging, "images", "digests.txt"), []byte(lines.String()), 0o644); err != nil {
		return fmt.Errorf("writing digests.txt: %w", err)
	}
	for _, d := range []string{"images", "bundle", "catalog", "build"} {
		if _, err := os.Stat(filepath.Join(b.staging, d)); errors.Is(err, os.ErrNotExist) {
			continue // prebuilt binaries: nothing compiled; the operator alone: no bundle, no catalog
		}
		if err := replaceDir(filepath.Join(b.staging, d), filepath.Join(b.cfg.Out, d)); err != nil {
			return fmt.Errorf("moving %s into place: %w", d, err)
		}
	}
	return nil
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
	if len(cfg.Images) == 0 {
		cfg.Images = Names
	}
	if cfg.Binaries == nil {
		cfg.Binaries = &GoBuild{}
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

// operatorBinaries gives the operator binary of every platform, compiled
// in parallel (by a source that compiles) under staging build/<os>_<arch>/.
func (b *graph) operatorBinaries(ctx context.Context) (map[gobuild.Target]string, error) {
	vars := Stamp{Version: b.res.Version, Revision: b.res.Revision}.OperatorVars()
	paths := make([]string, len(b.cfg.Platforms))
	errs := make([]error, len(b.cfg.Platforms))
	var wg sync.WaitGroup
	for i, p := range b.cfg.Platforms {
		out := filepath.Join(b.staging, "build", p.OS+"_"+p.Arch, "operator")
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i], errs[i] = b.cfg.Binaries.Binary(ctx, b.cfg.Root, Operator, p, vars, out)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	bins := map[gobuild.Target]string{}
	for i, p := range b.cfg.Platforms {
		bins[p] = paths[i]
	}
	return bins, nil
}

// verb says what the build does with the binaries, for the log.
func (b *graph) verb() string {
	if _, ok := b.cfg.Binaries.(*GoBuild); ok {
		return "compiled"
	}
	return "packaged prebuilt"
}

// baseEntries is the operator image's filesystem besides the binary: a
// passwd and group file naming the non-root user, its home and /tmp.
func baseEntries() []oci.Entry {
	return []oci.Entry{
		oci.File("etc/passwd", 0o644, []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRootID, NonRootID))),
		oci.File("etc/group", 0o644, []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRootID))),
		oci.Dir("home/nonroot", 0o700, NonRootID, NonRootID),
		oci.Dir("tmp", 0o1777, 0, 0),
	}
}

func operatorIndex(cache oci.LayerCache, platforms []gobuild.Target, bins map[gobuild.Target]string, created time.Time, labels map[string]string) (v1.ImageIndex, error) {
	base, err := cache.Layer(baseEntries(), created)
	if err != nil {
		return nil, fmt.Errorf("the operator's base layer: %w", err)
	}
	var imgs []v1.Image
	for _, p := range platforms {
		bin, err := cache.Layer([]oci.Entry{{Path: "operator", Mode: 0o755, Source: bins[p]}}, created)
		if err != nil {
			return nil, fmt.Errorf("the operator layer for %s: %w", p, err)
		}
		img, err := oci.Image(oci.Config{
			Platform:   platform(p),
			Created:    created,
			User:       fmt.Sprintf("%d:%d", NonRootID, NonRootID),
			Entrypoint: []string{"/operator"},
			Env:        []string{"HOME=/home/nonroot"},
			WorkingDir: "/",
			Labels:     labels,
		}, []oci.LayerSpec{
			{Layer: base, CreatedBy: "isctl: /etc/passwd, /etc/group, /home/nonroot, /tmp"},
			{Layer: bin, CreatedBy: "isctl: /operator (go build -trimpath, CGO_ENABLED=0)"},
		})
		if err != nil {
			return nil, fmt.Errorf("the operator image for %s: %w", p, err)
		}
		imgs = append(imgs, img)
	}
	ann := map[string]string{}
	for _, k := range []string{"org.opencontainers.image.version", "org.opencontainers.image.revision", "org.opencontainers.image.source"} {
		ann[k] = labels[k]
	}
	return oci.Index(imgs, ann)
}

type digester interface{ Digest() (v1.Hash, error) }

func digestRef(repo string, d digester) (oci.Digest, error) {
	h, err := d.Digest()
	if err != nil {
		return oci.Digest{}, err
	}
	return oci.ParseDigest(repo + "@" + h.String())
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
func ReadDigests(out string) (map[string]oci.Digest, error) {
	p := filepath.Join(out, "images", "digests.txt")
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("%w (run `make images` first)", err)
	}
	refs := map[string]oci.Digest{}
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("%s:%d: want `<name> <repository>@sha256:<digest>`", p, i+1)
		}
		ref, err := oci.ParseDigest(f[1])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", p, i+1, err)
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
