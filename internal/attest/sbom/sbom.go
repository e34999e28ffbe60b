// Package sbom writes the software bill of materials of an image as a
// CycloneDX 1.6 JSON document, with the CycloneDX project's own Go library.
//
// What an SBOM lists is read from the image itself, so it describes what a
// node pulls rather than what the build meant to put there: every regular
// file of every layer with its SHA-256, and for every Go binary among them
// its toolchain, build settings and modules (with the go.sum hashes) from
// the build information the Go linker embeds. The caller adds what the
// files do not show: the chart compiled into a binary, the images a bundle
// or a catalog pins.
//
// The document is deterministic: no timestamp and no serial number (both
// would change with every build), components and dependencies in a stable
// order, and nothing from the machine that built it.
package sbom

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"path"
	"runtime/debug"
	"sort"
	"strings"

	cdx "github.com/CycloneDX/cyclonedx-go"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

const (
	// MediaType is the media type of the documents, and the artifactType
	// of the OCI artifacts that carry them.
	MediaType = "application/vnd.cyclonedx+json"
	// FileName is the name the document is given in its artifact.
	FileName = "sbom.cdx.json"
	// PredicateType is the in-toto predicate type of an SBOM attestation
	// (what `cosign attest --type cyclonedx` writes).
	PredicateType = "https://cyclonedx.org/bom"

	// maxBinary bounds the size of a file read whole to look for Go build
	// information (the operator binary is about 60 MB).
	maxBinary = 1 << 30
)

// Subject is the image an SBOM describes.
type Subject struct {
	// Repository is where the image is published, e.g. docker.io/tytn/operator.
	Repository string
	Digest     v1.Hash
	// Version is the version the image is tagged with.
	Version string
}

// Extra is a component the image's files do not show.
type Extra struct {
	Component cdx.Component
	// In is the path of the file that contains it (a chart embedded in
	// /operator); empty means the image itself (an image a manifest pins).
	In string
	// Indirect components are not the image's own dependencies but those
	// of other extras (the operator image a catalog's bundle pins).
	Indirect bool
	// DependsOn lists the bom-refs of other extras this one depends on.
	DependsOn []string
}

// Tool names the program that wrote the document.
type Tool struct {
	Name, Version string
}

// Input is what an SBOM is generated from: the subject and exactly one of
// Image and Index (whose platform images are described one by one).
type Input struct {
	Subject Subject
	Image   v1.Image
	Index   v1.ImageIndex
	Extras  []Extra
	Tool    Tool
}

// Generate returns the CycloneDX JSON document of in.
func Generate(in Input) ([]byte, error) {
	if (in.Image == nil) == (in.Index == nil) {
		return nil, fmt.Errorf("sbom: want exactly one of an image and an index")
	}
	g := &generator{modules: map[string]cdx.Component{}, deps: map[string][]string{}}
	subjectRef := ImagePURL(in.Subject.Repository, in.Subject.Digest, "", in.Subject.Version)
	var top []cdx.Component
	if in.Image != nil {
		files, err := g.files(in.Image, "")
		if err != nil {
			return nil, err
		}
		top = files
		g.dependOn(subjectRef, refs(files)...)
	} else {
		images, err := g.platformImages(in.Index, in.Subject.Repository, subjectRef)
		if err != nil {
			return nil, err
		}
		top = images
	}
	extras, err := g.extras(in.Extras, subjectRef)
	if err != nil {
		return nil, err
	}
	top = append(top, extras...)
	top = append(top, g.sortedModules()...)

	bom := cdx.NewBOM()
	bom.Metadata = metadata(in, subjectRef)
	bom.Components = &top
	bom.Dependencies = g.dependencies()
	var buf bytes.Buffer
	if err := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON).SetPretty(true).EncodeVersion(bom, cdx.SpecVersion1_6); err != nil {
		return nil, fmt.Errorf("sbom: encoding: %w", err)
	}
	return buf.Bytes(), nil
}

