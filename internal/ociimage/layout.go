package ociimage

import (
	"fmt"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// RefNameAnnotation names the top-level manifest in index.json.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// WriteLayout writes an OCI image layout at dir (which must not exist yet)
// holding exactly one top-level manifest: img, or idx when img is nil.
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

// Top is the single top-level manifest of a layout written by WriteLayout.
type Top struct {
	Path       layout.Path
	Descriptor v1.Descriptor
}

// ReadLayout opens the layout at dir and returns its top-level manifest.
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
	if len(m.Manifests) != 1 {
		return Top{}, fmt.Errorf("OCI layout %s: expected one top-level manifest, found %d", dir, len(m.Manifests))
	}
	return Top{Path: p, Descriptor: m.Manifests[0]}, nil
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
