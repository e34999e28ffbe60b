package push

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/titanml/inference-stack-operator/internal/build"
	"github.com/titanml/inference-stack-operator/internal/oci"
)

// Outputs pushes the named images of the build in out (out/images/...), in
// the order given (operator, bundle, catalog). Each is pushed by digest and
// tagged with its version. Before the catalog, every bundle it references
// must exist in its registry; otherwise nothing more is pushed.
func Outputs(ctx context.Context, out string, names []string, o Options) ([]oci.Digest, error) {
	o = o.withDefaults()
	refs, err := build.ReadDigests(out)
	if err != nil {
		return nil, fmt.Errorf("reading the build's digests: %w", err)
	}
	// Open every layout first, so that a broken output pushes nothing.
	for _, n := range names {
		top, err := oci.ReadLayout(filepath.Join(out, "images", n))
		if err != nil {
			return nil, fmt.Errorf("reading the %s image: %w", n, err)
		}
		if top.Descriptor.Digest.String() != refs[n].Digest {
			return nil, fmt.Errorf("%s: digests.txt says %s but the layout holds %s; rebuild with `make images`", n, refs[n], top.Descriptor.Digest)
		}
	}
	if o.Signer == nil {
		o.logf("not signing: no signing key given (isctl push --sign-key); the images, SBOMs and provenance are pushed without signatures, and `cosign verify` will find none")
	}
	var pushed []oci.Digest
	for _, n := range names {
		if err := (Registry{o}).Publish(ctx, n, filepath.Join(out, "images", n), refs[n]); err != nil {
			return pushed, err
		}
		pushed = append(pushed, refs[n])
	}
	return pushed, nil
}

// Registry publishes images into their registries (Image): by digest,
// with what is attached to them, signed with Options.Signer, then tagged
// with the version their layout names. A catalog is published only when
// every bundle it references is in its registry.
type Registry struct {
	Options
}

var _ build.Publisher = Registry{}

// Publish pushes the image of the layout directory layout to ref.
func (r Registry) Publish(ctx context.Context, name, layout string, ref oci.Digest) error {
	o := r.Options.withDefaults()
	top, err := oci.ReadLayout(layout)
	if err != nil {
		return fmt.Errorf("reading the %s image: %w", name, err)
	}
	if name == build.Catalog {
		img, err := top.Image()
		if err != nil {
			return fmt.Errorf("reading the catalog image: %w", err)
		}
		bundles, err := CatalogBundles(ctx, img)
		if err != nil {
			return err
		}
		o.logf("checking that the catalog's %d bundle(s) exist in their registry", len(bundles))
		if err := CheckPresent(ctx, bundles, o); err != nil {
			return err
		}
	}
	return Image(ctx, top, ref, top.Descriptor.Annotations[oci.RefNameAnnotation], o)
}
