package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/titanml/inference-stack-operator/internal/attest/signing"
)

func TestCommandLine(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"help"}, &out); err != nil || !strings.Contains(out.String(), "release") {
		t.Fatalf("help: %v\n%s", err, out.String())
	}
	for args, want := range map[string]string{
		"frobnicate":                                          "unknown command",
		"build -catalog everything":                           "-catalog must be full or current",
		"build -platforms linux/s390x":                        "unsupported platform",
		"build -channels beta":                                "unknown channel archetype",
		"build -root /nonexistent-isctl-x":                    "VERSION",
		"push -out /nonexistent-isctl-x":                      "make images",
		"push -sign-key /nonexistent-isctl-x.key":             "reading the signing key",
		"verify -catalog r/c:1":                               "needs -key",
		"verify -catalog r/c:1 -key /nonexistent-isctl-x.pub": "reading the public key",
		"bazel-compile -platform linux/amd64":                 "-go is required",
		"bazel-image -image bundle -out x":                    "-binary are required",
		"bazel-image -binary linux/amd64=x":                   "-image (one of operator, bundle, catalog)",
	} {
		err := run(context.Background(), strings.Fields(args), &out)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("isctl %s: %v, want an error containing %q", args, err, want)
		}
	}
}

func TestKeygen(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(signing.PasswordEnv, "hunter2-test-pw")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"keygen", "-out", dir}, &out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "hunter2-test-pw") {
		t.Error("the password is printed")
	}
	if _, err := signing.LoadSigner(filepath.Join(dir, "cosign.key"), []byte("hunter2-test-pw")); err != nil {
		t.Fatal(err)
	}
	if _, err := signing.LoadVerifier(filepath.Join(dir, "cosign.pub")); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"keygen", "-out", dir}, &out); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("keygen over an existing key: %v", err)
	}
}
