package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/operator-registry/alpha/declcfg"

	"github.com/titanml/inference-stack-operator/internal/bundle"
	"github.com/titanml/inference-stack-operator/internal/oci"
)

const repoRoot = "../.."

func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func ref(repo, content string) oci.Digest {
	d, err := oci.ParseDigest(repo + "@" + digestOf(content))
	if err != nil {
		panic(err)
	}
	return d
}

// bundleDir generates the bundle of version v into a directory.
func bundleDir(t *testing.T, v string) string {
	t.Helper()
	base, err := os.ReadFile(filepath.Join(repoRoot, bundle.BaseCSVPath))
	if err != nil {
		t.Fatal(err)
	}
	role, err := os.ReadFile("../bundle/testdata/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := bundle.Generate(bundle.Inputs{BaseCSV: base, RBAC: role}, bundle.Options{
		Version: semver.MustParse(v), OperatorImage: ref("docker.io/tytn/operator", "op"+v).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := b.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// released renders version v as a released entry with image ref r.
func released(t *testing.T, v string, r oci.Digest) Release {
	t.Helper()
	entry, err := RenderBundleDir(bundleDir(t, v), r)
	if err != nil {
		t.Fatal(err)
	}
	rel := Release{
		Version: v, Revision: strings.Repeat("a", 40), GoVersion: "go1.26.8", Platforms: []string{"linux/amd64"},
		OperatorImage: ref("docker.io/tytn/operator", "op"+v).String(), BundleImage: r.String(), Bundle: entry,
		File: filepath.Join("catalog/released", v+".yaml"),
	}
	if err := rel.check(); err != nil {
		t.Fatal(err)
	}
	return rel
}

const emptyTemplate = `# comment kept
Schema: olm.semver
GenerateMajorChannels: true
GenerateMinorChannels: false
Stable:
  Bundles: []
Fast:
  Bundles: []
`

func TestRepositoryTemplateParses(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, TemplatePath))
	if err != nil {
		t.Fatal(err)
	}
	rels, err := LoadReleases(filepath.Join(repoRoot, ReleasedDir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Precheck(Inputs{Template: data, Released: rels}); err != nil {
		t.Fatal(err)
	}
}

func TestParseTemplateRejects(t *testing.T) {
	good := ref("docker.io/tytn/operator-bundle", "b").String()
	for name, c := range map[string]struct{ tmpl, want string }{
		"unknown key":    {"Schema: olm.semver\nGenerateMajorChannels: true\nStabel:\n  Bundles: []\n", "unknown field"},
		"unknown nested": {"Schema: olm.semver\nStable:\n  Bundles:\n  - Image: " + good + "\n    Channel: x\n", "unknown field"},
		"tag":            {"Schema: olm.semver\nStable:\n  Bundles:\n  - Image: docker.io/tytn/operator-bundle:0.1.0\n", "tag reference"},
		"tag and digest": {"Schema: olm.semver\nStable:\n  Bundles:\n  - Image: docker.io/tytn/operator-bundle:0.1.0@" + digestOf("b") + "\n", "carries a tag"},
		"short name":     {"Schema: olm.semver\nFast:\n  Bundles:\n  - Image: tytn/operator-bundle@" + digestOf("b") + "\n", "registry host"},
		"twice":          {"Schema: olm.semver\nFast:\n  Bundles:\n  - Image: " + good + "\n  - Image: " + good + "\n", "listed twice"},
		"schema":         {"Schema: olm.basic\n", "olm.semver"},
	} {
		_, err := ParseTemplate([]byte(c.tmpl))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, c.want)
		}
	}
}

