package build

// The attach step: each image's SBOM and provenance, written into its
// layout as OCI artifacts whose subject is the image. They are separate
// manifests, so the images' digests do not depend on them; they are
// deterministic, so a rebuild of the same source writes the same bytes
// (and the same artifact digests). Signing happens at push time
// (internal/attest/signing): signatures are not reproducible.

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"
	"sigs.k8s.io/yaml"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/internal/attest/provenance"
	"github.com/titanml/inference-stack-operator/internal/attest/sbom"
	"github.com/titanml/inference-stack-operator/internal/build/gobuild"
	"github.com/titanml/inference-stack-operator/internal/oci"
)

const (
	// BuilderID names the build tool in the provenance.
	BuilderID = SourceURL + "/tools/cmd/isctl"
	// BuildType is the provenance's build type: tools/README.md describes
	// its parameters.
	BuildType = SourceURL + "/blob/main/tools/README.md#provenance"
	// sourceURI is the source as a resolved dependency (SLSA's git+https).
	sourceURI = "git+" + SourceURL
)

// Artifact is a document attached to an image.
type Artifact struct {
	// ArtifactType names the format (sbom.MediaType, provenance.MediaType).
	ArtifactType string
	// Digest is the artifact manifest's, which a registry lists among the
	// image's referrers.
	Digest string
	// Size is the document's size in bytes.
	Size int64
}

// attach generates the SBOM and provenance of every image and writes them
// into the staged layouts.
func (b *graph) attach(ctx context.Context, src *GoBuild, refs map[string]oci.Digest) error {
	t := time.Now()
	for _, n := range b.cfg.Images {
		top, err := oci.ReadLayout(filepath.Join(b.staging, "images", n))
		if err != nil {
			return fmt.Errorf("reading the %s image: %w", n, err)
		}
		in, prov, err := b.describe(ctx, src, n, top, refs)
		if err != nil {
			return fmt.Errorf("describing the %s image: %w", n, err)
		}
		doc, err := sbom.Generate(in)
		if err != nil {
			return fmt.Errorf("the SBOM of the %s image: %w", n, err)
		}
		st, err := provenance.Statement(prov)
		if err != nil {
			return fmt.Errorf("the provenance of the %s image: %w", n, err)
		}
		if err := AttachDocuments(filepath.Join(b.staging, "images", n), top, doc, st); err != nil {
			return fmt.Errorf("the %s image: %w", n, err)
		}
	}
	b.logf("  attached an SBOM and a provenance statement to each image (%s)", since(t))
	return nil
}

// AttachDocuments writes an SBOM (CycloneDX JSON) and a provenance
// statement (in-toto JSON) into the layout at dir as two artifacts whose
// subject is its image top.
func AttachDocuments(dir string, top oci.Top, sbomDoc, statement []byte) error {
	sbomArt, err := oci.Artifact(sbom.MediaType, top.Descriptor,
		[]oci.Blob{{MediaType: sbom.MediaType, Data: sbomDoc, Annotations: map[string]string{oci.TitleAnnotation: sbom.FileName}}}, nil)
	if err != nil {
		return fmt.Errorf("the SBOM artifact: %w", err)
	}
	provArt, err := oci.Artifact(provenance.MediaType, top.Descriptor,
		[]oci.Blob{{MediaType: provenance.MediaType, Data: statement, Annotations: map[string]string{oci.TitleAnnotation: provenance.FileName}}},
		map[string]string{provenance.PredicateTypeAnnotation: provenance.PredicateType})
	if err != nil {
		return fmt.Errorf("the provenance artifact: %w", err)
	}
	return oci.Attach(dir, sbomArt, provArt)
}

