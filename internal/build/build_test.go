package build

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/internal/attest/provenance"
	"github.com/titanml/inference-stack-operator/internal/attest/sbom"
	"github.com/titanml/inference-stack-operator/internal/build/gobuild"
	"github.com/titanml/inference-stack-operator/internal/bundle"
	"github.com/titanml/inference-stack-operator/internal/catalog"
	"github.com/titanml/inference-stack-operator/internal/oci"
)

const repoRoot = "../.."

// standInTree writes a minimal source tree: the repository's bundle and
// catalog inputs, the RBAC fixture, and a tiny operator main package with
// the real version-stamping variables (so builds take seconds).
func standInTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"go.mod":  "module " + inferencestack.ModulePath + "\n\ngo 1.26\n",
		"VERSION": "0.1.0\n",
		"operator/main.go": `package main

import (
	"fmt"

	"` + inferencestack.ModulePath + `/operator/internal/version"
)

func main() { fmt.Println(version.Version, version.GitCommit) }
`,
		"operator/internal/version/version.go": "package version\n\nvar (\n\tVersion   = \"\"\n\tGitCommit = \"unknown\"\n)\n",
		// Stand-ins for the catalog image's binaries (opm itself is built
		// from the real tree by TestCatalogBinariesServe).
		"opm/main.go":                   "package main\n\nfunc main() { println(\"opm stand-in\") }\n",
		HealthProbePackage + "/main.go": "package main\n\nfunc main() { println(\"probe stand-in\") }\n",
	}
	for p, c := range files {
		write(t, filepath.Join(root, p), []byte(c))
	}
	for dst, src := range map[string]string{
		bundle.BaseCSVPath:      filepath.Join(repoRoot, bundle.BaseCSVPath),
		bundle.OperatorRBACPath: "../bundle/testdata/role.yaml",
		catalog.TemplatePath:    filepath.Join(repoRoot, catalog.TemplatePath),
	} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(root, dst), data)
	}
	return root
}

func write(t *testing.T, p string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func config(root string) Config {
	return Config{Root: root, Repos: ReposFor("registry.example.com/tytn"), Revision: "0123456789abcdef0123456789abcdef01234567", Binaries: &GoBuild{OPMPackage: "./opm"}}
}

func build(t *testing.T, cfg Config) *Result {
	t.Helper()
	var log bytes.Buffer
	cfg.Log = &log
	res, err := Build(context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	return res
}

func layerFiles(t *testing.T, l v1.Layer) map[string]*tar.Header {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = h
	}
}

func readFile(t *testing.T, l v1.Layer, name string) []byte {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s not in layer: %v", name, err)
		}
		if h.Name == name {
			data, _ := io.ReadAll(tr)
			return data
		}
	}
}

