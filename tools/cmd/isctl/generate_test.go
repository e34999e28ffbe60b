package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/pkg/lib/config"
	"sigs.k8s.io/yaml"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/internal/bundlegen"
	"github.com/titanml/inference-stack-operator/internal/catalogrender"
	"github.com/titanml/inference-stack-operator/internal/imageref"
)

const (
	opRepo     = "docker.io/tytn/operator"
	bundleRepo = "docker.io/tytn/operator-bundle"
)

func fakeDigest(content string) string {
	sum := sha256.Sum256([]byte(content))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// repoRoot is the repository holding this package, whose real inputs the
// tests use.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := findRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func writeFile(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// workspace lays out, under the working directory, what the Bazel actions
// see: the inputs (VERSION, digest files) and bin/ for the outputs, all
// named by relative paths like Bazel's execution paths.
type workspace struct {
	root string // the repository, for the real inputs
}

func (w workspace) bundleArgs(version string) map[string]string {
	return map[string]string{
		"version-file":         "in/VERSION-" + version,
		"csv-base":             filepath.Join(w.root, bundlegen.BaseCSVPath),
		"rbac":                 filepath.Join(w.root, bundlegen.OperatorRBACPath),
		"operator-repo":        opRepo,
		"operator-digest-file": "in/operator-" + version + ".digest",
		"out":                  "bin/bundle-" + version + "/bundle_files",
		"mtree":                "bin/bundle-" + version + "/bundle.mtree",
		"labels":               "bin/bundle-" + version + "/bundle.labels.txt",
	}
}

func (w workspace) catalogArgs(version string) map[string]string {
	return map[string]string{
		"version-file":       "in/VERSION-" + version,
		"template":           filepath.Join(w.root, catalogrender.TemplatePath),
		"released":           filepath.Join(w.root, catalogrender.ReleasedDir),
		"channels":           "stable,fast",
		"bundle-dir":         "bin/bundle-" + version + "/bundle_files",
		"bundle-repo":        bundleRepo,
		"bundle-digest-file": "in/bundle-" + version + ".digest",
		"out":                "bin/catalog/catalog_files",
		"mtree":              "bin/catalog/catalog.mtree",
	}
}

// inputs writes the VERSION and digest files of version.
func (w workspace) inputs(t *testing.T, version string) {
	t.Helper()
	writeFile(t, "in/VERSION-"+version, version+"\n")
	writeFile(t, "in/operator-"+version+".digest", fakeDigest("operator "+version)+"\n")
	writeFile(t, "in/bundle-"+version+".digest", fakeDigest("bundle "+version)+"\n")
}

// argList returns the command line of verb with args as flags (an empty
// key is a positional argument).
func argList(verb string, args map[string]string) []string {
	out := []string{verb}
	for k, v := range args {
		if k != "" {
			out = append(out, "-"+k+"="+v)
		}
	}
	sort.Strings(out[1:])
	if v, ok := args[""]; ok {
		out = append(out, v)
	}
	return out
}

func runVerb(verb string, args map[string]string) error {
	return run(context.Background(), argList(verb, args), io.Discard)
}

// newWorkspace changes into a fresh directory.
func newWorkspace(t *testing.T) workspace {
	t.Helper()
	w := workspace{root: repoRoot(t)}
	t.Chdir(t.TempDir())
	return w
}

// listTree returns every path under dir (slash-separated, directories with
// a trailing slash).
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			rel += "/"
		}
		out = append(out, rel)
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// checkMtree checks that the spec lists exactly the files and directories
// under out, sorted, owned by root, at time 0, files 0644 with their content
// taken from out, directories 0755.
func checkMtree(t *testing.T, spec, out string) {
	t.Helper()
	data := readFile(t, spec)
	if !bytes.HasSuffix(data, []byte("\n")) {
		t.Errorf("%s: no final newline", spec)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if !sort.StringsAreSorted(lines) {
		t.Errorf("%s: lines are not sorted:\n%s", spec, data)
	}
	var listed []string
	for _, line := range lines {
		f := strings.Fields(line)
		name, kv := f[0], map[string]string{}
		for _, x := range f[1:] {
			k, v, _ := strings.Cut(x, "=")
			kv[k] = v
		}
		listed = append(listed, name)
		if kv["uid"] != "0" || kv["gid"] != "0" || kv["time"] != "0" {
			t.Errorf("%s: %q: want uid=0 gid=0 time=0", spec, line)
		}
		switch kv["type"] {
		case "dir":
			if !strings.HasSuffix(name, "/") || kv["mode"] != "0755" || len(kv) != 5 {
				t.Errorf("%s: directory line %q: want <path>/ uid=0 gid=0 mode=0755 time=0 type=dir", spec, line)
			}
		case "file":
			want := path.Join(filepath.ToSlash(out), name)
			if kv["mode"] != "0644" || kv["content"] != want || len(kv) != 6 {
				t.Errorf("%s: file line %q: want mode=0644 content=%s", spec, line, want)
			}
			if st, err := os.Stat(kv["content"]); err != nil || !st.Mode().IsRegular() {
				t.Errorf("%s: content of %s: %v", spec, name, err)
			}
		default:
			t.Errorf("%s: %q: unexpected type", spec, line)
		}
	}
	if got, want := strings.Join(listed, "\n"), strings.Join(listTree(t, out), "\n"); got != want {
		t.Errorf("%s lists\n%s\nwant every path under %s:\n%s", spec, got, out, want)
	}
}

func TestBundleAndCatalog(t *testing.T) {
	for _, tc := range []struct {
		name string
		// released, if set, releases this earlier version first (its
		// bundle built with the bundle verb, recorded, listed in the
		// template) so that the catalog holds two bundles.
		released string
	}{
		{name: "repository inputs"},
		{name: "with a released version", released: "0.0.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorkspace(t)
			version := strings.TrimSpace(string(readFile(t, filepath.Join(w.root, "VERSION"))))
			w.inputs(t, version)
			ba := w.bundleArgs(version)
			ca := w.catalogArgs(version)
			if tc.released != "" {
				ca["template"], ca["released"] = releaseEarlier(t, w, tc.released)
			}
			// Bazel creates a declared output directory before running the
			// action: an empty -out is replaced.
			if err := os.MkdirAll(ba["out"], 0o755); err != nil {
				t.Fatal(err)
			}
			if err := runVerb("bundle", ba); err != nil {
				t.Fatalf("isctl bundle: %v", err)
			}
			checkBundle(t, w, version, ba)
			if err := runVerb("catalog", ca); err != nil {
				t.Fatalf("isctl catalog: %v", err)
			}
			checkCatalog(t, version, ba, ca, tc.released)

			// Running again replaces the outputs with identical ones and
			// leaves nothing else behind.
			before := map[string][]byte{}
			for _, p := range []string{ba["mtree"], ba["labels"], ca["mtree"], filepath.Join(ca["out"], "configs", catalogrender.FBCPath)} {
				before[p] = readFile(t, p)
			}
			treeBefore := listTree(t, "bin")
			if err := runVerb("bundle", ba); err != nil {
				t.Fatalf("isctl bundle (again): %v", err)
			}
			if err := runVerb("catalog", ca); err != nil {
				t.Fatalf("isctl catalog (again): %v", err)
			}
			for p, data := range before {
				if !bytes.Equal(readFile(t, p), data) {
					t.Errorf("%s differs on the second run", p)
				}
			}
			if got := listTree(t, "bin"); strings.Join(got, " ") != strings.Join(treeBefore, " ") {
				t.Errorf("bin/ after a second run:\n%v\nwant\n%v", got, treeBefore)
			}
		})
	}
}

