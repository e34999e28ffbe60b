//go:build containers_image_openpgp

package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"text/template"

	"github.com/operator-framework/operator-registry/alpha/action"
	"github.com/operator-framework/operator-registry/alpha/action/migrations"
	"github.com/operator-framework/operator-registry/pkg/image"
)

// TestRenderBundleDirMatchesOPM renders a generated bundle directory with
// operator-registry's own renderer (action.Render, what `opm render` runs)
// and with RenderBundleDir, which avoids alpha/action so that the module
// needs no build tag: the entries must be identical. alpha/action needs the
// containers_image_openpgp tag without cgo, hence this file's constraint
// (`make test` sets it).
func TestRenderBundleDirMatchesOPM(t *testing.T) {
	dir := bundleDir(t, "0.3.1")
	r := ref("docker.io/tytn/operator-bundle", "b0.3.1")

	mig, err := migrations.NewMigrations(csvMetadataMigration)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := template.New("ref").Parse(r.String())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := action.Render{
		Refs:             []string{dir},
		AllowedRefMask:   action.RefBundleDir,
		ImageRefTemplate: tmpl,
		Migrations:       mig,
		Registry:         offline{},
	}.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Bundles) != 1 {
		t.Fatalf("opm rendered %d bundles, want 1", len(cfg.Bundles))
	}
	want, err := normalize(cfg.Bundles[0])
	if err != nil {
		t.Fatal(err)
	}
	got, err := RenderBundleDir(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.MarshalIndent(want, "", "  ")
	b, _ := json.MarshalIndent(got, "", "  ")
	if string(a) != string(b) {
		t.Errorf("RenderBundleDir differs from opm's renderer:\nopm:\n%s\nRenderBundleDir:\n%s", a, b)
	}
	// The raw entries too (CSV JSON and objects, which the serialized form
	// drops), before migration and normalization.
	raw, err := renderBundle(dir, r.String())
	if err != nil {
		t.Fatal(err)
	}
	opmRaw, err := action.Render{Refs: []string{dir}, AllowedRefMask: action.RefBundleDir, ImageRefTemplate: tmpl, Registry: offline{}}.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	a, _ = json.Marshal(opmRaw.Bundles[0])
	b, _ = json.Marshal(raw)
	if string(a) != string(b) || raw.CsvJSON != opmRaw.Bundles[0].CsvJSON {
		t.Errorf("renderBundle differs from opm's renderer before migration:\nopm:\n%s\nrenderBundle:\n%s", a, b)
	}
}

// offline is the image registry given to opm's renderer: a bundle
// directory needs none, so every call is an error.
type offline struct{}

var errOffline = errors.New("offline: images are never pulled")

func (offline) Pull(context.Context, image.Reference) error           { return errOffline }
func (offline) Unpack(context.Context, image.Reference, string) error { return errOffline }
func (offline) Labels(context.Context, image.Reference) (map[string]string, error) {
	return nil, errOffline
}
func (offline) Destroy() error { return nil }
