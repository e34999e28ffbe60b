package oci

import (
	"encoding/json"
	"fmt"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/partial"
)

// RefNameAnnotation names the top-level manifest in index.json.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// WriteLayout writes an OCI image layout at dir (which must not exist yet)
// holding exactly one top-level manifest: img, or idx when img is nil
// (Attach adds the artifacts that refer to it).
// refName (a tag, for humans) is recorded as its ref.name annotation.
func WriteLayout(dir string, img v1.Image, idx v1.ImageIndex, refName string) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("write layout: %s already exists", dir)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the OCI layout %s: %w", dir, err)
	}
	opts := []layout.Option{}
	if refName != "" {
		opts = append(opts, layout.WithAnnotations(map[string]string{RefNameAnnotation: refName}))
	}
	if img != nil {
		return p.AppendImage(img, opts...)
	}
	return p.AppendIndex(idx, opts...)
}

// Top is the top-level image of a layout written by WriteLayout, with the
// artifacts attached to it by Attach.
type Top struct {
	Path       layout.Path
	Descriptor v1.Descriptor
	// Referrers are the descriptors of the artifacts whose subject is the
	// image (SBOM, provenance), in the order they were attached; each
	// carries its artifactType.
	Referrers []v1.Descriptor
}

// ReadLayout opens the layout at dir and returns its top-level image: the
// one manifest of index.json that is not an artifact, and the artifacts
// that refer to it. Anything else in index.json is an error.
func ReadLayout(dir string) (Top, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return Top{}, fmt.Errorf("open OCI layout %s: %w", dir, err)
	}
	ii, err := p.ImageIndex()
	if err != nil {
		return Top{}, fmt.Errorf("read OCI layout %s: %w", dir, err)
	}
	m, err := ii.IndexManifest()
	if err != nil {
		return Top{}, fmt.Errorf("reading the index of %s: %w", dir, err)
	}
	// go-containerregistry records an artifactType (the config media type)
	// for plain images too, so a referrer is told by its subject.
	var tops, refs []v1.Descriptor
	for _, d := range m.Manifests {
		subject, err := manifestSubject(p, d)
		if err != nil {
			return Top{}, fmt.Errorf("OCI layout %s: %w", dir, err)
		}
		if subject == nil {
			tops = append(tops, d)
		} else {
			refs = append(refs, d)
		}
	}
	if len(tops) != 1 {
		return Top{}, fmt.Errorf("OCI layout %s: expected one top-level image, found %d", dir, len(tops))
	}
	top := Top{Path: p, Descriptor: tops[0], Referrers: refs}
	for _, d := range refs {
		if subject, _ := manifestSubject(p, d); subject.Digest != top.Descriptor.Digest {
			return Top{}, fmt.Errorf("OCI layout %s: artifact %s (%s) does not refer to the image %s", dir, d.Digest, d.ArtifactType, top.Descriptor.Digest)
		}
	}
	return top, nil
}

// manifestSubject reads the subject of the manifest d (nil when it has none).
func manifestSubject(p layout.Path, d v1.Descriptor) (*v1.Descriptor, error) {
	rc, err := p.Blob(d.Digest)
	if err != nil {
		return nil, fmt.Errorf("reading manifest %s: %w", d.Digest, err)
	}
	defer rc.Close()
	var m struct {
		Subject *v1.Descriptor `json:"subject"`
	}
	if err := json.NewDecoder(rc).Decode(&m); err != nil {
		return nil, fmt.Errorf("reading manifest %s: %w", d.Digest, err)
	}
	return m.Subject, nil
}

// Referrer opens one of the artifacts attached to the image.
func (t Top) Referrer(d v1.Descriptor) (v1.Image, error) {
	img, err := t.Path.Image(d.Digest)
	if err != nil {
		return nil, fmt.Errorf("reading artifact %s: %w", d.Digest, err)
	}
	return img, nil
}

