package gobuild

import (
	"context"
	"os"
	"strings"
	"testing"
)

func TestArgs(t *testing.T) {
	args, err := Args(Options{
		Package: "./operator", Output: "out/operator", Tags: []string{"b", "a"},
		Stamp: map[string]string{"m/v.Version": "0.1.0", "m/v.GitCommit": "abc"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "build -trimpath -buildvcs=false -ldflags=-buildid= -s -w -X m/v.GitCommit=abc -X m/v.Version=0.1.0 -tags=a,b -o out/operator ./operator"
	if got := strings.Join(args, " "); got != want {
		t.Errorf("args\n %s\nwant\n %s", got, want)
	}
	if _, err := Args(Options{Stamp: map[string]string{"x": "a b"}}); err == nil {
		t.Error("a stamp with a space was accepted")
	}
}

func TestEnvPinsWhatChangesTheOutput(t *testing.T) {
	t.Setenv("GOFLAGS", "-race")
	t.Setenv("GOAMD64", "v3")
	t.Setenv("CGO_ENABLED", "1")
	t.Setenv("GOWORK", "/elsewhere/go.work")
	env := Env(Target{OS: "linux", Arch: "arm64"}, []string{"TMPDIR=/x"})
	last := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		last[k] = v
	}
	for k, v := range map[string]string{"GOFLAGS": "-mod=readonly", "GOAMD64": "v1", "CGO_ENABLED": "0", "GOOS": "linux", "GOARCH": "arm64", "GOWORK": "off", "TMPDIR": "/x"} {
		if last[k] != v {
			t.Errorf("%s=%q, want %q", k, last[k], v)
		}
	}
	for _, kv := range env {
		if kv == "GOFLAGS=-race" || kv == "GOAMD64=v3" {
			t.Errorf("%s leaked into the build environment", kv)
		}
	}
}

func TestParseTargets(t *testing.T) {
	ts, err := ParseTargets("linux/amd64, linux/arm64,linux/amd64")
	if err != nil || len(ts) != 2 || ts[1].String() != "linux/arm64" {
		t.Fatalf("%v %v", ts, err)
	}
	for _, bad := range []string{"", "linux", "darwin/arm64", "linux/s390x"} {
		if _, err := ParseTargets(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestEmbeddedFiles lists what the operator binary embeds from this module:
// the chart (and the watches file), not the files of other modules.
func TestEmbeddedFiles(t *testing.T) {
	if _, err := os.Stat("../../../go.mod"); err != nil {
		t.Skip("not run from the module's source tree (Bazel runs tests in their runfiles)")
	}
	embeds, err := EmbeddedFiles(context.Background(), "../../..", "./operator", Target{OS: "linux", Arch: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	var chart *Embed
	for i, e := range embeds {
		if e.ImportPath != "github.com/titanml/inference-stack-operator" && !strings.HasPrefix(e.ImportPath, "github.com/titanml/inference-stack-operator/") {
			t.Errorf("embed of another module: %s", e.ImportPath)
		}
		if strings.HasSuffix(e.ImportPath, "/charts/inference-stack") {
			chart = &embeds[i]
		}
	}
	if chart == nil || !strings.Contains(strings.Join(chart.Files, " "), "Chart.yaml") || !strings.Contains(strings.Join(chart.Files, " "), "templates/") {
		t.Fatalf("embeds %+v", embeds)
	}
}
