package oci

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Config is everything that goes into an image configuration besides the
// layers. Created is also used as the time of every history entry.
type Config struct {
	Platform   v1.Platform
	Created    time.Time
	User       string
	Entrypoint []string
	// Cmd holds the default arguments of the entrypoint.
	Cmd        []string
	Env        []string
	WorkingDir string
	Labels     map[string]string
}

// LayerSpec is a layer with the history comment recorded for it.
type LayerSpec struct {
	Layer     v1.Layer
	CreatedBy string
}

// Image assembles a single-platform OCI image (OCI manifest and config media
// types) from cfg and layers.
func Image(cfg Config, layers []LayerSpec) (v1.Image, error) {
	created := v1.Time{Time: cfg.Created.UTC()}
	cf := v1.ConfigFile{
		Architecture: cfg.Platform.Architecture,
		OS:           cfg.Platform.OS,
		Variant:      cfg.Platform.Variant,
		Created:      created,
		Config: v1.Config{
			User:       cfg.User,
			Entrypoint: cfg.Entrypoint,
			Cmd:        cfg.Cmd,
			Env:        cfg.Env,
			WorkingDir: cfg.WorkingDir,
			Labels:     cfg.Labels,
		},
		RootFS: v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{}},
	}
	img := &image{layers: map[v1.Hash]v1.Layer{}}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Layers:        []v1.Descriptor{},
	}
	for _, ls := range layers {
		diffID, err := ls.Layer.DiffID()
		if err != nil {
			return nil, fmt.Errorf("reading a layer's diff ID: %w", err)
		}
		d, err := partial.Descriptor(ls.Layer)
		if err != nil {
			return nil, fmt.Errorf("describing a layer: %w", err)
		}
		cf.RootFS.DiffIDs = append(cf.RootFS.DiffIDs, diffID)
		cf.History = append(cf.History, v1.History{Created: created, CreatedBy: ls.CreatedBy})
		m.Layers = append(m.Layers, *d)
		img.layers[d.Digest] = ls.Layer
	}
	rawCfg, err := json.Marshal(cf)
	if err != nil {
		return nil, fmt.Errorf("encoding the image configuration: %w", err)
	}
	m.Config = v1.Descriptor{MediaType: types.OCIConfigJSON, Size: int64(len(rawCfg)), Digest: sha(rawCfg)}
	rawManifest, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding the image manifest: %w", err)
	}
	img.rawConfig, img.rawManifest = rawCfg, rawManifest
	return partial.CompressedToImage(img)
}

func sha(b []byte) v1.Hash {
	s := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(s[:])}
}

type image struct {
	rawConfig, rawManifest []byte
	layers                 map[v1.Hash]v1.Layer
}

func (i *image) RawConfigFile() ([]byte, error)      { return i.rawConfig, nil }
func (i *image) RawManifest() ([]byte, error)        { return i.rawManifest, nil }
func (i *image) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (i *image) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if l, ok := i.layers[h]; ok {
		return l, nil
	}
	if h == sha(i.rawConfig) {
		return partial.ConfigLayer(i)
	}
	return nil, fmt.Errorf("image has no blob %s", h)
}

// Index assembles an OCI image index of images, each described by the
// platform of its configuration, ordered as given, with annotations.
func Index(images []v1.Image, annotations map[string]string) (v1.ImageIndex, error) {
	var adds []mutate.IndexAddendum
	for _, img := range images {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, fmt.Errorf("reading an image's configuration: %w", err)
		}
		p := cf.Platform()
		if p == nil {
			return nil, fmt.Errorf("image without platform in an index")
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p}})
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	idx = mutate.AppendManifests(idx, adds...)
	if len(annotations) > 0 {
		idx = mutate.Annotations(idx, annotations).(v1.ImageIndex)
	}
	return idx, nil
}

// Labels returns a copy of the union of the label maps (later maps win).
func Labels(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}
