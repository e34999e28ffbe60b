package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing/fstest"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/operator-registry/alpha/action/migrations"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"
	semvertemplate "github.com/operator-framework/operator-registry/alpha/template/semver"
	"github.com/operator-framework/operator-registry/pkg/lib/config"
	sigsyaml "sigs.k8s.io/yaml"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/internal/oci"
)

// FBCPath is where the catalog goes inside the catalog image's /configs.
const FBCPath = inferencestack.PackageName + "/catalog.json"

// Current is the bundle being built.
type Current struct {
	// Dir is the bundle directory (manifests/, metadata/).
	Dir     string
	Image   oci.Digest
	Version semver.Version
	// Archetypes lists the channel archetypes the bundle joins when it is
	// not released yet (and so not listed in the template).
	Archetypes []string
}

// Inputs are the sources of the catalog.
type Inputs struct {
	Template []byte
	Released []Release
}

// Precheck validates the inputs that exist before anything is built: the
// template parses strictly, lists only digest references, and every
// reference has a released entry; released entries are consistent. It is
// cheap, so builds run it first and stop before compiling anything.
func Precheck(in Inputs) (*Template, error) {
	t, err := ParseTemplate(in.Template)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, ref := range t.AllRefs() {
		if _, ok := findByImage(in.Released, ref.String()); !ok {
			missing = append(missing, ref.String())
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s lists bundles with no released entry in %s/ (released bundles are never pulled at build time; `make release` writes the entry):\n  - %s",
			TemplatePath, ReleasedDir, strings.Join(missing, "\n  - "))
	}
	return t, nil
}

func findByImage(rs []Release, img string) (Release, bool) {
	for _, r := range rs {
		if r.BundleImage == img {
			return r, true
		}
	}
	return Release{}, false
}

// Result is a rendered, validated catalog.
type Result struct {
	// FBC is the content of FBCPath.
	FBC []byte
	// Config is the rendered catalog.
	Config *declcfg.DeclarativeConfig
	// CurrentEntry is the olm.bundle rendered for the current bundle, in the
	// normalized form it takes in the catalog and in released entries.
	CurrentEntry declcfg.Bundle
	// Released reports whether the current version was already released
	// (and reproduced).
	Released bool
}

// Render renders the catalog. When the current version is already released,
// the current bundle must be byte-for-byte the released one (same digest,
// same rendered entry); otherwise it is added to cur.Archetypes.
func Render(ctx context.Context, in Inputs, cur Current) (*Result, error) {
	if _, err := Precheck(in); err != nil {
		return nil, err
	}
	entry, err := RenderBundleDir(cur.Dir, cur.Image)
	if err != nil {
		return nil, err
	}
	if props, err := property.Parse(entry.Properties); err != nil || len(props.Packages) != 1 || props.Packages[0].Version != cur.Version.String() {
		return nil, fmt.Errorf("bundle directory %s does not describe version %s", cur.Dir, cur.Version)
	}
	res := &Result{CurrentEntry: entry}
	tmpl := in.Template
	if rel, ok := Find(in.Released, cur.Version.String()); ok {
		if rel.BundleImage != cur.Image.String() {
			return nil, fmt.Errorf("two bundles with version %s: %s records %s, but this build produced %s.\n"+
				"A released version is immutable: bump VERSION for a new release, or rebuild the release commit %s to reproduce it",
				cur.Version, rel.File, rel.BundleImage, cur.Image, rel.Revision)
		}
		a, _ := json.Marshal(rel.Bundle)
		b, _ := json.Marshal(entry)
		if !bytes.Equal(a, b) {
			return nil, fmt.Errorf("the bundle of version %s has its released digest but renders differently from %s; was the entry edited by hand?", cur.Version, rel.File)
		}
		res.Released = true
	} else {
		for _, r := range in.Released {
			if r.BundleImage == cur.Image.String() {
				return nil, fmt.Errorf("bundle %s is already released as version %s", cur.Image, r.Version)
			}
		}
		if tmpl, err = AddBundle(in.Template, cur.Image, cur.Archetypes); err != nil {
			return nil, err
		}
	}

	renderer := func(_ context.Context, ref string) (*declcfg.DeclarativeConfig, error) {
		if ref == cur.Image.String() {
			return &declcfg.DeclarativeConfig{Bundles: []declcfg.Bundle{withCSVJSON(entry)}}, nil
		}
		rel, ok := findByImage(in.Released, ref)
		if !ok {
			return nil, fmt.Errorf("no released entry for %s", ref)
		}
		if rel.Bundle.Image != ref {
			return nil, fmt.Errorf("%s: bundle image %s does not match %s", rel.File, rel.Bundle.Image, ref)
		}
		return &declcfg.DeclarativeConfig{Bundles: []declcfg.Bundle{withCSVJSON(rel.Bundle)}}, nil
	}
	f := semvertemplate.Factory{}
	cfg, err := f.CreateTemplate(renderer).Render(ctx, bytes.NewReader(tmpl))
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", TemplatePath, err)
	}
	var buf bytes.Buffer
	if err := declcfg.WriteJSON(*cfg, &buf); err != nil {
		return nil, fmt.Errorf("encoding the catalog: %w", err)
	}
	if err := Validate(ctx, buf.Bytes()); err != nil {
		return nil, err
	}
	res.FBC, res.Config = buf.Bytes(), cfg
	return res, nil
}

