package oci

import (
	"encoding/json"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// EmptyConfigMediaType is the config of an OCI 1.1 artifact that has no
// configuration: the two bytes "{}" (image-spec's "empty descriptor").
const EmptyConfigMediaType types.MediaType = "application/vnd.oci.empty.v1+json"

// TitleAnnotation names a blob's file, so that tools pulling an artifact
// (oras pull) write it under that name.
const TitleAnnotation = "org.opencontainers.image.title"

var emptyConfig = []byte("{}")

// Blob is one layer of an artifact: a whole document, not a tar.
type Blob struct {
	MediaType   types.MediaType
	Data        []byte
	Annotations map[string]string
}

// Artifact assembles an OCI 1.1 artifact manifest (image-spec's "artifact
// usage" of the image manifest): artifactType names the format, the config
// is the empty descriptor, the blobs are the layers, and subject is the
// image it describes (which makes it a referrer of that image). Nothing in
// it depends on time, so the same inputs give the same digest.
func Artifact(artifactType string, subject v1.Descriptor, blobs []Blob, annotations map[string]string) (v1.Image, error) {
	if artifactType == "" {
		return nil, fmt.Errorf("an artifact needs an artifactType")
	}
	if len(blobs) == 0 {
		return nil, fmt.Errorf("artifact %s without content", artifactType)
	}
	a := &artifact{blobs: map[v1.Hash]v1.Layer{}}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  artifactType,
		Config:        v1.Descriptor{MediaType: EmptyConfigMediaType, Size: int64(len(emptyConfig)), Digest: sha(emptyConfig), Data: emptyConfig},
		// Only what identifies the subject: its annotations and platform
		// belong to the subject's own manifest, and image-spec asks for a
		// plain descriptor here.
		Subject:     &v1.Descriptor{MediaType: subject.MediaType, Size: subject.Size, Digest: subject.Digest},
		Annotations: annotations,
	}
	for _, b := range blobs {
		l := static.NewLayer(b.Data, b.MediaType)
		d, err := partial.Descriptor(l)
		if err != nil {
			return nil, fmt.Errorf("describing a blob of %s: %w", artifactType, err)
		}
		d.Annotations = b.Annotations
		m.Layers = append(m.Layers, *d)
		a.blobs[d.Digest] = l
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding the %s manifest: %w", artifactType, err)
	}
	a.rawManifest = raw
	return partial.CompressedToImage(a)
}

// artifact is an image whose "layers" are documents; see Artifact.
type artifact struct {
	rawManifest []byte
	blobs       map[v1.Hash]v1.Layer
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return emptyConfig, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.rawManifest, nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if l, ok := a.blobs[h]; ok {
		return l, nil
	}
	if h == sha(emptyConfig) {
		return static.NewLayer(emptyConfig, EmptyConfigMediaType), nil
	}
	return nil, fmt.Errorf("artifact has no blob %s", h)
}

// ArtifactBlob returns the single blob of an artifact read from a layout or
// a registry (whose digest the reader verifies), with its manifest.
func ArtifactBlob(img v1.Image) (*v1.Manifest, []byte, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, nil, fmt.Errorf("reading the artifact manifest: %w", err)
	}
	if len(m.Layers) != 1 {
		return nil, nil, fmt.Errorf("artifact %s has %d blobs, want 1", m.ArtifactType, len(m.Layers))
	}
	l, err := img.LayerByDigest(m.Layers[0].Digest)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the %s blob: %w", m.ArtifactType, err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, nil, fmt.Errorf("reading the %s blob: %w", m.ArtifactType, err)
	}
	defer rc.Close()
	data, err := readAllVerified(rc, m.Layers[0])
	if err != nil {
		return nil, nil, fmt.Errorf("reading the %s blob: %w", m.ArtifactType, err)
	}
	return m, data, nil
}

// readAllVerified reads a blob and checks it against its descriptor: an OCI
// layout on disk is not verified by go-containerregistry when read.
func readAllVerified(r io.Reader, d v1.Descriptor) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, d.Size+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != d.Size || sha(data) != d.Digest {
		return nil, fmt.Errorf("blob %s does not match its descriptor (size %d, want %d)", d.Digest, len(data), d.Size)
	}
	return data, nil
}