func TestBuildProducesTheThreeImages(t *testing.T) {
	root := standInTree(t)
	res := build(t, config(root))
	out := filepath.Join(root, "out")

	digests, err := os.ReadFile(filepath.Join(out, "images", "digests.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(digests)), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "operator registry.example.com/tytn/operator@sha256:") ||
		!strings.HasPrefix(lines[1], "bundle registry.example.com/tytn/operator-bundle@sha256:") ||
		!strings.HasPrefix(lines[2], "catalog registry.example.com/tytn/operator-catalog@sha256:") {
		t.Fatalf("digests.txt:\n%s", digests)
	}

	// Operator: a two-platform index of non-root, shell-less images.
	top, err := oci.ReadLayout(filepath.Join(out, "images", Operator))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := top.Index()
	if err != nil {
		t.Fatal(err)
	}
	im, _ := idx.IndexManifest()
	if len(im.Manifests) != 2 || im.Manifests[0].Platform.Architecture != "amd64" || im.Manifests[1].Platform.Architecture != "arm64" {
		t.Fatalf("index %+v", im.Manifests)
	}
	if im.Annotations["org.opencontainers.image.revision"] != config(root).Revision || top.Descriptor.Annotations[oci.RefNameAnnotation] != "0.1.0" {
		t.Errorf("index annotations %v, layout %v", im.Annotations, top.Descriptor.Annotations)
	}
	for _, md := range im.Manifests {
		img, err := idx.Image(md.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, _ := img.ConfigFile()
		c := cf.Config
		if c.User != "65532:65532" || strings.Join(c.Entrypoint, " ") != "/operator" || cf.Created.Unix() != 0 ||
			c.Labels["org.opencontainers.image.version"] != "0.1.0" || c.Labels["org.opencontainers.image.revision"] != config(root).Revision ||
			c.Labels["org.opencontainers.image.source"] != SourceURL {
			t.Errorf("%s config %+v created %v", md.Platform, c, cf.Created)
		}
		layers, _ := img.Layers()
		files := map[string]*tar.Header{}
		for _, l := range layers {
			for n, h := range layerFiles(t, l) {
				files[n] = h
			}
		}
		var names []string
		for n := range files {
			names = append(names, n)
		}
		sort.Strings(names)
		if got := strings.Join(names, " "); got != "etc/ etc/group etc/passwd home/ home/nonroot/ operator tmp/" {
			t.Errorf("%s files: %s", md.Platform, got)
		}
		if h := files["operator"]; h.Mode != 0o755 || h.Uid != 0 || h.ModTime.Unix() != 0 {
			t.Errorf("operator %+v", h)
		}
		if h := files["home/nonroot/"]; h.Uid != NonRootID || h.Gid != NonRootID {
			t.Errorf("home %+v", h)
		}
		if h := files["tmp/"]; h.Mode != 0o1777 {
			t.Errorf("tmp %+v", h)
		}
		passwd := string(readFile(t, layers[0], "etc/passwd"))
		if !strings.Contains(passwd, "nonroot:x:65532:65532:") {
			t.Errorf("passwd %q", passwd)
		}
		if md.Platform.Architecture == runtime.GOARCH {
			// The binary carries the stamped version and commit.
			bin := filepath.Join(t.TempDir(), "operator")
			write(t, bin, readFile(t, layers[1], "operator"))
			os.Chmod(bin, 0o755)
			outp, err := exec.Command(bin).Output()
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(outp)); got != "0.1.0 "+config(root).Revision {
				t.Errorf("stamped %q", got)
			}
		}
	}

	// Bundle: registry+v1 labels and content, operator pinned by digest.
	btop, _ := oci.ReadLayout(filepath.Join(out, "images", Bundle))
	bimg, err := btop.Image()
	if err != nil {
		t.Fatal(err)
	}
	bcf, _ := bimg.ConfigFile()
	want := map[string]string{
		"operators.operatorframework.io.bundle.mediatype.v1": "registry+v1",
		"operators.operatorframework.io.bundle.manifests.v1": "manifests/",
		"operators.operatorframework.io.bundle.metadata.v1":  "metadata/",
		"operators.operatorframework.io.bundle.package.v1":   "inference-stack-operator",
		"operators.operatorframework.io.bundle.channels.v1":  "stable-v0,fast-v0",
	}
	for k, v := range want {
		if bcf.Config.Labels[k] != v {
			t.Errorf("bundle label %s = %q, want %q", k, bcf.Config.Labels[k], v)
		}
	}
	bl, _ := bimg.Layers()
	csv := string(readFile(t, bl[0], "manifests/inference-stack-operator.clusterserviceversion.yaml"))
	if !strings.Contains(csv, "image: "+res.Image(Operator).Ref.String()) {
		t.Error("the CSV does not pin the operator image by digest")
	}
	if _, ok := layerFiles(t, bl[0])["metadata/annotations.yaml"]; !ok {
		t.Error("no metadata/annotations.yaml")
	}

	// Catalog: /configs with the label, the bundle pinned by digest; opm
	// serving it as a non-root user, the probe on PATH.
	ctop, _ := oci.ReadLayout(filepath.Join(out, "images", Catalog))
	cimg, _ := ctop.Image()
	ccf, _ := cimg.ConfigFile()
	if ccf.Config.Labels[CatalogConfigsLabel] != "/configs" {
		t.Errorf("catalog labels %v", ccf.Config.Labels)
	}
	c := ccf.Config
	if c.User != "65532:65532" || strings.Join(c.Entrypoint, " ") != "/bin/opm" || strings.Join(c.Cmd, " ") != "serve /configs" ||
		!slices.Contains(c.Env, "PATH=/bin") || ccf.Created.Unix() != 0 || ccf.Architecture != "amd64" || ccf.OS != "linux" {
		t.Errorf("catalog config %+v (%s/%s, created %v)", c, ccf.OS, ccf.Architecture, ccf.Created)
	}
	cl, _ := cimg.Layers()
	if len(cl) != 3 {
		t.Fatalf("catalog has %d layers, want base, binaries, configs", len(cl))
	}
	if base, _ := cl[0].Digest(); base != firstLayer(t, idx) {
		t.Errorf("the catalog's base layer %s is not the operator's", base)
	}
	bins := layerFiles(t, cl[1])
	for _, n := range []string{"bin/opm", "bin/grpc_health_probe"} {
		if h := bins[n]; h == nil || h.Mode != 0o755 || h.Uid != 0 || h.ModTime.Unix() != 0 {
			t.Errorf("%s: %+v", n, h)
		}
	}
	if h := layerFiles(t, cl[2]); len(h) != 3 { // configs/, its package dir and catalog.json
		t.Errorf("the configs layer holds more than the catalog: %v", h)
	}
	for _, n := range []string{"opm", "grpc_health_probe"} {
		if _, err := os.Stat(filepath.Join(out, "build", "linux_amd64", n)); err != nil {
			t.Errorf("out/build: %v", err)
		}
	}
	fbc := readFile(t, cl[2], "configs/inference-stack-operator/catalog.json")
	if !bytes.Contains(fbc, []byte(`"image": "`+res.Image(Bundle).Ref.String()+`"`)) {
		t.Errorf("the catalog does not reference the bundle by digest:\n%s", fbc)
	}
	onDisk, err := os.ReadFile(filepath.Join(out, "catalog", "configs", "inference-stack-operator", "catalog.json"))
	if err != nil || !bytes.Equal(onDisk, fbc) {
		t.Errorf("out/catalog differs from the image: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "bundle", "metadata", "annotations.yaml")); err != nil {
		t.Error(err)
	}
	if e := res.CurrentEntry; e.BundleImage != res.Image(Bundle).Ref.String() || e.OperatorImage != res.Image(Operator).Ref.String() {
		t.Errorf("current entry %+v", e)
	}
}

// firstLayer is the digest of the first layer of the index's first image.
func firstLayer(t *testing.T, idx v1.ImageIndex) v1.Hash {
	t.Helper()
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	d, err := ls[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// snapshot hashes every file under dir (except the layer cache).
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() && rel == "cache" {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			data, _ := os.ReadFile(p)
			sum := sha256.Sum256(data)
			out[rel] = hex.EncodeToString(sum[:])
		} else {
			out[rel+"/"] = ""
		}
		return nil
	})
	return out
}

func TestRebuildsAndSourceDateEpoch(t *testing.T) {
	root := standInTree(t)
	first := build(t, config(root))
	again := build(t, config(root))
	for _, n := range Names {
		if first.Image(n).Ref != again.Image(n).Ref {
			t.Errorf("%s: rebuild gave %s, then %s", n, first.Image(n).Ref, again.Image(n).Ref)
		}
	}
	t.Setenv("SOURCE_DATE_EPOCH", "86400")
	later := build(t, config(root))
	if later.SourceDateEpoch != 86400 || later.Image(Operator).Ref == first.Image(Operator).Ref {
		t.Fatalf("SOURCE_DATE_EPOCH ignored: %+v", later)
	}
	top, _ := oci.ReadLayout(filepath.Join(root, "out", "images", Catalog))
	img, _ := top.Image()
	cf, _ := img.ConfigFile()
	if cf.Created.Unix() != 86400 {
		t.Errorf("created %v", cf.Created)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "yesterday")
	if _, err := Build(context.Background(), config(root)); err == nil || !strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
		t.Errorf("bad SOURCE_DATE_EPOCH: %v", err)
	}
}

// TestBadInputsWriteNothing: each bad input stops the build with a clear
// message before anything is compiled or written, and a previous build's
// outputs stay as they were.
func TestBadInputsWriteNothing(t *testing.T) {
	good := standInTree(t)
	build(t, config(good))
	goodRel := func(t *testing.T, root, version string, image string) {
		// A released entry whose bundle is image, for version.
		r := catalog.Release{
			Version: version, Revision: strings.Repeat("c", 40), GoVersion: "go1.26.8", Platforms: []string{"linux/amd64", "linux/arm64"},
			OperatorImage: "registry.example.com/tytn/operator@sha256:" + strings.Repeat("1", 64),
			BundleImage:   image,
		}
		data, _ := os.ReadFile(filepath.Join(good, "out", "catalog", "configs", "inference-stack-operator", "catalog.json"))
		for _, doc := range strings.Split(string(data), "\n}\n") {
			if strings.Contains(doc, `"schema": "olm.bundle"`) {
				if err := yaml.Unmarshal([]byte(doc+"\n}"), &r.Bundle); err != nil {
					t.Fatal(err)
				}
			}
		}
		r.Bundle.Image = image
		r.Bundle.Name = inferencestack.PackageName + ".v" + version
		for i, p := range r.Bundle.Properties {
			if p.Type == "olm.package" {
				r.Bundle.Properties[i].Value = []byte(`{"packageName":"inference-stack-operator","version":"` + version + `"}`)
			}
		}
		if _, err := catalog.WriteRelease(filepath.Join(root, catalog.ReleasedDir), r); err != nil {
			t.Fatal(err)
		}
	}
	bundleRef := func(content string) string {
		sum := sha256.Sum256([]byte(content))
		return "registry.example.com/tytn/operator-bundle@sha256:" + hex.EncodeToString(sum[:])
	}
	addToTemplate := func(t *testing.T, root, line string) {
		p := filepath.Join(root, catalog.TemplatePath)
		data, _ := os.ReadFile(p)
		write(t, p, []byte(strings.Replace(string(data), "Stable:\n  Bundles: []", "Stable:\n  Bundles:\n  - Image: "+line, 1)))
	}
	cases := map[string]struct {
		edit func(t *testing.T, root string)
		want string
	}{
		"invalid VERSION": {func(t *testing.T, root string) { write(t, filepath.Join(root, "VERSION"), []byte("v0.1\n")) }, "invalid VERSION"},
		"unknown key": {func(t *testing.T, root string) {
			p := filepath.Join(root, catalog.TemplatePath)
			data, _ := os.ReadFile(p)
			write(t, p, append(data, "Unstable:\n  Bundles: []\n"...))
		}, "unknown field"},
		"tag reference": {func(t *testing.T, root string) {
			addToTemplate(t, root, "docker.io/tytn/operator-bundle:0.1.0")
		}, "tag reference"},
		"missing released entry": {func(t *testing.T, root string) {
			addToTemplate(t, root, bundleRef("0.0.9"))
		}, "no released entry"},
		"two released bundles with one version": {func(t *testing.T, root string) {
			goodRel(t, root, "0.0.9", bundleRef("a"))
			data, _ := os.ReadFile(filepath.Join(root, catalog.ReleasedDir, "0.0.9.yaml"))
			data = bytes.ReplaceAll(data, []byte(bundleRef("a")), []byte(bundleRef("b")))
			write(t, filepath.Join(root, catalog.ReleasedDir, "0.0.9-again.yaml"), data)
		}, "0.0.9"},
		"VERSION released as another bundle": {func(t *testing.T, root string) {
			goodRel(t, root, "0.1.0", bundleRef("released"))
			addToTemplate(t, root, bundleRef("released"))
		}, "VERSION 0.1.0 is released"},
		"released from other repositories": {func(t *testing.T, root string) {
			goodRel(t, root, "0.1.0", strings.Replace(bundleRef("x"), "registry.example.com", "quay.io", 1))
		}, "same repositories"},
		"wildcard RBAC": {func(t *testing.T, root string) {
			write(t, filepath.Join(root, bundle.OperatorRBACPath), []byte("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: x}\nrules:\n- apiGroups: ['*']\n  resources: [pods]\n  verbs: [get]\n"))
		}, "wildcard"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			root := standInTree(t)
			// Give the tree a previous build's outputs to protect.
			if err := os.CopyFS(filepath.Join(root, "out"), os.DirFS(filepath.Join(good, "out"))); err != nil {
				t.Fatal(err)
			}
			c.edit(t, root)
			before := snapshot(t, filepath.Join(root, "out"))
			var log bytes.Buffer
			cfg := config(root)
			cfg.Log = &log
			_, err := Build(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
			t.Logf("error: %v", err)
			after := snapshot(t, filepath.Join(root, "out"))
			if len(before) != len(after) {
				t.Errorf("out/ changed: %d entries before, %d after", len(before), len(after))
			}
			for k, v := range before {
				if after[k] != v {
					t.Errorf("out/%s changed", k)
				}
			}
		})
	}
}

func TestDevelopmentCatalogHoldsOnlyTheCurrentBundle(t *testing.T) {
	root := standInTree(t)
	released := build(t, config(root))
	// Pretend 0.1.0 was released elsewhere and this tree is at 0.2.0.
	rel := released.CurrentEntry
	for _, p := range []*string{&rel.OperatorImage, &rel.BundleImage, &rel.Bundle.Image} {
		*p = strings.Replace(*p, "registry.example.com", "quay.io", 1)
	}
	if _, err := catalog.WriteRelease(filepath.Join(root, catalog.ReleasedDir), rel); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, catalog.TemplatePath)
	data, _ := os.ReadFile(p)
	write(t, p, []byte(strings.Replace(string(data), "Stable:\n  Bundles: []", "Stable:\n  Bundles:\n  - Image: "+rel.BundleImage, 1)))
	write(t, filepath.Join(root, "VERSION"), []byte("0.2.0\n"))

	full := build(t, config(root))
	fbc, _ := os.ReadFile(filepath.Join(root, "out", "catalog", "configs", "inference-stack-operator", "catalog.json"))
	if !strings.Contains(string(fbc), rel.BundleImage) || !strings.Contains(string(fbc), full.Image(Bundle).Ref.String()) {
		t.Fatalf("full catalog:\n%s", fbc)
	}
	cfg := config(root)
	cfg.CurrentOnly = true
	dev := build(t, cfg)
	fbc, _ = os.ReadFile(filepath.Join(root, "out", "catalog", "configs", "inference-stack-operator", "catalog.json"))
	if strings.Contains(string(fbc), rel.BundleImage) || !strings.Contains(string(fbc), dev.Image(Bundle).Ref.String()) {
		t.Fatalf("development catalog:\n%s", fbc)
	}
	if dev.Image(Bundle).Ref != full.Image(Bundle).Ref || dev.Image(Catalog).Ref == full.Image(Catalog).Ref {
		t.Errorf("the bundle must not depend on the catalog mode; the catalog must")
	}
}

