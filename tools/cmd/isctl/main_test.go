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
		"frobnicate":                       "unknown command",
		"build -catalog everything":        "-catalog must be full or current",
		"build -platforms linux/s390x":     "unsupported platform",
		"build -channels beta":             "unknown channel archetype",
		"build -root /nonexistent-isctl-x": "VERSION",
		"push -out /nonexistent-isctl-x":   "make images",
		"bundle":                           "missing -version-file, -csv-base, -rbac, -operator-repo, -operator-digest-file, -out, -mtree, -labels",
		"catalog -template x":              "missing -version-file, -bundle-dir, -bundle-repo, -bundle-digest-file, -out, -mtree",
	} {
		err := run(context.Background(), strings.Fields(args), &out)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("isctl %s: %v, want an error containing %q", args, err, want)
		}
	}
}