// describe returns what the SBOM and the provenance of image n say.
func (b *graph) describe(ctx context.Context, src *GoBuild, n string, top oci.Top, refs map[string]oci.Digest) (sbom.Input, provenance.Input, error) {
	digest := top.Descriptor.Digest
	in := sbom.Input{
		Subject: sbom.Subject{Repository: refs[n].Repository, Digest: digest, Version: b.res.Version},
		Tool:    sbom.Tool{Name: "isctl", Version: b.res.Revision},
	}
	prov := provenance.Input{
		Repository:     refs[n].Repository,
		Digest:         digest,
		BuildType:      BuildType,
		BuilderID:      BuilderID,
		BuilderVersion: map[string]string{"isctl": b.res.Revision},
		Dependencies:   []provenance.Resource{provenance.Source(sourceURI, b.res.Revision)},
	}
	ext := b.externalParameters(n)
	// An image or an index, whatever the graph made of it.
	var err error
	if top.Descriptor.MediaType.IsIndex() {
		in.Index, err = top.Index()
	} else {
		in.Image, err = top.Image()
	}
	if err != nil {
		return in, prov, err
	}
	switch n {
	case Operator:
		if err := b.describeOperator(ctx, src, &in, &prov); err != nil {
			return in, prov, err
		}
	case Bundle:
		op := refs[Operator]
		h, err := v1.NewHash(op.Digest)
		if err != nil {
			return in, prov, err
		}
		in.Extras = []sbom.Extra{{Component: sbom.PinnedImage(op.Repository, h, "", "")}}
		prov.Dependencies = append(prov.Dependencies, provenance.Image(op.String(), h))
	case Catalog:
		extras, pinned, err := b.catalogBundles(ctx)
		if err != nil {
			return in, prov, err
		}
		in.Extras = extras
		prov.Dependencies = append(prov.Dependencies, pinned...)
		// The image also runs opm and the health probe (OLM v0 serves the
		// catalog with them): their Go modules are inputs too.
		p := b.cfg.Platforms[0]
		var infos []*buildinfo.BuildInfo
		for _, bin := range []string{"opm", "grpc_health_probe"} {
			bi, err := buildinfo.ReadFile(filepath.Join(b.staging, "build", p.OS+"_"+p.Arch, bin))
			if err != nil {
				return in, prov, fmt.Errorf("reading the build information of the catalog's %s: %w", bin, err)
			}
			infos = append(infos, bi)
		}
		prov.Dependencies = append(prov.Dependencies, provenance.GoModules(infos...)...)
	}
	prov.ExternalParameters = ext
	return in, prov, nil
}

// describeOperator adds what the operator image's SBOM and provenance say
// of the compile: the files the binary embeds, and per platform the
// `go build` command, its environment, the binary and its Go modules.
func (b *graph) describeOperator(ctx context.Context, src *GoBuild, in *sbom.Input, prov *provenance.Input) error {
	var err error
	if in.Extras, err = b.embedded(ctx, src.OperatorPackage); err != nil {
		return err
	}
	var infos []*buildinfo.BuildInfo
	internal := map[string]any{"goVersion": b.res.GoVersion}
	builds := map[string]any{}
	for _, p := range b.cfg.Platforms {
		rel := "out/build/" + p.OS + "_" + p.Arch + "/operator"
		bin := filepath.Join(b.staging, "build", p.OS+"_"+p.Arch, "operator")
		bi, err := buildinfo.ReadFile(bin)
		if err != nil {
			return fmt.Errorf("reading the build information of %s: %w", rel, err)
		}
		infos = append(infos, bi)
		data, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		prov.Byproducts = append(prov.Byproducts, provenance.File(rel, data))
		args, err := gobuild.Args(gobuild.Options{Package: src.OperatorPackage, Output: rel, Target: p, Stamp: b.stamp()})
		if err != nil {
			return err
		}
		builds[p.String()] = map[string]any{"command": append([]string{"go"}, args...), "environment": gobuild.PinnedEnv(p)}
	}
	internal["goBuild"] = builds
	prov.InternalParameters = internal
	prov.Dependencies = append(prov.Dependencies, provenance.GoModules(infos...)...)
	return nil
}

// externalParameters are the inputs of image n: the command that rebuilds
// it with exactly the flags it depends on (the operator does not depend on
// the bundle's repository, nor the bundle on the catalog's channels), and
// their values.
func (b *graph) externalParameters(n string) map[string]any {
	platforms := targetStrings(b.cfg.Platforms)
	cmd := []string{"isctl", "build",
		"--version=" + b.res.Version,
		"--revision=" + b.res.Revision,
		"--platforms=" + strings.Join(platforms, ","),
		"--operator-repo=" + b.cfg.Repos.Operator,
	}
	p := map[string]any{
		"source":          map[string]any{"uri": sourceURI, "revision": b.res.Revision},
		"version":         b.res.Version,
		"platforms":       platforms,
		"sourceDateEpoch": b.res.SourceDateEpoch,
		"repositories":    map[string]any{"operator": b.cfg.Repos.Operator},
	}
	repos := p["repositories"].(map[string]any)
	if n != Operator {
		cmd = append(cmd, "--bundle-repo="+b.cfg.Repos.Bundle)
		repos["bundle"] = b.cfg.Repos.Bundle
	}
	if n == Catalog {
		mode := "full"
		if b.cfg.CurrentOnly {
			mode = "current"
		}
		cmd = append(cmd, "--catalog-repo="+b.cfg.Repos.Catalog, "--channels="+strings.Join(b.cfg.Archetypes, ","), "--catalog="+mode)
		repos["catalog"] = b.cfg.Repos.Catalog
		p["channels"] = b.cfg.Archetypes
		p["catalog"] = mode
	}
	p["command"] = cmd
	p["environment"] = map[string]any{"SOURCE_DATE_EPOCH": fmt.Sprint(b.res.SourceDateEpoch)}
	return p
}