// Validate runs the checks of `opm validate` on an FBC document.
func Validate(ctx context.Context, fbc []byte) error {
	fsys := fstest.MapFS{FBCPath: &fstest.MapFile{Data: fbc, Mode: 0o644}}
	if err := config.Validate(ctx, fsys); err != nil {
		return fmt.Errorf("the rendered catalog is invalid (opm validate): %w", err)
	}
	return nil
}

// RenderBundleDir renders the olm.bundle entry of the bundle directory dir,
// referenced as ref, the way `opm render <dir>` does (see renderBundle),
// migrated to olm.csv.metadata, and normalized through its serialized form.
func RenderBundleDir(dir string, ref oci.Digest) (declcfg.Bundle, error) {
	b, err := renderBundle(dir, ref.String())
	if err != nil {
		return declcfg.Bundle{}, fmt.Errorf("render bundle directory %s: %w", dir, err)
	}
	mig, err := migrations.NewMigrations(csvMetadataMigration)
	if err != nil {
		return declcfg.Bundle{}, fmt.Errorf("render bundle directory: %w", err)
	}
	cfg := &declcfg.DeclarativeConfig{Bundles: []declcfg.Bundle{*b}}
	if err := mig.Migrate(cfg); err != nil {
		return declcfg.Bundle{}, fmt.Errorf("render bundle directory %s: migrate: %w", dir, err)
	}
	if len(cfg.Bundles) != 1 {
		return declcfg.Bundle{}, fmt.Errorf("render bundle directory: got %d bundles, want 1", len(cfg.Bundles))
	}
	return normalize(cfg.Bundles[0])
}

// normalize round-trips b through the YAML form released entries are stored
// in, so that a freshly rendered entry and a stored one are identical.
func normalize(b declcfg.Bundle) (declcfg.Bundle, error) {
	r := Release{Bundle: b}
	data, err := r.Marshal()
	if err != nil {
		return declcfg.Bundle{}, err
	}
	var back Release
	if err := sigsyaml.Unmarshal(data, &back); err != nil {
		return declcfg.Bundle{}, fmt.Errorf("normalizing the bundle entry: %w", err)
	}
	return back.Bundle, nil
}

// withCSVJSON restores the in-memory CSV the semver template reads the
// package description from (declcfg keeps it out of the serialized form).
func withCSVJSON(b declcfg.Bundle) declcfg.Bundle {
	props, err := property.Parse(b.Properties)
	if err != nil || len(props.CSVMetadatas) == 0 {
		return b
	}
	spec := map[string]any{}
	if d := props.CSVMetadatas[0].Description; d != "" {
		spec["description"] = d
	}
	raw, err := json.Marshal(map[string]any{"spec": spec})
	if err == nil {
		b.CsvJSON = string(raw)
	}
	return b
}