// releaseEarlier builds the bundle of version v with the bundle verb, records
// it as released in a copy of catalog/released/ and lists it in a copy of the
// template, as `make release` would. It returns the template and released
// directory to use.
func releaseEarlier(t *testing.T, w workspace, v string) (template, released string) {
	t.Helper()
	w.inputs(t, v)
	ba := w.bundleArgs(v)
	if err := runVerb("bundle", ba); err != nil {
		t.Fatalf("isctl bundle %s: %v", v, err)
	}
	ref, err := imageref.ParseDigest(bundleRepo + "@" + strings.TrimSpace(string(readFile(t, "in/bundle-"+v+".digest"))))
	if err != nil {
		t.Fatal(err)
	}
	entry, err := catalogrender.RenderBundleDir(ba["out"], ref)
	if err != nil {
		t.Fatal(err)
	}
	released = "in/released"
	if _, err := catalogrender.WriteRelease(released, catalogrender.Release{
		Version: v, Revision: strings.Repeat("a", 40), GoVersion: "go1.26.8", Platforms: []string{"linux/amd64", "linux/arm64"},
		OperatorImage: opRepo + "@" + fakeDigest("operator "+v), BundleImage: ref.String(), Bundle: entry,
	}); err != nil {
		t.Fatal(err)
	}
	tmpl, err := catalogrender.AddBundle(readFile(t, filepath.Join(w.root, catalogrender.TemplatePath)), ref, []string{"stable", "fast"})
	if err != nil {
		t.Fatal(err)
	}
	template = "in/operator_catalog.yaml"
	writeFile(t, template, string(tmpl))
	return template, released
}