// platformImages describes the platform images of an index, each a
// container component holding its files, which the subject depends on.
func (g *generator) platformImages(index v1.ImageIndex, repository, subjectRef string) ([]cdx.Component, error) {
	im, err := index.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("sbom: reading the index: %w", err)
	}
	var out []cdx.Component
	for _, d := range im.Manifests {
		if d.Platform == nil {
			return nil, fmt.Errorf("sbom: index entry %s has no platform", d.Digest)
		}
		img, err := index.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("sbom: reading the %s image: %w", d.Platform, err)
		}
		platform := d.Platform.String()
		files, err := g.files(img, platform)
		if err != nil {
			return nil, err
		}
		c := cdx.Component{
			BOMRef:     ImagePURL(repository, d.Digest, platform, ""),
			Type:       cdx.ComponentTypeContainer,
			Name:       repository,
			Version:    d.Digest.String(),
			Hashes:     &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: d.Digest.Hex}},
			PackageURL: ImagePURL(repository, d.Digest, platform, ""),
			Properties: &[]cdx.Property{{Name: "isctl:platform", Value: platform}},
			Components: &files,
		}
		out = append(out, c)
		g.dependOn(subjectRef, c.BOMRef)
		g.dependOn(c.BOMRef, refs(files)...)
	}
	return out, nil
}

// extras returns the extra components, recording their dependencies: on
// each other, and of the subject or of the files that contain them.
func (g *generator) extras(extras []Extra, subjectRef string) ([]cdx.Component, error) {
	var out []cdx.Component
	for _, e := range extras {
		if e.Component.BOMRef == "" {
			return nil, fmt.Errorf("sbom: extra component %q has no bom-ref", e.Component.Name)
		}
		out = append(out, e.Component)
		if len(e.DependsOn) > 0 {
			g.dependOn(e.Component.BOMRef, e.DependsOn...)
		}
		if e.Indirect {
			continue
		}
		if e.In == "" {
			g.dependOn(subjectRef, e.Component.BOMRef)
			continue
		}
		containers := g.byPath[e.In]
		if len(containers) == 0 {
			return nil, fmt.Errorf("sbom: %s is in %s, which the image does not hold", e.Component.Name, e.In)
		}
		for _, ref := range containers {
			g.dependOn(ref, e.Component.BOMRef)
		}
	}
	return out, nil
}

// sortedModules returns the Go modules of every binary, by bom-ref.
func (g *generator) sortedModules() []cdx.Component {
	var keys []string
	for ref := range g.modules {
		keys = append(keys, ref)
	}
	sort.Strings(keys)
	var out []cdx.Component
	for _, ref := range keys {
		out = append(out, g.modules[ref])
	}
	return out
}

// metadata names the subject, the tool and the build lifecycle.
func metadata(in Input, subjectRef string) *cdx.Metadata {
	return &cdx.Metadata{
		Lifecycles: &[]cdx.Lifecycle{{Phase: cdx.LifecyclePhaseBuild}},
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{
			Type: cdx.ComponentTypeApplication, Name: in.Tool.Name, Version: in.Tool.Version,
		}}},
		Component: &cdx.Component{
			BOMRef:     subjectRef,
			Type:       cdx.ComponentTypeContainer,
			Name:       in.Subject.Repository,
			Version:    in.Subject.Version,
			Hashes:     &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: in.Subject.Digest.Hex}},
			PackageURL: subjectRef,
		},
	}
}

type generator struct {
	// modules are the Go modules of every binary, by bom-ref (their purl).
	modules map[string]cdx.Component
	deps    map[string][]string
	// byPath maps a file's path to the bom-refs of its components (one per
	// platform).
	byPath map[string][]string
}

func (g *generator) dependOn(ref string, on ...string) {
	g.deps[ref] = append(g.deps[ref], on...)
}