// ReferrersOfType returns the attached artifacts of one artifactType.
func (t Top) ReferrersOfType(artifactType string) []v1.Descriptor {
	var out []v1.Descriptor
	for _, d := range t.Referrers {
		if d.ArtifactType == artifactType {
			out = append(out, d)
		}
	}
	return out
}

// Attach writes artifacts into the layout at dir, next to the image they
// refer to (each artifact's subject must be the layout's top-level image),
// and lists them in index.json with their artifactType, as the OCI image
// layout keeps referrers. The image itself, and therefore its digest, is
// untouched. An artifact already listed is not added twice.
func Attach(dir string, artifacts ...v1.Image) error {
	top, err := ReadLayout(dir)
	if err != nil {
		return err
	}
	listed := map[v1.Hash]bool{}
	for _, d := range top.Referrers {
		listed[d.Digest] = true
	}
	for _, a := range artifacts {
		m, err := a.Manifest()
		if err != nil {
			return fmt.Errorf("attach to %s: %w", dir, err)
		}
		if m.Subject == nil || m.Subject.Digest != top.Descriptor.Digest {
			return fmt.Errorf("attach to %s: the %s artifact does not refer to the layout's image %s", dir, m.ArtifactType, top.Descriptor.Digest)
		}
		d, err := partial.Descriptor(a)
		if err != nil {
			return fmt.Errorf("attach to %s: %w", dir, err)
		}
		if listed[d.Digest] {
			continue
		}
		if err := top.Path.WriteImage(a); err != nil {
			return fmt.Errorf("attach %s to %s: %w", m.ArtifactType, dir, err)
		}
		if err := top.Path.AppendDescriptor(v1.Descriptor{MediaType: d.MediaType, Size: d.Size, Digest: d.Digest, ArtifactType: m.ArtifactType}); err != nil {
			return fmt.Errorf("attach %s to %s: %w", m.ArtifactType, dir, err)
		}
		listed[d.Digest] = true
	}
	return nil
}

// Image returns the top-level manifest as an image (it must be one).
func (t Top) Image() (v1.Image, error) {
	if !t.Descriptor.MediaType.IsImage() {
		return nil, fmt.Errorf("%s is a %s, not an image", t.Descriptor.Digest, t.Descriptor.MediaType)
	}
	return t.Path.Image(t.Descriptor.Digest)
}

// Index returns the top-level manifest as an index (it must be one).
func (t Top) Index() (v1.ImageIndex, error) {
	if !t.Descriptor.MediaType.IsIndex() {
		return nil, fmt.Errorf("%s is a %s, not an index", t.Descriptor.Digest, t.Descriptor.MediaType)
	}
	ii, err := t.Path.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("reading the index %s: %w", t.Descriptor.Digest, err)
	}
	return ii.ImageIndex(t.Descriptor.Digest)
}

// PlatformSize is the compressed size of one platform's image: manifest,
// configuration and layers, i.e. what a node downloads.
type PlatformSize struct {
	Platform string
	Bytes    int64
}

// ImageSize returns the compressed size of img.
func ImageSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, fmt.Errorf("reading the image manifest: %w", err)
	}
	raw, err := img.RawManifest()
	if err != nil {
		return 0, fmt.Errorf("reading the image manifest: %w", err)
	}
	n := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}

// Sizes returns the per-platform compressed sizes of the top-level manifest
// of a layout (one entry for a single image).
func (t Top) Sizes() ([]PlatformSize, error) {
	if t.Descriptor.MediaType.IsImage() {
		img, err := t.Image()
		if err != nil {
			return nil, err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, fmt.Errorf("reading an image's configuration: %w", err)
		}
		n, err := ImageSize(img)
		if err != nil {
			return nil, err
		}
		return []PlatformSize{{Platform: cf.Platform().String(), Bytes: n}}, nil
	}
	idx, err := t.Index()
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading the index manifest: %w", err)
	}
	var out []PlatformSize
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("reading image %s: %w", d.Digest, err)
		}
		n, err := ImageSize(img)
		if err != nil {
			return nil, err
		}
		out = append(out, PlatformSize{Platform: d.Platform.String(), Bytes: n})
	}
	return out, nil
}
