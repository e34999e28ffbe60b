package versionfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, ok := range []string{"0.1.0", "1.2.3", "0.2.0-rc.1", " 0.1.0\n"} {
		if _, err := Parse(ok); err != nil {
			t.Errorf("Parse(%q): unexpected error %v", ok, err)
		}
	}
	for in, want := range map[string]string{
		"":            "invalid VERSION: empty",
		"v0.1.0":      "leading",
		"0.1":         "not a semantic version",
		"0.1.0+build": "build metadata",
	} {
		_, err := Parse(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want error containing %q", in, err, want)
		}
	}
}

func TestReadRejectsSeveralLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "VERSION")
	if err := os.WriteFile(p, []byte("0.1.0\n0.2.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(p); err == nil {
		t.Fatal("expected an error for a two-line VERSION file")
	}
	if err := os.WriteFile(p, []byte("3.4.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := Read(p)
	if err != nil || v.String() != "3.4.5" || v.MajorTag() != "v3" {
		t.Fatalf("Read = %v, %v", v, err)
	}
}