func checkBundle(t *testing.T, w workspace, version string, args map[string]string) {
	t.Helper()
	out := args["out"]
	if err := bundlegen.ValidateDir(out).Err(); err != nil {
		t.Errorf("the bundle does not validate: %v", err)
	}
	// The same bytes as the Go-native build's bundle generator.
	opRef := opRepo + "@" + fakeDigest("operator "+version)
	want, err := bundlegen.Generate(bundlegen.Inputs{
		BaseCSV: readFile(t, args["csv-base"]), RBAC: readFile(t, args["rbac"]),
	}, bundlegen.Options{Version: semver.MustParse(version), OperatorImage: opRef})
	if err != nil {
		t.Fatal(err)
	}
	var wantTree []string
	for _, p := range want.Paths() {
		wantTree = append(wantTree, p)
		if got := readFile(t, filepath.Join(out, filepath.FromSlash(p))); !bytes.Equal(got, want.Files[p]) {
			t.Errorf("%s differs from bundlegen.Generate's", p)
		}
	}
	var gotFiles []string
	for _, p := range listTree(t, out) {
		if !strings.HasSuffix(p, "/") {
			gotFiles = append(gotFiles, p)
		}
	}
	if strings.Join(gotFiles, " ") != strings.Join(wantTree, " ") {
		t.Errorf("bundle files %v, want %v", gotFiles, wantTree)
	}
	csv := readFile(t, filepath.Join(out, bundlegen.CSVPath))
	if !bytes.Contains(csv, []byte("image: "+opRef)) {
		t.Errorf("the CSV does not pin the operator as %s", opRef)
	}
	checkMtree(t, args["mtree"], out)

	// Labels: sorted key=value lines, equal to metadata/annotations.yaml.
	labels := readFile(t, args["labels"])
	lines := strings.Split(strings.TrimSuffix(string(labels), "\n"), "\n")
	if !sort.StringsAreSorted(lines) {
		t.Errorf("labels are not sorted:\n%s", labels)
	}
	got := map[string]string{}
	for _, l := range lines {
		k, v, ok := strings.Cut(l, "=")
		if !ok || !strings.HasPrefix(k, "operators.operatorframework.io.bundle.") {
			t.Errorf("label line %q", l)
		}
		got[k] = v
	}
	var ann struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.UnmarshalStrict(readFile(t, filepath.Join(out, bundlegen.AnnotationsFile)), &ann); err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]map[string]string{
		bundlegen.AnnotationsFile: ann.Annotations,
		"bundlegen.Annotations":   bundlegen.Annotations(semver.MustParse(version)),
	} {
		if len(m) != len(got) {
			t.Errorf("labels %v, want those of %s: %v", got, name, m)
		}
		for k, v := range m {
			if got[k] != v {
				t.Errorf("label %s=%q, want %q as in %s", k, got[k], v, name)
			}
		}
	}
}

