package oci

import (
	"strings"
	"testing"
)

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseDigest(t *testing.T) {
	for _, ok := range []string{
		"docker.io/tytn/operator-bundle@sha256:" + hex64,
		"127.0.0.1:5000/a/b@sha256:" + hex64,
		"localhost/x@sha256:" + hex64,
	} {
		d, err := ParseDigest(ok)
		if err != nil || d.String() != ok {
			t.Errorf("ParseDigest(%q) = %v, %v", ok, d, err)
		}
	}
	for in, want := range map[string]string{
		"docker.io/tytn/operator-bundle:0.1.0":                            "tag reference",
		"docker.io/tytn/operator-bundle":                                  "not pinned by digest",
		"docker.io/tytn/operator-bundle:0.1.0@sha256:" + hex64:            "carries a tag",
		"tytn/operator-bundle@sha256:" + hex64:                            "registry host",
		"docker.io/tytn/operator-bundle@sha256:abc":                       "64 lowercase hex",
		"docker.io/tytn/operator-bundle@sha512:" + hex64:                  "sha256",
		"docker.io/tytn/Operator@sha256:" + hex64:                         "invalid repository",
		"docker.io/tytn/operator-bundle@sha256:" + strings.ToUpper(hex64): "lowercase",
	} {
		_, err := ParseDigest(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseDigest(%q) = %v, want error containing %q", in, err, want)
		}
	}
}
