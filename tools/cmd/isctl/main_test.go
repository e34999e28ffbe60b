package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestCommandLine(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"help"}, &out); err != nil || !strings.Contains(out.String(), "release") {
		t.Fatalf("help: %v\n%s", err, out.String())
	}
	for args, want := range map[string]string{
		"frobnicate":                          "unknown command",
		"build -catalog everything":           "-catalog must be full or current",
		"build -platforms linux/s390x":        "unsupported platform",
		"build -channels beta":                "unknown channel archetype",
		"build -root /nonexistent-isctl-x":    "VERSION",
		"push -out /nonexistent-isctl-x":      "make images",
		"bazel-compile -platform linux/amd64": "-go is required",
		"bazel-image -image bundle -out x":    "-binary are required",
		"bazel-image -binary linux/amd64=x":   "-image (one of operator, bundle, catalog)",
	} {
		err := run(context.Background(), strings.Fields(args), &out)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("isctl %s: %v, want an error containing %q", args, err, want)
		}
	}
}