// TestPrebuiltBinariesGiveTheSameImages: packaging binaries compiled
// elsewhere with the stamp ResolveStamp gives (what the Bazel build's
// compile actions do) yields the digests of a build that compiles them
// itself, and records the Go version the binaries were built with. Such
// layouts hold the image alone (no SBOM or provenance, which describe the
// compile), as rules_oci's oci_push needs.
func TestPrebuiltBinariesGiveTheSameImages(t *testing.T) {
	root := standInTree(t)
	compiled := build(t, config(root))

	saved := t.TempDir()
	bins := map[gobuild.Target]string{}
	for _, p := range DefaultPlatforms {
		src := filepath.Join(root, "out", "build", p.OS+"_"+p.Arch, "operator")
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(saved, p.OS+"_"+p.Arch)
		write(t, dst, data)
		bins[p] = dst
	}
	catalogBins := map[string]string{}
	for _, n := range CatalogPrograms {
		p := DefaultPlatforms[0]
		data, err := os.ReadFile(filepath.Join(root, "out", "build", p.OS+"_"+p.Arch, n))
		if err != nil {
			t.Fatal(err)
		}
		catalogBins[n] = filepath.Join(saved, n)
		write(t, catalogBins[n], data)
	}
	in, err := LoadInputs(config(root))
	if err != nil {
		t.Fatal(err)
	}
	st, err := ResolveStamp(context.Background(), config(root), in)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.OperatorVars()[versionVar]; got != compiled.Version || st.Revision != compiled.Revision {
		t.Errorf("stamp %+v does not match the compiled build %s/%s", st, compiled.Version, compiled.Revision)
	}

	cfg := config(root)
	cfg.Out = t.TempDir()
	cfg.Binaries = &Prebuilt{Operator: bins, Catalog: catalogBins}
	// No go command is needed to package prebuilt binaries.
	t.Setenv("PATH", t.TempDir())
	prebuilt := build(t, cfg)
	for _, n := range Names {
		if compiled.Image(n).Ref != prebuilt.Image(n).Ref {
			t.Errorf("%s: compiled %s, prebuilt %s", n, compiled.Image(n).Ref, prebuilt.Image(n).Ref)
		}
		idx, err := os.ReadFile(filepath.Join(cfg.Out, "images", n, "index.json"))
		if err != nil {
			t.Fatal(err)
		}
		if len(prebuilt.Image(n).Artifacts) != 0 || strings.Count(string(idx), `"digest"`) != 1 {
			t.Errorf("%s: the prebuilt layout holds more than the image: %+v\n%s", n, prebuilt.Image(n).Artifacts, idx)
		}
	}
	if prebuilt.GoVersion != compiled.GoVersion {
		t.Errorf("Go version %q, want the binaries' %q", prebuilt.GoVersion, compiled.GoVersion)
	}

	delete(catalogBins, HealthProbe)
	cfg.Out = t.TempDir()
	if _, err := Build(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "no prebuilt grpc_health_probe") {
		t.Errorf("a missing catalog program: %v", err)
	}
	delete(bins, gobuild.Target{OS: "linux", Arch: "arm64"})
	cfg.Out = t.TempDir()
	if _, err := Build(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "no prebuilt operator binary for linux/arm64") {
		t.Errorf("a missing platform's binary: %v", err)
	}
}

