package build

// Publishing a built image: into an OCI layout directory (Layout, what a
// Bazel image action outputs), or into a registry (push.Registry, what
// `isctl push` and a release do).

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/titanml/inference-stack-operator/internal/oci"
)

// A Publisher publishes a built image, given as the OCI layout directory
// the build wrote (the image with its SBOM and provenance, when attached)
// and its reference.
type Publisher interface {
	Publish(ctx context.Context, name, layout string, ref oci.Digest) error
}

// Layout publishes an image as a copy of its layout in Dir, which must be
// absent or empty (Bazel creates declared output directories empty).
type Layout struct {
	Dir string
}

// Publish copies the layout into l.Dir, file by file: the bytes, hence the
// digests, are the build's.
func (l Layout) Publish(_ context.Context, name, layout string, ref oci.Digest) error {
	top, err := oci.ReadLayout(layout)
	if err != nil {
		return fmt.Errorf("reading the %s image: %w", name, err)
	}
	if top.Descriptor.Digest.String() != ref.Digest {
		return fmt.Errorf("%s: the layout holds %s, not %s", name, top.Descriptor.Digest, ref)
	}
	if ents, err := os.ReadDir(l.Dir); err == nil && len(ents) > 0 {
		return fmt.Errorf("%s is not empty", l.Dir)
	}
	return filepath.WalkDir(layout, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(layout, p)
		if err != nil {
			return err
		}
		target := filepath.Join(l.Dir, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}
