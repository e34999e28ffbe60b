package catalog

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"
	"github.com/operator-framework/operator-registry/pkg/image"
	"github.com/operator-framework/operator-registry/pkg/registry"
)

// csvMetadataMigration is the migration `opm render --migrate-level`
// applies to bundle entries: olm.bundle.object properties become one
// olm.csv.metadata property.
const csvMetadataMigration = "bundle-object-to-csv-metadata"

// renderBundle turns the registry+v1 bundle directory dir into its
// olm.bundle entry with image ref, as operator-registry's action.Render
// does for a bundle directory (renderBundleDirectory and bundleToDeclcfg in
// alpha/action/render.go, v1.73.0), before migrations.
//
// It is written against the lower-level packages action.Render itself
// calls because alpha/action also links every image registry backend, and
// containers/image's signature code then needs cgo (gpgme) unless the
// build sets the containers_image_openpgp tag: with this, the module builds,
// vets and tests with plain Go commands. opm_render_test.go (built with that
// tag) checks that both produce the same entry.
func renderBundle(dir, ref string) (*declcfg.Bundle, error) {
	in, err := registry.NewImageInput(image.SimpleReference(ref), dir)
	if err != nil {
		return nil, fmt.Errorf("read bundle: %w", err)
	}
	b := in.Bundle
	objs, props, err := registry.ObjectsAndPropertiesFromBundle(b)
	if err != nil {
		return nil, fmt.Errorf("get properties for bundle %q: %w", b.Name, err)
	}
	related, err := relatedImages(b)
	if err != nil {
		return nil, fmt.Errorf("get related images for bundle %q: %w", b.Name, err)
	}
	var csvJSON []byte
	for _, obj := range b.Objects {
		if obj.GetKind() == "ClusterServiceVersion" {
			if csvJSON, err = json.Marshal(obj); err != nil {
				return nil, fmt.Errorf("marshal CSV JSON for bundle %q: %w", b.Name, err)
			}
		}
	}
	// opm lists the bundle's objects (and the CSV metadata) after every
	// other property, and related images sorted by reference.
	var others, objects []property.Property
	for _, p := range props {
		switch p.Type {
		case property.TypeBundleObject, property.TypeCSVMetadata:
			objects = append(objects, p)
		default:
			others = append(others, p)
		}
	}
	sort.Slice(related, func(i, j int) bool { return related[i].Image < related[j].Image })
	return &declcfg.Bundle{
		Schema:        declcfg.SchemaBundle,
		Name:          b.Name,
		Package:       b.Package,
		Image:         b.BundleImage,
		Properties:    append(others, objects...),
		RelatedImages: related,
		Objects:       objs,
		CsvJSON:       string(csvJSON),
	}, nil
}

// relatedImages lists the CSV's spec.relatedImages, then the bundle image
// and the operator images (the install strategy's containers) not listed
// there yet, as opm does.
func relatedImages(b *registry.Bundle) ([]declcfg.RelatedImage, error) {
	csv, err := b.ClusterServiceVersion()
	if err != nil {
		return nil, fmt.Errorf("read CSV: %w", err)
	}
	var spec struct {
		RelatedImages []declcfg.RelatedImage `json:"relatedImages"`
	}
	if err := json.Unmarshal(csv.Spec, &spec); err != nil {
		return nil, fmt.Errorf("read CSV spec: %w", err)
	}
	related := spec.RelatedImages
	seen := map[string]bool{}
	for _, ri := range related {
		seen[ri.Image] = true
	}
	if b.BundleImage != "" && !seen[b.BundleImage] {
		related = append(related, declcfg.RelatedImage{Image: b.BundleImage})
		seen[b.BundleImage] = true
	}
	ops, err := csv.GetOperatorImages()
	if err != nil {
		return nil, fmt.Errorf("read operator images: %w", err)
	}
	// GetOperatorImages returns a set; opm appends in map order and sorts
	// afterwards, so the order here does not matter.
	for img := range ops {
		if !seen[img] {
			related = append(related, declcfg.RelatedImage{Image: img})
			seen[img] = true
		}
	}
	return related, nil
}