func (g *generator) dependencies() *[]cdx.Dependency {
	var keys []string
	for k := range g.deps {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := []cdx.Dependency{}
	for _, k := range keys {
		on := uniqueSorted(g.deps[k])
		out = append(out, cdx.Dependency{Ref: k, Dependencies: &on})
	}
	return &out
}

// file is a regular file of an image's filesystem.
type file struct {
	path   string
	mode   int64
	sha256 string
	// build is the file's Go build information, if it is a Go binary.
	build *debug.BuildInfo
}

// files lists the regular files of img (platform "" for a single-platform
// image), with Go binaries as applications depending on their modules.
func (g *generator) files(img v1.Image, platform string) ([]cdx.Component, error) {
	fs, err := readFiles(img)
	if err != nil {
		return nil, fmt.Errorf("sbom: reading the files of the %s image: %w", orAll(platform), err)
	}
	if g.byPath == nil {
		g.byPath = map[string][]string{}
	}
	var out []cdx.Component
	for _, f := range fs {
		ref := "file:" + f.path
		if platform != "" {
			ref = "file:" + platform + ":" + f.path
		}
		c := cdx.Component{
			BOMRef: ref,
			Type:   cdx.ComponentTypeFile,
			Name:   f.path,
			Hashes: &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: f.sha256}},
			Properties: &[]cdx.Property{
				{Name: "isctl:file:mode", Value: fmt.Sprintf("%04o", f.mode)},
			},
		}
		if f.build != nil {
			c.Type = cdx.ComponentTypeApplication
			c.Version = f.build.Main.Version
			props := []cdx.Property{
				{Name: "isctl:file:mode", Value: fmt.Sprintf("%04o", f.mode)},
				{Name: "cdx:gomod:binary:name", Value: path.Base(f.path)},
				{Name: "isctl:go:main", Value: f.build.Path},
				{Name: "isctl:go:toolchain", Value: f.build.GoVersion},
			}
			for _, s := range f.build.Settings {
				props = append(props, cdx.Property{Name: "cdx:gomod:build:" + settingName(s.Key), Value: s.Value})
			}
			c.Properties = &props
			g.dependOn(ref, g.goModules(f.build)...)
		}
		g.byPath[f.path] = append(g.byPath[f.path], ref)
		out = append(out, c)
	}
	return out, nil
}

// settingName maps a Go build setting to the cdx:gomod property taxonomy:
// environment variables become env:<NAME>, flags keep their name.
func settingName(key string) string {
	if strings.ToUpper(key) == key && !strings.HasPrefix(key, "-") {
		return "env:" + key
	}
	return strings.TrimPrefix(key, "-")
}

// goModules records the toolchain and modules of a Go binary and returns
// their bom-refs.
func (g *generator) goModules(bi *debug.BuildInfo) []string {
	std := goPURL("stdlib", strings.TrimPrefix(bi.GoVersion, "go"))
	g.modules[std] = cdx.Component{
		BOMRef: std, Type: cdx.ComponentTypeLibrary, Name: "stdlib", Version: bi.GoVersion, PackageURL: std,
		Properties: &[]cdx.Property{{Name: "isctl:go:toolchain", Value: bi.GoVersion}},
	}
	refs := []string{std}
	for _, m := range bi.Deps {
		mod, replaces := m, ""
		if m.Replace != nil {
			mod, replaces = m.Replace, m.Path+"@"+m.Version
		}
		ref := goPURL(mod.Path, mod.Version)
		c := cdx.Component{BOMRef: ref, Type: cdx.ComponentTypeLibrary, Name: mod.Path, Version: mod.Version, PackageURL: ref}
		var props []cdx.Property
		if mod.Sum != "" {
			props = append(props, cdx.Property{Name: "isctl:go:sum", Value: mod.Sum})
			// go.sum's h1: hash is a SHA-256 (of the module's file list
			// and file hashes, Go's dirhash); SBOM tools record it as such.
			if h, ok := h1Hex(mod.Sum); ok {
				c.Hashes = &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: h}}
			}
		}
		if replaces != "" {
			props = append(props, cdx.Property{Name: "isctl:go:replaces", Value: replaces})
		}
		if len(props) > 0 {
			c.Properties = &props
		}
		g.modules[ref] = c
		refs = append(refs, ref)
	}
	return refs
}

// h1Hex returns the hexadecimal SHA-256 of a go.sum "h1:" hash.
func h1Hex(sum string) (string, bool) {
	b64, ok := strings.CutPrefix(sum, "h1:")
	if !ok {
		return "", false
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != sha256.Size {
		return "", false
	}
	return hex.EncodeToString(raw), true
}

// readFiles returns the regular files of img's filesystem (later layers
// win, whiteouts remove), sorted by path.
func readFiles(img v1.Image) ([]file, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	byPath := map[string]file{}
	for _, l := range layers {
		if err := readLayer(l, byPath); err != nil {
			return nil, err
		}
	}
	out := make([]file, 0, len(byPath))
	for _, f := range byPath {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out, nil
}

func readLayer(l v1.Layer, byPath map[string]file) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := path.Clean("/" + h.Name)
		dir, base := path.Split(p)
		if strings.HasPrefix(base, ".wh.") {
			if base == ".wh..wh..opq" {
				for k := range byPath {
					if strings.HasPrefix(k, dir) {
						delete(byPath, k)
					}
				}
			} else {
				delete(byPath, path.Join(dir, strings.TrimPrefix(base, ".wh.")))
			}
			continue
		}
		if h.Typeflag != tar.TypeReg {
			delete(byPath, p)
			continue
		}
		f, err := readEntry(tr, h, p)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		byPath[p] = f
	}
}