func checkCatalog(t *testing.T, version string, ba, ca map[string]string, released string) {
	t.Helper()
	out := ca["out"]
	configs := filepath.Join(out, "configs")
	if got := listTree(t, out); strings.Join(got, " ") != "configs/ configs/"+inferencestack.PackageName+"/ configs/"+catalogrender.FBCPath {
		t.Errorf("catalog output %v", got)
	}
	// What `opm validate` checks, on the directory written.
	if err := config.Validate(context.Background(), os.DirFS(configs)); err != nil {
		t.Errorf("the catalog does not validate: %v", err)
	}
	cfg, err := declcfg.LoadFS(context.Background(), os.DirFS(configs))
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]string{}
	for _, b := range cfg.Bundles {
		images[b.Name] = b.Image
	}
	want := map[string]string{bundlegen.CSVName(semver.MustParse(version)): bundleRepo + "@" + fakeDigest("bundle "+version)}
	if released != "" {
		want[bundlegen.CSVName(semver.MustParse(released))] = bundleRepo + "@" + fakeDigest("bundle "+released)
	}
	if len(images) != len(want) {
		t.Errorf("catalog bundles %v, want %v", images, want)
	}
	for n, img := range want {
		if images[n] != img {
			t.Errorf("catalog bundle %s: image %q, want %q", n, images[n], img)
		}
	}
	var channels []string
	for _, c := range cfg.Channels {
		channels = append(channels, c.Name)
	}
	sort.Strings(channels)
	if strings.Join(channels, ",") != "fast-v0,stable-v0" {
		t.Errorf("channels %v, want fast-v0, stable-v0", channels)
	}

	// The same bytes as the Go-native build's catalog renderer.
	rels, err := catalogrender.LoadReleases(ca["released"])
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := imageref.ParseDigest(bundleRepo + "@" + fakeDigest("bundle "+version))
	res, err := catalogrender.Render(context.Background(), catalogrender.Inputs{Template: readFile(t, ca["template"]), Released: rels},
		catalogrender.Current{Dir: ba["out"], Image: ref, Version: semver.MustParse(version), Archetypes: []string{"stable", "fast"}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readFile(t, filepath.Join(configs, catalogrender.FBCPath)), res.FBC) {
		t.Errorf("the catalog differs from catalogrender.Render's")
	}
	checkMtree(t, ca["mtree"], out)
}

