package oci

// The image references machines read: a repository pinned by a sha256
// digest, never by a tag.

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Digest is a parsed repository@sha256:<hex> reference.
type Digest struct {
	// Repository is written as given, e.g. "docker.io/tytn/operator-bundle".
	Repository string
	// Digest is "sha256:<64 hex digits>".
	Digest string
}

func (d Digest) String() string { return d.Repository + "@" + d.Digest }

// ParseDigest accepts only a canonical digest reference: an explicit
// registry host, a repository path, no tag, and a sha256 digest.
func ParseDigest(ref string) (Digest, error) {
	repo, dig, ok := strings.Cut(ref, "@")
	if !ok {
		if _, err := name.NewTag(ref, name.StrictValidation); err == nil || strings.Contains(ref, ":") {
			return Digest{}, fmt.Errorf("%q is a tag reference; tags are mutable, pin the image by digest (repository@sha256:...)", ref)
		}
		return Digest{}, fmt.Errorf("%q is not pinned by digest (want repository@sha256:...)", ref)
	}
	if err := CheckRepository(repo); err != nil {
		return Digest{}, fmt.Errorf("%q: %w", ref, err)
	}
	hex, ok := strings.CutPrefix(dig, "sha256:")
	if !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return Digest{}, fmt.Errorf("%q: the digest must be sha256:<64 lowercase hex digits>", ref)
	}
	return Digest{Repository: repo, Digest: dig}, nil
}

// CheckRepository accepts a repository name with an explicit registry host
// ("docker.io/tytn/operator", "127.0.0.1:5000/x") and no tag or digest.
func CheckRepository(repo string) error {
	if repo == "" {
		return fmt.Errorf("empty repository")
	}
	if strings.ContainsAny(repo, "@") {
		return fmt.Errorf("repository %q contains a digest", repo)
	}
	if i := strings.LastIndex(repo, "/"); i >= 0 && strings.Contains(repo[i+1:], ":") {
		return fmt.Errorf("repository %q carries a tag; tags are mutable, pin the image by digest", repo)
	}
	host, _, ok := strings.Cut(repo, "/")
	if !ok || !(strings.ContainsAny(host, ".:") || host == "localhost") {
		return fmt.Errorf("repository %q must start with a registry host (e.g. docker.io/%s)", repo, repo)
	}
	if _, err := name.NewRepository(repo, name.StrictValidation); err != nil {
		return fmt.Errorf("invalid repository %q: %w", repo, err)
	}
	return nil
}