// TestCatalogBinariesServe builds the catalog image's binaries from this
// repository (opm from the pinned operator-registry module, CGO off) and
// runs them as OLM v0 does: opm serves a catalog over gRPC and
// grpc_health_probe, given only the port, reports it SERVING.
func TestCatalogBinariesServe(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short: compiles opm")
	}
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	host := gobuild.Target{OS: "linux", Arch: runtime.GOARCH}
	opm, probe := filepath.Join(dir, OPM), filepath.Join(dir, HealthProbe)
	for program, out := range map[string]string{OPM: opm, HealthProbe: probe} {
		if err := CompileCatalogProgram(ctx, root, &GoBuild{}, program, host, out); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.CommandContext(ctx, opm, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `OpmVersion:"v1.`) {
		t.Errorf("opm version: %v\n%s", err, out)
	}

	configs := filepath.Join(dir, "configs", inferencestack.PackageName)
	write(t, filepath.Join(configs, "catalog.yaml"), []byte(`---
schema: olm.package
name: `+inferencestack.PackageName+`
defaultChannel: stable-v0
---
schema: olm.channel
package: `+inferencestack.PackageName+`
name: stable-v0
entries:
  - name: `+inferencestack.PackageName+`.v0.1.0
---
schema: olm.bundle
package: `+inferencestack.PackageName+`
name: `+inferencestack.PackageName+`.v0.1.0
image: registry.example.com/tytn/operator-bundle@sha256:`+strings.Repeat("a", 64)+`
properties:
  - {type: olm.package, value: {packageName: `+inferencestack.PackageName+`, version: 0.1.0}}
`))
	port := freePort(t)
	// The image's command with this test's directory and port.
	serve := exec.CommandContext(ctx, opm, CatalogCmd[0], filepath.Join(dir, "configs"), "--port="+port, "--termination-log="+filepath.Join(dir, "termination-log"))
	serve.Env = append(os.Environ(), "TMPDIR="+dir)
	var log bytes.Buffer
	serve.Stdout, serve.Stderr = &log, &log
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = serve.Process.Kill(); _ = serve.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		// What OLM v0's catalog pod probe runs (with the pod's port).
		probeOut, err := exec.CommandContext(ctx, probe, "-addr=:"+port).CombinedOutput()
		if err == nil {
			if !strings.Contains(string(probeOut), "SERVING") {
				t.Errorf("probe said %q", probeOut)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("grpc_health_probe never reported SERVING: %v %s\nopm serve log:\n%s", err, probeOut, log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}

// TestImagesCarryTheirSBOMAndProvenance: each layout holds the image and,
// as artifacts referring to it, a CycloneDX SBOM and an in-toto SLSA
// provenance statement about exactly that digest; a rebuild writes them
// byte for byte again.
func TestImagesCarryTheirSBOMAndProvenance(t *testing.T) {
	root := standInTree(t)
	res := build(t, config(root))
	out := filepath.Join(root, "out")
	docs := map[string][]byte{}
	for _, img := range res.Images {
		top, err := oci.ReadLayout(filepath.Join(out, "images", img.Name))
		if err != nil {
			t.Fatal(err)
		}
		if top.Descriptor.Digest.String() != img.Ref.Digest {
			t.Fatalf("%s: layout %s, built %s", img.Name, top.Descriptor.Digest, img.Ref)
		}
		if len(top.Referrers) != 2 || len(img.Artifacts) != 2 {
			t.Fatalf("%s: referrers %+v, artifacts %+v", img.Name, top.Referrers, img.Artifacts)
		}
		for i, d := range top.Referrers {
			a, err := top.Referrer(d)
			if err != nil {
				t.Fatal(err)
			}
			m, data, err := oci.ArtifactBlob(a)
			if err != nil {
				t.Fatal(err)
			}
			if m.Subject.Digest != top.Descriptor.Digest || img.Artifacts[i].Digest != d.Digest.String() || img.Artifacts[i].Size != int64(len(data)) {
				t.Errorf("%s artifact %d: %+v vs %+v", img.Name, i, m, img.Artifacts[i])
			}
			docs[img.Name+" "+d.ArtifactType] = data
		}
		sbomDoc := docs[img.Name+" "+sbom.MediaType]
		var bom cdx.BOM
		if err := cdx.NewBOMDecoder(bytes.NewReader(sbomDoc), cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
			t.Fatalf("%s SBOM: %v", img.Name, err)
		}
		if bom.Metadata.Component.Hashes == nil || (*bom.Metadata.Component.Hashes)[0].Value != top.Descriptor.Digest.Hex {
			t.Errorf("%s SBOM is about %+v", img.Name, bom.Metadata.Component)
		}
		st, prov, err := provenance.Read(docs[img.Name+" "+provenance.MediaType])
		if err != nil {
			t.Fatalf("%s provenance: %v", img.Name, err)
		}
		if st.GetSubject()[0].GetDigest()["sha256"] != top.Descriptor.Digest.Hex || prov == nil {
			t.Fatalf("%s provenance subject %v", img.Name, st.GetSubject())
		}
		ext := prov.GetBuildDefinition().GetExternalParameters().AsMap()
		if ext["version"] != "0.1.0" || ext["sourceDateEpoch"].(float64) != 0 || ext["source"].(map[string]any)["revision"] != config(root).Revision {
			t.Errorf("%s external parameters %v", img.Name, ext)
		}
		deps := prov.GetBuildDefinition().GetResolvedDependencies()
		if deps[0].GetDigest()["gitCommit"] != config(root).Revision {
			t.Errorf("%s source %v", img.Name, deps[0])
		}
		switch img.Name {
		case Operator:
			if !bytes.Contains(sbomDoc, []byte(`"name": "/operator"`)) || !bytes.Contains(sbomDoc, []byte(`"cdx:gomod:build:env:CGO_ENABLED"`)) {
				t.Errorf("the operator SBOM does not describe the binary")
			}
			if len(prov.GetRunDetails().GetByproducts()) != 2 || prov.GetBuildDefinition().GetInternalParameters().AsMap()["goVersion"] != res.GoVersion {
				t.Errorf("operator provenance run details %v", prov.GetRunDetails())
			}
		case Bundle:
			if !bytes.Contains(sbomDoc, []byte(res.Image(Operator).Ref.Digest[len("sha256:"):])) || deps[1].GetName() != res.Image(Operator).Ref.String() {
				t.Errorf("the bundle's SBOM and provenance do not name the operator it pins")
			}
		case Catalog:
			if !bytes.Contains(sbomDoc, []byte(res.Image(Bundle).Ref.Digest[len("sha256:"):])) || deps[1].GetName() != res.Image(Bundle).Ref.String() {
				t.Errorf("the catalog's SBOM and provenance do not name the bundle it pins")
			}
			if !strings.Contains(fmt.Sprint(deps), "pkg:golang/stdlib@"+strings.TrimPrefix(res.GoVersion, "go")) {
				t.Errorf("the catalog's provenance does not list the build of opm and the health probe (a stand-in opm here): %v", deps)
			}
		}
	}

	// Rebuilding gives the same documents, hence the same artifact digests.
	again := build(t, config(root))
	for _, img := range again.Images {
		if fmt.Sprint(img.Artifacts) != fmt.Sprint(res.Image(img.Name).Artifacts) {
			t.Errorf("%s: artifacts %+v, then %+v", img.Name, res.Image(img.Name).Artifacts, img.Artifacts)
		}
	}
}