// readEntry hashes a file and, if it is an executable ELF file, reads its
// Go build information.
func readEntry(r io.Reader, h *tar.Header, p string) (file, error) {
	f := file{path: p, mode: h.Mode & 0o7777}
	sum := sha256.New()
	head := make([]byte, 4)
	n, err := io.ReadFull(r, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return f, err
	}
	head = head[:n]
	sum.Write(head)
	if string(head) != "\x7fELF" || h.Size > maxBinary {
		if _, err := io.Copy(sum, r); err != nil {
			return f, err
		}
		f.sha256 = hex.EncodeToString(sum.Sum(nil))
		return f, nil
	}
	data := make([]byte, 0, h.Size)
	data = append(data, head...)
	buf := bytes.NewBuffer(data)
	if _, err := io.Copy(io.MultiWriter(buf, sum), r); err != nil {
		return f, err
	}
	f.sha256 = hex.EncodeToString(sum.Sum(nil))
	if bi, err := buildinfo.Read(bytes.NewReader(buf.Bytes())); err == nil {
		f.build = bi
	}
	return f, nil
}

// ImagePURL is the package URL of an image by digest (purl type "oci"):
// pkg:oci/<name>@sha256%3A<hex>?arch=...&repository_url=...&tag=...
// platform ("linux/arm64/v8") and tag may be empty.
func ImagePURL(repository string, digest v1.Hash, platform, tag string) string {
	name := strings.ToLower(path.Base(repository))
	q := url.Values{}
	q.Set("repository_url", repository)
	if platform != "" {
		parts := strings.Split(platform, "/")
		if len(parts) > 1 {
			q.Set("arch", parts[1])
		}
		if len(parts) > 2 {
			q.Set("variant", parts[2])
		}
		q.Set("os", parts[0])
	}
	if tag != "" {
		q.Set("tag", tag)
	}
	// url.Values.Encode sorts the qualifiers by key, as purl asks.
	return "pkg:oci/" + name + "@" + purlVersion(digest.String()) + "?" + q.Encode()
}

// goPURL is the package URL of a Go module (purl type "golang").
func goPURL(modulePath, version string) string {
	return "pkg:golang/" + modulePath + "@" + purlVersion(version)
}

// purlVersion percent-encodes a purl version; purl encodes ':' too, which
// URL paths leave alone.
func purlVersion(v string) string {
	return strings.ReplaceAll(url.PathEscape(v), ":", "%3A")
}

// PinnedImage describes an image that a manifest pins by digest (the
// operator image of a bundle, the bundles of a catalog).
func PinnedImage(repository string, digest v1.Hash, name, version string) cdx.Component {
	ref := ImagePURL(repository, digest, "", "")
	c := cdx.Component{
		BOMRef:     ref,
		Type:       cdx.ComponentTypeContainer,
		Name:       repository,
		Version:    digest.String(),
		Hashes:     &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: digest.Hex}},
		PackageURL: ref,
	}
	var props []cdx.Property
	if name != "" {
		props = append(props, cdx.Property{Name: "isctl:olm:bundle", Value: name})
	}
	if version != "" {
		props = append(props, cdx.Property{Name: "isctl:olm:version", Value: version})
	}
	if len(props) > 0 {
		c.Properties = &props
	}
	return c
}

// FilesComponent describes a set of files that travel together inside a
// binary (an embedded Helm chart): one component of type typ with each
// file, and its SHA-256, as a sub-component.
func FilesComponent(typ cdx.ComponentType, ref, name, version, description string, files map[string][]byte) cdx.Component {
	var paths []string
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var subs []cdx.Component
	for _, p := range paths {
		s := sha256.Sum256(files[p])
		subs = append(subs, cdx.Component{
			BOMRef: ref + ":" + p, Type: cdx.ComponentTypeFile, Name: p,
			Hashes: &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: hex.EncodeToString(s[:])}},
		})
	}
	return cdx.Component{BOMRef: ref, Type: typ, Name: name, Version: version, Description: description, Components: &subs}
}

func refs(cs []cdx.Component) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.BOMRef)
	}
	return out
}

func uniqueSorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	j := 0
	for i, v := range out {
		if i == 0 || v != out[j-1] {
			out[j] = v
			j++
		}
	}
	return out[:j]
}

func orAll(platform string) string {
	if platform == "" {
		return "single-platform"
	}
	return platform
}