func TestPrecheckMissingReleasedEntry(t *testing.T) {
	r := ref("docker.io/tytn/operator-bundle", "b")
	tmpl, err := AddBundle([]byte(emptyTemplate), r, []string{"stable"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Precheck(Inputs{Template: tmpl})
	if err == nil || !strings.Contains(err.Error(), "no released entry") || !strings.Contains(err.Error(), r.String()) {
		t.Fatalf("got %v", err)
	}
}

func TestAddBundleKeepsCommentsAndIsIdempotent(t *testing.T) {
	r := ref("docker.io/tytn/operator-bundle", "b")
	once, err := AddBundle([]byte(emptyTemplate), r, []string{"stable", "fast", "candidate"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(once), "# comment kept") {
		t.Errorf("comment lost:\n%s", once)
	}
	tmpl, err := ParseTemplate(once)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range Archetypes {
		if len(tmpl.Refs[a]) != 1 || tmpl.Refs[a][0] != r {
			t.Errorf("%s: %v", a, tmpl.Refs[a])
		}
	}
	twice, err := AddBundle(once, r, []string{"stable", "fast"})
	if err != nil {
		t.Fatal(err)
	}
	if string(twice) != string(once) {
		t.Errorf("adding twice changed the template:\n%s\nvs\n%s", once, twice)
	}
}

func TestRenderUnreleasedBundle(t *testing.T) {
	cur := ref("docker.io/tytn/operator-bundle", "cur")
	res, err := Render(context.Background(), Inputs{Template: []byte(emptyTemplate)}, Current{
		Dir: bundleDir(t, "0.1.0"), Image: cur, Version: semver.MustParse("0.1.0"), Archetypes: []string{"stable", "fast"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Released {
		t.Error("reported as released")
	}
	cfg := res.Config
	if len(cfg.Bundles) != 1 || cfg.Bundles[0].Image != cur.String() || cfg.Bundles[0].Name != "inference-stack-operator.v0.1.0" {
		t.Fatalf("bundles %+v", cfg.Bundles)
	}
	var chans []string
	for _, c := range cfg.Channels {
		chans = append(chans, c.Name)
	}
	if strings.Join(chans, ",") != "fast-v0,stable-v0" || cfg.Packages[0].DefaultChannel != "stable-v0" {
		t.Fatalf("channels %v default %s", chans, cfg.Packages[0].DefaultChannel)
	}
	if !strings.Contains(cfg.Packages[0].Description, "InferenceStack") {
		t.Errorf("package description %q", cfg.Packages[0].Description)
	}
	for _, p := range cfg.Bundles[0].Properties {
		if p.Type == "olm.gvk.required" || p.Type == "olm.package.required" || p.Type == "olm.constraint" {
			t.Errorf("dependency property %s", p.Type)
		}
	}
	// Same inputs, same bytes.
	again, err := Render(context.Background(), Inputs{Template: []byte(emptyTemplate)}, Current{
		Dir: bundleDir(t, "0.1.0"), Image: cur, Version: semver.MustParse("0.1.0"), Archetypes: []string{"fast", "stable"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(again.FBC) != string(res.FBC) {
		t.Error("rendering is not deterministic")
	}
}

func TestRenderWithReleasedBundles(t *testing.T) {
	r010 := ref("docker.io/tytn/operator-bundle", "0.1.0")
	r011 := ref("docker.io/tytn/operator-bundle", "0.1.1")
	rels := []Release{released(t, "0.1.0", r010), released(t, "0.1.1", r011)}
	tmpl := []byte(emptyTemplate)
	var err error
	tmpl, err = AddBundle(tmpl, r010, []string{"stable", "fast"})
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err = AddBundle(tmpl, r011, []string{"fast"})
	if err != nil {
		t.Fatal(err)
	}
	cur := ref("docker.io/tytn/operator-bundle", "0.2.0")
	res, err := Render(context.Background(), Inputs{Template: tmpl, Released: rels}, Current{
		Dir: bundleDir(t, "0.2.0"), Image: cur, Version: semver.MustParse("0.2.0"), Archetypes: []string{"fast"},
	})
	if err != nil {
		t.Fatal(err)
	}
	entries := map[string][]declcfg.ChannelEntry{}
	for _, c := range res.Config.Channels {
		entries[c.Name] = c.Entries
	}
	if len(entries["stable-v0"]) != 1 || len(entries["fast-v0"]) != 3 {
		t.Fatalf("channels %+v", entries)
	}
	head := entries["fast-v0"][2]
	if head.Name != "inference-stack-operator.v0.2.0" || head.Replaces != "inference-stack-operator.v0.1.1" {
		t.Errorf("fast-v0 head %+v", head)
	}
	images := map[string]bool{}
	for _, b := range res.Config.Bundles {
		images[b.Image] = true
	}
	for _, r := range []oci.Digest{r010, r011, cur} {
		if !images[r.String()] {
			t.Errorf("bundle %s missing", r)
		}
	}
}

func TestRenderCurrentVersionAlreadyReleased(t *testing.T) {
	r := ref("docker.io/tytn/operator-bundle", "0.1.0")
	rel := released(t, "0.1.0", r)
	tmpl, _ := AddBundle([]byte(emptyTemplate), r, []string{"stable"})
	dir := bundleDir(t, "0.1.0")

	// The release commit rebuilt: same digest, same entry.
	res, err := Render(context.Background(), Inputs{Template: tmpl, Released: []Release{rel}}, Current{Dir: dir, Image: r, Version: semver.MustParse("0.1.0")})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Released || len(res.Config.Bundles) != 1 {
		t.Fatalf("released=%v bundles=%d", res.Released, len(res.Config.Bundles))
	}
	// A different bundle claiming the released version.
	other := ref("docker.io/tytn/operator-bundle", "other")
	_, err = Render(context.Background(), Inputs{Template: tmpl, Released: []Release{rel}}, Current{Dir: dir, Image: other, Version: semver.MustParse("0.1.0"), Archetypes: []string{"fast"}})
	if err == nil || !strings.Contains(err.Error(), "two bundles with version 0.1.0") {
		t.Fatalf("got %v", err)
	}
}

func TestReleasedEntries(t *testing.T) {
	r := ref("docker.io/tytn/operator-bundle", "0.1.0")
	rel := released(t, "0.1.0", r)
	dir := t.TempDir()
	file, err := WriteRelease(dir, rel)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(file) != "0.1.0.yaml" {
		t.Errorf("file %s", file)
	}
	if _, err := WriteRelease(dir, rel); err != nil {
		t.Errorf("rewriting the identical record: %v", err)
	}
	changed := rel
	changed.Revision = strings.Repeat("b", 40)
	if _, err := WriteRelease(dir, changed); err == nil || !strings.Contains(err.Error(), "never rewritten") {
		t.Errorf("overwrite: %v", err)
	}
	rels, err := LoadReleases(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(rels) != 1 {
		t.Fatalf("%d releases", len(rels))
	}
	a, _ := rels[0].Marshal()
	b, _ := rel.Marshal()
	if string(a) != string(b) {
		t.Errorf("record does not round-trip:\n%s\nvs\n%s", a, b)
	}

	// The same version recorded twice.
	data, _ := os.ReadFile(file)
	os.WriteFile(filepath.Join(dir, "0.1.0-copy.yaml"), data, 0o644)
	if _, err := LoadReleases(dir); err == nil || !strings.Contains(err.Error(), "must be named 0.1.0.yaml") {
		t.Errorf("misnamed copy: %v", err)
	}
	os.Remove(filepath.Join(dir, "0.1.0-copy.yaml"))
	other := released(t, "0.1.1", r)
	if _, err := WriteRelease(dir, other); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadReleases(dir); err == nil || !strings.Contains(err.Error(), "recorded twice") {
		t.Errorf("same bundle image for two versions: %v", err)
	}
	// Missing directory: no releases.
	if rels, err := LoadReleases(filepath.Join(dir, "nope")); err != nil || len(rels) != 0 {
		t.Errorf("missing dir: %v %v", rels, err)
	}
}

func TestValidateRejectsBrokenCatalog(t *testing.T) {
	bad := []byte(`{"schema":"olm.package","name":"inference-stack-operator","defaultChannel":"stable-v0"}`)
	if err := Validate(context.Background(), bad); err == nil {
		t.Fatal("a package whose default channel does not exist passed validation")
	}
}
