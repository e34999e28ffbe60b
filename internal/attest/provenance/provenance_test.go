package provenance

import (
	"bytes"
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func input() Input {
	return Input{
		Repository:     "registry.example.com/tytn/operator",
		Digest:         v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)},
		BuildType:      "https://example.com/build/v1",
		BuilderID:      "https://example.com/isctl",
		BuilderVersion: map[string]string{"isctl": "0123"},
		ExternalParameters: map[string]any{
			"version": "0.1.0", "platforms": []string{"linux/amd64", "linux/arm64"}, "sourceDateEpoch": 1700000000,
			"command": []string{"isctl", "build", "--version=0.1.0"},
		},
		InternalParameters: map[string]any{"goVersion": "go1.26.8"},
		Dependencies: append([]Resource{Source("git+https://example.com/src", strings.Repeat("c", 40))},
			GoModules(&debug.BuildInfo{GoVersion: "go1.26.8", Deps: []*debug.Module{
				{Path: "example.com/b", Version: "v1.0.0", Sum: "h1:Khu2En+0gcYPZ2kuIihfswbzxv/mIHXgzPZ018Oty48="},
				{Path: "example.com/a", Version: "v0.1.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v0.1.1"}},
			}})...),
		Byproducts: []Resource{File("out/build/linux_amd64/operator", []byte("binary"))},
	}
}

func TestStatementIsValidDeterministicSLSA(t *testing.T) {
	st, err := Statement(input())
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Statement(input())
	if !bytes.Equal(st, again) {
		t.Fatal("not deterministic")
	}
	var generic map[string]any
	if err := json.Unmarshal(st, &generic); err != nil || generic["_type"] != "https://in-toto.io/Statement/v1" || generic["predicateType"] != PredicateType {
		t.Fatalf("statement %v\n%s", err, st)
	}
	for _, absent := range []string{"startedOn", "finishedOn", "invocationId", "metadata"} {
		if bytes.Contains(st, []byte(absent)) {
			t.Errorf("the statement records %s", absent)
		}
	}
	s, p, err := Read(st)
	if err != nil {
		t.Fatal(err)
	}
	if s.GetSubject()[0].GetDigest()["sha256"] != strings.Repeat("ab", 32) || s.GetSubject()[0].GetName() != "registry.example.com/tytn/operator" {
		t.Errorf("subject %v", s.GetSubject())
	}
	ext := p.GetBuildDefinition().GetExternalParameters().AsMap()
	if ext["sourceDateEpoch"].(float64) != 1700000000 || !bytes.Contains(st, []byte(`"sourceDateEpoch": 1700000000`)) {
		t.Errorf("sourceDateEpoch %v", ext["sourceDateEpoch"])
	}
	deps := p.GetBuildDefinition().GetResolvedDependencies()
	var uris []string
	for _, d := range deps {
		uris = append(uris, d.GetUri())
	}
	want := "git+https://example.com/src@" + strings.Repeat("c", 40) + " pkg:golang/example.com/b@v1.0.0 pkg:golang/example.com/fork@v0.1.1 pkg:golang/stdlib@1.26.8"
	if strings.Join(uris, " ") != want {
		t.Errorf("dependencies\n%s\nwant\n%s", strings.Join(uris, " "), want)
	}
	if deps[0].GetDigest()["gitCommit"] != strings.Repeat("c", 40) ||
		deps[1].GetDigest()["dirHash"] != "2a1bb6127fb481c60f67692e22285fb306f3c6ffe62075e0ccf674d7c3adcb8f" ||
		deps[2].GetAnnotations().AsMap()["replaces"] != "example.com/a@v0.1.0" {
		t.Errorf("dependencies %v", deps)
	}
	if p.GetRunDetails().GetByproducts()[0].GetDigest()["sha256"] == "" {
		t.Error("byproduct without digest")
	}
}

func TestSourceOfADirtyTreeHasNoDigest(t *testing.T) {
	r := Source("git+https://example.com/src", strings.Repeat("c", 40)+"-dirty")
	if r.Digest != nil || r.Annotations["revision"] != strings.Repeat("c", 40)+"-dirty" || strings.Contains(r.URI, "@") {
		t.Fatalf("%+v", r)
	}
}

func TestStatementRejectsAnInvalidPredicate(t *testing.T) {
	in := input()
	in.BuilderID = ""
	if _, err := Statement(in); err == nil || !strings.Contains(err.Error(), "builder.id") {
		t.Fatalf("got %v", err)
	}
	in = input()
	in.Dependencies = append(in.Dependencies, Resource{Name: "x", Digest: map[string]string{"sha256": "nothex"}})
	if _, err := Statement(in); err == nil {
		t.Fatal("a bad digest was accepted")
	}
}

func TestWrapPredicate(t *testing.T) {
	d := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("01", 32)}
	st, err := WrapPredicate("r/x", d, "https://cyclonedx.org/bom", []byte(`{"bomFormat":"CycloneDX","specVersion":"1.6"}`))
	if err != nil {
		t.Fatal(err)
	}
	s, p, err := Read(st)
	if err != nil || p != nil || s.GetPredicate().AsMap()["bomFormat"] != "CycloneDX" {
		t.Fatalf("%v %v\n%s", err, p, st)
	}
	if _, err := WrapPredicate("r/x", d, "t", []byte(`[1]`)); err == nil {
		t.Fatal("a non-object predicate was accepted")
	}
}
