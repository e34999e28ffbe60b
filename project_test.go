package inferencestack

import (
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
		Channel(Stable, "v0"): "stable-v0",
		Channel(Fast, "v3"):   "fast-v3",
		ExtensionName("v1"):   "inference-stack-operator-v1",
		Namespace("v1"):       "inference-stack-operator-v1",
		InstanceName("v1"):    "inference-stack-operator-v1",
		InstallerName("v1"):   "inference-stack-operator-v1-installer",
		LeaseID("v2"):         "inference-stack-operator-v2.models.takeoff.co",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}
