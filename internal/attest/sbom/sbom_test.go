package sbom

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/titanml/inference-stack-operator/internal/oci"
)

// goBinary builds testdata/gobinary, a real Go binary with a module
// dependency (test binaries carry no module list), and returns it with its
// build information.
func goBinary(t *testing.T) ([]byte, *debug.BuildInfo) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build a Go binary with")
	}
	if _, err := os.Stat("../../../go.mod"); err != nil {
		t.Skip("not run from the module's source tree (Bazel runs tests in their runfiles)")
	}
	out := filepath.Join(t.TempDir(), "gobinary")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./testdata/gobinary")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	bi, err := buildinfo.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data, bi
}

func image(t *testing.T, arch string, entries ...oci.Entry) v1.Image {
	t.Helper()
	var specs []oci.LayerSpec
	for _, e := range entries {
		l, err := oci.LayerCache{}.Layer([]oci.Entry{e}, time.Unix(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, oci.LayerSpec{Layer: l})
	}
	img, err := oci.Image(oci.Config{Platform: v1.Platform{OS: "linux", Architecture: arch}, Created: time.Unix(0, 0)}, specs)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func decode(t *testing.T, doc []byte) *cdx.BOM {
	t.Helper()
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(bytes.NewReader(doc), cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		t.Fatalf("not CycloneDX JSON: %v\n%s", err, doc)
	}
	return &bom
}

func walk(cs *[]cdx.Component, f func(cdx.Component)) {
	if cs == nil {
		return
	}
	for _, c := range *cs {
		f(c)
		walk(c.Components, f)
	}
}

func TestOperatorIndexSBOM(t *testing.T) {
	bin, bi := goBinary(t)
	passwd := []byte("nonroot:x:65532:65532::/home/nonroot:/sbin/nologin\n")
	mk := func(arch string) v1.Image {
		return image(t, arch, oci.File("etc/passwd", 0o644, passwd), oci.File("operator", 0o755, bin))
	}
	idx, err := oci.Index([]v1.Image{mk("amd64"), mk("arm64")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	digest, _ := idx.Digest()
	chart := FilesComponent(cdx.ComponentTypeApplication, "helm-chart:inference-stack", "inference-stack", "1.1.0", "chart",
		map[string][]byte{"Chart.yaml": []byte("name: inference-stack\n"), "templates/a.yaml": []byte("a")})
	in := Input{
		Subject: Subject{Repository: "registry.example.com/tytn/operator", Digest: digest, Version: "0.1.0"},
		Index:   idx,
		Extras:  []Extra{{Component: chart, In: "/operator"}},
		Tool:    Tool{Name: "isctl", Version: "test"},
	}
	doc, err := Generate(in)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Generate(in)
	if err != nil || !bytes.Equal(doc, again) {
		t.Fatalf("not deterministic (%v)", err)
	}
	for _, s := range []string{`"timestamp"`, `"serialNumber"`} {
		if bytes.Contains(doc, []byte(s)) {
			t.Errorf("the document has a %s", s)
		}
	}
	bom := decode(t, doc)
	if bom.SpecVersion != cdx.SpecVersion1_6 || bom.Metadata.Component.Version != "0.1.0" ||
		!strings.HasPrefix(bom.Metadata.Component.PackageURL, "pkg:oci/operator@sha256%3A"+digest.Hex+"?") ||
		!strings.Contains(bom.Metadata.Component.PackageURL, "repository_url=registry.example.com%2Ftytn%2Foperator") {
		t.Fatalf("metadata %+v", bom.Metadata.Component)
	}

	byRef := map[string]cdx.Component{}
	walk(bom.Components, func(c cdx.Component) {
		if _, dup := byRef[c.BOMRef]; dup {
			t.Errorf("bom-ref %s twice", c.BOMRef)
		}
		byRef[c.BOMRef] = c
	})
	binSum := sha256.Sum256(bin)
	for _, p := range []string{"linux/amd64", "linux/arm64"} {
		c, ok := byRef["file:"+p+":/operator"]
		if !ok || c.Type != cdx.ComponentTypeApplication || (*c.Hashes)[0].Value != hex.EncodeToString(binSum[:]) {
			t.Fatalf("%s binary: %+v", p, c)
		}
		if _, ok := byRef["file:"+p+":/etc/passwd"]; !ok {
			t.Errorf("%s: no /etc/passwd", p)
		}
	}
	// The modules are this binary's, with go.sum's hash.
	found := 0
	for _, m := range bi.Deps {
		if m.Replace != nil {
			continue
		}
		c, ok := byRef["pkg:golang/"+m.Path+"@"+m.Version]
		if !ok {
			t.Errorf("module %s@%s missing", m.Path, m.Version)
			continue
		}
		found++
		want, _ := h1Hex(m.Sum)
		if c.Hashes == nil || (*c.Hashes)[0].Value != want || want == "" {
			t.Errorf("module %s hash %+v, want %s", m.Path, c.Hashes, want)
		}
	}
	if found == 0 {
		t.Fatal("no module found")
	}
	if c, ok := byRef["pkg:golang/stdlib@"+strings.TrimPrefix(bi.GoVersion, "go")]; !ok || c.Version != bi.GoVersion {
		t.Errorf("stdlib %+v", c)
	}
	// Dependencies: image -> platforms -> files; binary -> modules and chart.
	deps := map[string][]string{}
	for _, d := range *bom.Dependencies {
		deps[d.Ref] = *d.Dependencies
		for _, on := range *d.Dependencies {
			if _, ok := byRef[on]; !ok {
				t.Errorf("dependency on unknown %s", on)
			}
		}
	}
	if len(deps[bom.Metadata.Component.BOMRef]) != 2 {
		t.Errorf("image dependencies %v", deps[bom.Metadata.Component.BOMRef])
	}
	binDeps := strings.Join(deps["file:linux/arm64:/operator"], " ")
	if !strings.Contains(binDeps, "helm-chart:inference-stack") || !strings.Contains(binDeps, "pkg:golang/github.com/CycloneDX/cyclonedx-go@v") {
		t.Errorf("binary dependencies %s", binDeps)
	}
	if c := byRef["helm-chart:inference-stack:templates/a.yaml"]; c.Hashes == nil {
		t.Errorf("chart file %+v", c)
	}
}

func TestSingleImageSBOMWithAPinnedImage(t *testing.T) {
	img := image(t, "amd64", oci.File("manifests/csv.yaml", 0o644, []byte("kind: ClusterServiceVersion\n")))
	d, _ := img.Digest()
	var op v1.Hash
	op.Algorithm, op.Hex = "sha256", strings.Repeat("ab", 32)
	doc, err := Generate(Input{
		Subject: Subject{Repository: "registry.example.com/tytn/operator-bundle", Digest: d, Version: "0.1.0"},
		Image:   img,
		Extras:  []Extra{{Component: PinnedImage("registry.example.com/tytn/operator", op, "", "")}},
		Tool:    Tool{Name: "isctl"},
	})
	if err != nil {
		t.Fatal(err)
	}
	bom := decode(t, doc)
	var names []string
	walk(bom.Components, func(c cdx.Component) { names = append(names, c.Name) })
	if strings.Join(names, ",") != "/manifests/csv.yaml,registry.example.com/tytn/operator" {
		t.Fatalf("components %v", names)
	}
	deps := (*bom.Dependencies)[0]
	if deps.Ref != bom.Metadata.Component.BOMRef || len(*deps.Dependencies) != 2 {
		t.Fatalf("dependencies %+v", *bom.Dependencies)
	}

	// An extra inside a file the image does not hold is an error.
	if _, err := Generate(Input{Subject: Subject{Repository: "r/x", Digest: d}, Image: img,
		Extras: []Extra{{Component: cdx.Component{BOMRef: "x", Name: "x"}, In: "/operator"}}}); err == nil || !strings.Contains(err.Error(), "does not hold") {
		t.Fatalf("got %v", err)
	}
}

func TestImagePURL(t *testing.T) {
	h := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}
	got := ImagePURL("docker.io/tytn/Operator", h, "linux/arm64/v8", "0.1.0")
	want := "pkg:oci/operator@sha256%3A" + h.Hex + "?arch=arm64&os=linux&repository_url=docker.io%2Ftytn%2FOperator&tag=0.1.0&variant=v8"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
