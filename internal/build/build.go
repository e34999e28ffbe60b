// Package build is the build graph of the three images: operator binary
// → operator image (multi-arch index) → bundle directory pinned to the
// operator digest → bundle image → catalog rendered from the template,
// released entries and the bundle (pinned by digest) → catalog image (the
// FBC plus opm and a gRPC health probe, so that OLM v1 reads it and OLM v0
// runs it). Every step is a pure function of the source tree, VERSION, the
// revision and SOURCE_DATE_EPOCH; so are the SBOM and provenance attached to
// each image (attest.go).
//
// Outputs (under Config.Out, "out/" by default):
//
//	images/operator/, images/bundle/, images/catalog/   OCI image layouts, each with
//	                                                     its SBOM and provenance as referrers
//	                                                     (none with Config.OperatorBinaries)
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
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	// OperatorPackage is the operator's main package; default "./operator".
	OperatorPackage string
	// OPMPackage and HealthProbePackage are the main packages of the
	// catalog image's binaries; default the constants of the same names
	// (tests point them at stand-ins).
	OPMPackage, HealthProbePackage string
	// GoEnv holds extra environment entries for `go build`.
	GoEnv []string
	// CurrentOnly builds a development catalog holding only the bundle
	// being built (e.g. for a test cluster without access to the registry
	// of released bundles). A release never uses it.
	CurrentOnly bool
	// OperatorBinaries, when set, are the operator binaries by platform,
	// already compiled (by the Bazel build's compile actions, or by Bazel for
	// the end-to-end tests), and the build packages them instead of running
	// `go build`; the Go version recorded is the one they were built with.
	// They must be stamped with OperatorVars of the build's Stamp: the
	// compile step resolves it with ResolveStamp from the same inputs.
	// The images are the same; no SBOM or provenance is attached to them,
	// since both describe the compile (the operator's SBOM lists what
	// `go list` says the binary embeds, the provenance the `go build`
	// command and its outputs), which a packaging step did not run and
	// which needs a go command the Bazel actions and tests do not have.
	OperatorBinaries map[gobuild.Target]string
	// CatalogBinaries go with OperatorBinaries: the catalog image's
	// programs (CatalogPrograms: opm, grpc_health_probe) for the catalog's
	// platform, already compiled as CompileCatalogProgram compiles them.
	CatalogBinaries map[string]string
	// Go is the go command Build and CompileCatalogProgram run; empty
	// means "go" from PATH. The Bazel compile step passes the SDK that
	// go.mod's toolchain line names.
	Go string
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
	if in.Template, err = os.ReadFile(filepath.Join(cfg.Root, catalog.TemplatePath)); err != nil {
		return nil, fmt.Errorf("catalog template: %w", err)
	}
	if in.Released, err = catalog.LoadReleases(filepath.Join(cfg.Root, catalog.ReleasedDir)); err != nil {
		return nil, err
	}
	if _, err := catalog.Precheck(catalog.Inputs{Template: in.Template, Released: in.Released}); err != nil {
		return nil, err
	}
	if cfg.CurrentOnly {
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

// Build runs the whole graph: operator, bundle, catalog, then the outputs
// move into place together.
func Build(ctx context.Context, cfg Config) (*Result, error) {
	start := time.Now()
	b, err := newGraph(ctx, withDefaults(cfg))
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(b.staging)
	opRef, err := b.operator(ctx)
	if err != nil {
		return nil, err
	}
	bundleDir, bundleRef, err := b.bundle(opRef)
	if err != nil {
		return nil, err
	}
	catRef, err := b.catalog(ctx, opRef, bundleDir, bundleRef)
	if err != nil {
		return nil, err
	}
	refs := map[string]oci.Digest{Operator: opRef, Bundle: bundleRef, Catalog: catRef}
	if len(b.cfg.OperatorBinaries) == 0 {
		if err := b.attach(ctx, refs); err != nil {
			return nil, err
		}
	} else {
		b.logf("  no SBOM or provenance attached: the operator binaries were compiled elsewhere")
	}
	if err := b.publish(refs); err != nil {
		return nil, err
	}
	b.logf("done in %s; digests in %s", since(start), filepath.Join(b.cfg.Out, "images", "digests.txt"))
	return b.res, nil
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
	if len(b.cfg.OperatorBinaries) > 0 {
		res.GoVersion, err = prebuiltGoVersion(b.cfg.OperatorBinaries, b.cfg.CatalogBinaries, b.cfg.Platforms)
	} else {
		res.GoVersion, err = gobuild.GoVersion(ctx, b.cfg.Root)
	}
	if err != nil {
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
func (b *graph) operator(ctx context.Context) (oci.Digest, error) {
	t := time.Now()
	bins, err := buildBinaries(ctx, b.cfg, b.res, filepath.Join(b.staging, "build"))
	if err != nil {
		return oci.Digest{}, err
	}
	b.logf("  compiled operator for %s (%s)", targets(b.cfg.Platforms), since(t))
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

// bundle generates the bundle directory pinning opRef, validates it and
// writes the bundle image.
func (b *graph) bundle(opRef oci.Digest) (string, oci.Digest, error) {
	t := time.Now()
	v := b.in.Version
	gen, err := bundle.Generate(b.in.Bundle, bundle.Options{Version: v, OperatorImage: opRef.String()})
	if err != nil {
		return "", oci.Digest{}, err
	}
	dir := filepath.Join(b.staging, "bundle")
	if err := gen.WriteDir(dir); err != nil {
		return "", oci.Digest{}, fmt.Errorf("writing the bundle directory: %w", err)
	}
	if err := bundle.ValidateDir(dir).Err(); err != nil {
		return "", oci.Digest{}, err
	}
	var entries []oci.Entry
	for _, p := range gen.Paths() {
		entries = append(entries, oci.File(p, 0o644, gen.Files[p]))
	}
	layer, err := b.cache.Layer(entries, b.created)
	if err != nil {
		return "", oci.Digest{}, fmt.Errorf("the bundle layer: %w", err)
	}
	img, err := oci.Image(oci.Config{
		Platform: v1.Platform{OS: "linux", Architecture: "amd64"},
		Created:  b.created,
		Labels:   oci.Labels(b.labels(inferencestack.PackageName+"-bundle"), bundle.Annotations(v)),
	}, []oci.LayerSpec{{Layer: layer, CreatedBy: "isctl: registry+v1 bundle " + bundle.CSVName(v)}})
	if err != nil {
		return "", oci.Digest{}, fmt.Errorf("the bundle image: %w", err)
	}
	ref, err := b.writeImage(Bundle, b.cfg.Repos.Bundle, img)
	if err != nil {
		return "", oci.Digest{}, err
	}
	b.logf("  bundle image %s (%s)", ref, since(t))
	return dir, ref, nil
}

// catalog renders the catalog with the bundle in bundleDir referenced as
// bundleRef, writes the FBC directory and the catalog image, and records
// the bundle's catalog entry in the result.
func (b *graph) catalog(ctx context.Context, opRef oci.Digest, bundleDir string, bundleRef oci.Digest) (oci.Digest, error) {
	t := time.Now()
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
	opm, probe := b.cfg.CatalogBinaries[OPM], b.cfg.CatalogBinaries[HealthProbe]
	if len(b.cfg.OperatorBinaries) == 0 {
		var err error
		if opm, probe, err = buildCatalogBinaries(ctx, b.cfg, p, dir); err != nil {
			return nil, err
		}
		b.logf("  compiled opm and grpc_health_probe for %s (%s)", p, since(t))
	}
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

// The catalog image's programs (Config.CatalogBinaries, CompileCatalogProgram).
const (
	OPM         = "opm"
	HealthProbe = "grpc_health_probe"
)

// CatalogPrograms lists the catalog image's programs.
var CatalogPrograms = []string{OPM, HealthProbe}

// buildCatalogBinaries compiles opm and the health probe for p into dir.
func buildCatalogBinaries(ctx context.Context, cfg Config, p gobuild.Target, dir string) (opm, probe string, err error) {
	opm, probe = filepath.Join(dir, OPM), filepath.Join(dir, HealthProbe)
	if err := CompileCatalogProgram(ctx, cfg, OPM, p, opm); err != nil {
		return "", "", err
	}
	if err := CompileCatalogProgram(ctx, cfg, HealthProbe, p, probe); err != nil {
		return "", "", err
	}
	return opm, probe, nil
}

// CompileCatalogProgram compiles the catalog image's program name (OPM,
// stamped with its module's version, or HealthProbe) for p into out, as
// Build does; the Bazel build's compile step runs it too.
func CompileCatalogProgram(ctx context.Context, cfg Config, name string, p gobuild.Target, out string) error {
	cfg = withDefaults(cfg)
	o := gobuild.Options{ModuleRoot: cfg.Root, Output: out, Target: p, Env: cfg.GoEnv, Go: cfg.Go}
	switch name {
	case OPM:
		o.Package, o.Tags = cfg.OPMPackage, []string{opmBuildTag}
		v, err := gobuild.ModuleVersion(ctx, cfg.Go, cfg.Root, cfg.OPMPackage, cfg.GoEnv)
		if err != nil {
			return fmt.Errorf("the version of opm: %w", err)
		}
		if v != "" {
			o.Stamp = map[string]string{opmVersionVar: v}
		}
	case HealthProbe:
		o.Package = cfg.HealthProbePackage
	default:
		return fmt.Errorf("%q is not a program of the catalog image (%s)", name, strings.Join(CatalogPrograms, ", "))
	}
	return gobuild.Build(ctx, o)
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
	for _, n := range Names {
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
		if _, err := os.Stat(filepath.Join(b.staging, d)); d == "build" && errors.Is(err, os.ErrNotExist) {
			continue // prebuilt binaries: nothing compiled
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
	if cfg.OperatorPackage == "" {
		cfg.OperatorPackage = "./operator"
	}
	if cfg.OPMPackage == "" {
		cfg.OPMPackage = OPMPackage
	}
	if cfg.HealthProbePackage == "" {
		cfg.HealthProbePackage = HealthProbePackage
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

// prebuiltGoVersion is the Go version the prebuilt binaries (the
// operator's of platforms, the catalog image's) were compiled with (read
// from their build information); they must agree.
func prebuiltGoVersion(bins map[gobuild.Target]string, catalog map[string]string, platforms []gobuild.Target) (string, error) {
	var paths, names []string
	for _, p := range platforms {
		path, ok := bins[p]
		if !ok {
			return "", fmt.Errorf("no prebuilt operator binary for %s", p)
		}
		paths, names = append(paths, path), append(names, "the prebuilt operator binary for "+p.String())
	}
	for _, n := range CatalogPrograms {
		path, ok := catalog[n]
		if !ok {
			return "", fmt.Errorf("no prebuilt %s for the catalog image (Config.CatalogBinaries goes with OperatorBinaries)", n)
		}
		paths, names = append(paths, path), append(names, "the prebuilt "+n)
	}
	version := ""
	for i, path := range paths {
		info, err := buildinfo.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("%s: %w", names[i], err)
		}
		if version != "" && info.GoVersion != version {
			return "", fmt.Errorf("the prebuilt binaries were built with different Go versions (%s, %s of %s)", version, info.GoVersion, names[i])
		}
		version = info.GoVersion
	}
	return version, nil
}

func buildBinaries(ctx context.Context, cfg Config, res *Result, dir string) (map[gobuild.Target]string, error) {
	if len(cfg.OperatorBinaries) > 0 {
		bins := map[gobuild.Target]string{}
		for _, p := range cfg.Platforms {
			path, ok := cfg.OperatorBinaries[p]
			if !ok {
				return nil, fmt.Errorf("no prebuilt operator binary for %s", p)
			}
			bins[p] = path
		}
		return bins, nil
	}
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
				Stamp:      Stamp{Version: res.Version, Revision: res.Revision}.OperatorVars(),
				Env:        cfg.GoEnv,
				Go:         cfg.Go,
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
