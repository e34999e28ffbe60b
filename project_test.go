package inferencestack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]string{"0.1.0": "v0", "1.2.3": "v1", "12.0.0-rc.1": "v12", " 0.1.0\n": "v0"} {
		if got, err := MajorOf(in); err != nil || got != want {
			t.Errorf("MajorOf(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"":              "empty",
		"v0.1.0":        "leading",
		"0.1":           "not a semantic version",
		"1.2.3.4":       "not a semantic version",
		"01.1.0":        "not a semantic version",
		"1.x.3":         "not a semantic version",
		"-1.2.3":        "not a semantic version",
		"latest":        "not a semantic version",
		"0.1.0+build":   "build metadata",
		"2.0.0+build.5": "build metadata",
	} {
		if _, err := ParseVersion(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseVersion(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}

// The repository's VERSION file must follow the rule: every build derives
// the reconciled major from it.
func TestRepositoryVersion(t *testing.T) {
	if _, err := ParseVersion(Version()); err != nil {
		t.Fatal(err)
	}
}

func TestNames(t *testing.T) {
	for got, want := range map[string]string{
		Channel(Stable, "v0"):        "stable-v0",
		Channel(Fast, "v3"):          "fast-v3",
		ExtensionName("v1"):          "inference-stack-operator-v1",
		Namespace("v1"):              "inference-stack-operator-v1",
		InstanceName("v1"):           "inference-stack-operator-v1",
		InstallerName("v1"):          "inference-stack-operator-v1-installer",
		LeaseID("v2"):                "inference-stack-operator-v2.models.takeoff.co",
		OperatorNamespacesAnnotation: "models.takeoff.co/operator-namespaces",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestParseVersionFile(t *testing.T) {
	for _, ok := range []string{"0.1.0", "1.2.3", "0.2.0-rc.1", " 0.1.0\n"} {
		if _, err := ParseVersionFile(ok); err != nil {
			t.Errorf("ParseVersionFile(%q): unexpected error %v", ok, err)
		}
	}
	for in, want := range map[string]string{
		"":            "invalid VERSION: empty",
		"v0.1.0":      "leading",
		"0.1":         "not a semantic version",
		"0.1.0+build": "build metadata",
	} {
		_, err := ParseVersionFile(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseVersionFile(%q) = %v, want error containing %q", in, err, want)
		}
	}
}

func TestReadVersionFileRejectsSeveralLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "VERSION")
	if err := os.WriteFile(p, []byte("0.1.0\n0.2.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadVersionFile(p); err == nil {
		t.Fatal("expected an error for a two-line VERSION file")
	}
	if err := os.WriteFile(p, []byte("3.4.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := ReadVersionFile(p)
	if err != nil || v.String() != "3.4.5" || Major(v) != "v3" {
		t.Fatalf("ReadVersionFile = %v, %v", v, err)
	}
}