func TestBundleAndCatalogFailuresLeaveNoOutput(t *testing.T) {
	const version = "0.1.0"
	for _, tc := range []struct {
		name, verb string
		// setup changes the arguments (and may write files); the bundle
		// of version has been built for the catalog cases.
		setup func(t *testing.T, args map[string]string)
		want  string
	}{
		{"bundle: missing digest file", "bundle", func(t *testing.T, a map[string]string) {
			a["operator-digest-file"] = "in/nonexistent.digest"
		}, "-operator-digest-file: open in/nonexistent.digest"},
		{"bundle: short digest", "bundle", func(t *testing.T, a map[string]string) {
			writeFile(t, a["operator-digest-file"], "sha256:0123abc\n")
		}, "want sha256:<64 lowercase hex digits>"},
		{"bundle: digest with a second line", "bundle", func(t *testing.T, a map[string]string) {
			writeFile(t, a["operator-digest-file"], fakeDigest("x")+"\n"+fakeDigest("y")+"\n")
		}, "want sha256:<64 lowercase hex digits>"},
		{"bundle: empty digest file", "bundle", func(t *testing.T, a map[string]string) {
			writeFile(t, a["operator-digest-file"], "")
		}, "want sha256:<64 lowercase hex digits>"},
		{"bundle: tagged repository", "bundle", func(t *testing.T, a map[string]string) {
			a["operator-repo"] = opRepo + ":latest"
		}, "carries a tag"},
		{"bundle: repository without a registry host", "bundle", func(t *testing.T, a map[string]string) {
			a["operator-repo"] = "tytn/operator"
		}, "must start with a registry host"},
		{"bundle: invalid VERSION", "bundle", func(t *testing.T, a map[string]string) {
			writeFile(t, a["version-file"], "v0.1.0\n")
		}, "invalid VERSION"},
		{"bundle: wildcard in the RBAC", "bundle", func(t *testing.T, a map[string]string) {
			a["rbac"] = "in/role.yaml"
			writeFile(t, a["rbac"], "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: x}\nrules:\n- apiGroups: ['*']\n  resources: [pods]\n  verbs: [get]\n")
		}, "wildcard"},
		{"bundle: missing flag", "bundle", func(t *testing.T, a map[string]string) {
			delete(a, "labels")
		}, "missing -labels"},
		{"bundle: mtree inside -out", "bundle", func(t *testing.T, a map[string]string) {
			a["mtree"] = a["out"] + "/bundle.mtree"
		}, "is inside -out"},
		{"bundle: labels cannot be written", "bundle", func(t *testing.T, a map[string]string) {
			// Fails after the bundle directory is staged.
			a["labels"] = a["version-file"] + "/bundle.labels.txt"
		}, "-labels: in/VERSION-0.1.0 is not a directory"},
		{"bundle: labels cannot be written, in a new directory", "bundle", func(t *testing.T, a map[string]string) {
			// Fails after the bundle directory and the new parent of -mtree
			// are created.
			a["mtree"] = "bin/new/bundle.mtree"
			a["labels"] = a["version-file"] + "/bundle.labels.txt"
		}, "-labels: in/VERSION-0.1.0 is not a directory"},
		{"bundle: -out holds other files", "bundle", func(t *testing.T, a map[string]string) {
			writeFile(t, a["out"]+"/keep.txt", "mine\n")
		}, "refusing to replace -out"},
		{"catalog: tag in the template", "catalog", func(t *testing.T, a map[string]string) {
			a["template"] = "in/operator_catalog.yaml"
			writeFile(t, a["template"], "Schema: olm.semver\nGenerateMajorChannels: true\nGenerateMinorChannels: false\nStable:\n  Bundles:\n  - Image: "+bundleRepo+":0.0.9\n")
		}, "is a tag reference"},
		{"catalog: template bundle without a released entry", "catalog", func(t *testing.T, a map[string]string) {
			a["template"] = "in/operator_catalog.yaml"
			writeFile(t, a["template"], "Schema: olm.semver\nGenerateMajorChannels: true\nGenerateMinorChannels: false\nStable:\n  Bundles:\n  - Image: "+bundleRepo+"@"+fakeDigest("0.0.9")+"\n")
		}, "no released entry"},
		{"catalog: unknown template key", "catalog", func(t *testing.T, a map[string]string) {
			a["template"] = "in/operator_catalog.yaml"
			writeFile(t, a["template"], "Schema: olm.semver\nGenerateMajorChannels: true\nStabel:\n  Bundles: []\n")
		}, "unknown field"},
		{"catalog: missing digest file", "catalog", func(t *testing.T, a map[string]string) {
			a["bundle-digest-file"] = "in/nonexistent.digest"
		}, "-bundle-digest-file: open in/nonexistent.digest"},
		{"catalog: malformed digest", "catalog", func(t *testing.T, a map[string]string) {
			writeFile(t, a["bundle-digest-file"], "sha512:"+strings.Repeat("ab", 64)+"\n")
		}, "want sha256:<64 lowercase hex digits>"},
		{"catalog: uppercase digest", "catalog", func(t *testing.T, a map[string]string) {
			writeFile(t, a["bundle-digest-file"], strings.ToUpper(fakeDigest("x"))+"\n")
		}, "want sha256:<64 lowercase hex digits>"},
		{"catalog: bundle of another version", "catalog", func(t *testing.T, a map[string]string) {
			writeFile(t, a["version-file"], "0.2.0\n")
		}, "does not describe version 0.2.0"},
		{"catalog: missing bundle directory", "catalog", func(t *testing.T, a map[string]string) {
			a["bundle-dir"] = "bin/nonexistent"
		}, "-bundle-dir bin/nonexistent: not a directory"},
		{"catalog: missing released directory", "catalog", func(t *testing.T, a map[string]string) {
			a["released"] = "in/nonexistent"
		}, "-released in/nonexistent: not a directory"},
		{"catalog: unknown channel", "catalog", func(t *testing.T, a map[string]string) {
			a["channels"] = "stable,beta"
		}, "unknown channel archetype"},
		{"catalog: positional argument", "catalog", func(t *testing.T, a map[string]string) {
			a[""] = "extra"
		}, "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorkspace(t)
			w.inputs(t, version)
			args := w.bundleArgs(version)
			outputs := []string{args["out"], args["mtree"], args["labels"]}
			if tc.verb == "catalog" {
				if err := runVerb("bundle", args); err != nil {
					t.Fatal(err)
				}
				args = w.catalogArgs(version)
				outputs = []string{args["out"], args["mtree"]}
			}
			tc.setup(t, args)
			before := listTree(t, ".")
			err := runVerb(tc.verb, args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("isctl %s: %v, want an error containing %q", tc.verb, err, tc.want)
			}
			// Nothing written, nothing left behind (no temporary files),
			// an existing directory untouched.
			if after := listTree(t, "."); strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Errorf("files before:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
			}
			for _, p := range outputs {
				if _, err := os.Stat(p); err == nil && !strings.Contains(tc.want, "refusing") {
					t.Errorf("%s exists after a failure", p)
				}
			}
		})
	}
}

func TestMtreeEscape(t *testing.T) {
	for in, want := range map[string]string{
		"manifests/x.yaml": "manifests/x.yaml",
		"a b":              `a\040b`,
		`a\b#c`:            `a\134b\043c`,
		"é":                `\303\251`,
	} {
		if got := mtreeEscape(in); got != want {
			t.Errorf("mtreeEscape(%q) = %q, want %q", in, got, want)
		}
	}
}
