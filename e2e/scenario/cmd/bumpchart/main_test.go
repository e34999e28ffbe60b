package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBumpsTheMinorVersion(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.yaml"), filepath.Join(dir, "out.yaml")
	if err := os.WriteFile(in, []byte("apiVersion: v2\nname: x\nversion: 0.3.4\nappVersion: \"1\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(in, out); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "\nversion: 0.4.0\n") || !strings.Contains(string(data), "appVersion: \"1\"") {
		t.Errorf("got\n%s", data)
	}
	if err := run(filepath.Join(dir, "missing"), out); err == nil {
		t.Error("a missing input accepted")
	}
}