func (b *graph) stamp() map[string]string {
	return map[string]string{versionVar: b.res.Version, commitVar: b.res.Revision}
}

// embedded describes what the operator binary embeds from this module (the
// chart it installs, its watches file, VERSION) as components of the
// binary: its build information lists modules, not files.
func (b *graph) embedded(ctx context.Context, pkg string) ([]sbom.Extra, error) {
	embeds, err := gobuild.EmbeddedFiles(ctx, b.cfg.Root, pkg, b.cfg.Platforms[0])
	if err != nil {
		return nil, err
	}
	var out []sbom.Extra
	for _, e := range embeds {
		files := map[string][]byte{}
		for _, f := range e.Files {
			data, err := os.ReadFile(filepath.Join(e.Dir, filepath.FromSlash(f)))
			if err != nil {
				return nil, fmt.Errorf("reading an embedded file: %w", err)
			}
			files[f] = data
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(e.ImportPath, inferencestack.ModulePath), "/")
		if rel == "" {
			rel = "."
		}
		var c cdx.Component
		if chart, ok := files["Chart.yaml"]; ok {
			var meta struct{ Name, Version, Description string }
			if err := yaml.Unmarshal(chart, &meta); err != nil {
				return nil, fmt.Errorf("reading %s/Chart.yaml: %w", rel, err)
			}
			c = sbom.FilesComponent(cdx.ComponentTypeApplication, "helm-chart:"+rel, meta.Name, meta.Version, "Helm chart embedded in the operator ("+rel+")", files)
		} else {
			c = sbom.FilesComponent(cdx.ComponentTypeData, "embedded:"+rel, e.ImportPath, "", "files the operator embeds (//go:embed)", files)
		}
		out = append(out, sbom.Extra{Component: c, In: "/operator"})
	}
	return out, nil
}

// catalogBundles reads the staged catalog and returns the bundles it pins,
// and the images those bundles pin (their related images), as SBOM
// components and as the catalog's resolved dependencies.
func (b *graph) catalogBundles(ctx context.Context) ([]sbom.Extra, []provenance.Resource, error) {
	cfg, err := declcfg.LoadFS(ctx, os.DirFS(filepath.Join(b.staging, "catalog", "configs")))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the rendered catalog: %w", err)
	}
	bundles := append([]declcfg.Bundle(nil), cfg.Bundles...)
	sort.Slice(bundles, func(i, j int) bool { return bundles[i].Image < bundles[j].Image })
	var extras []sbom.Extra
	var deps []provenance.Resource
	related := map[string]sbom.Extra{}
	for _, bd := range bundles {
		ref, err := oci.ParseDigest(bd.Image)
		if err != nil {
			return nil, nil, fmt.Errorf("catalog bundle %s: %w", bd.Name, err)
		}
		h, err := v1.NewHash(ref.Digest)
		if err != nil {
			return nil, nil, err
		}
		version := ""
		if props, err := property.Parse(bd.Properties); err == nil && len(props.Packages) == 1 {
			version = props.Packages[0].Version
		}
		e := sbom.Extra{Component: sbom.PinnedImage(ref.Repository, h, bd.Name, version)}
		for _, ri := range bd.RelatedImages {
			rref, err := oci.ParseDigest(ri.Image)
			if err != nil || ri.Image == bd.Image {
				continue
			}
			rh, err := v1.NewHash(rref.Digest)
			if err != nil {
				continue
			}
			c := sbom.PinnedImage(rref.Repository, rh, "", "")
			e.DependsOn = append(e.DependsOn, c.BOMRef)
			related[c.BOMRef] = sbom.Extra{Component: c, Indirect: true}
		}
		extras = append(extras, e)
		deps = append(deps, provenance.Image(ref.String(), h))
	}
	var keys []string
	for k := range related {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		extras = append(extras, related[k])
	}
	return extras, deps, nil
}

// artifacts lists the documents attached to a layout's image.
func artifacts(top oci.Top) ([]Artifact, error) {
	var out []Artifact
	for _, d := range top.Referrers {
		a, err := top.Referrer(d)
		if err != nil {
			return nil, err
		}
		m, err := a.Manifest()
		if err != nil {
			return nil, fmt.Errorf("reading artifact %s: %w", d.Digest, err)
		}
		var size int64
		for _, l := range m.Layers {
			size += l.Size
		}
		out = append(out, Artifact{ArtifactType: d.ArtifactType, Digest: d.Digest.String(), Size: size})
	}
	return out, nil
}
