package push

// Pushing what is attached to an image: its SBOM and provenance artifacts
// (OCI referrers), then, with a key, cosign's signature and signed
// attestations.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/titanml/inference-stack-operator/internal/attest/provenance"
	"github.com/titanml/inference-stack-operator/internal/attest/sbom"
	"github.com/titanml/inference-stack-operator/internal/attest/signing"
	"github.com/titanml/inference-stack-operator/internal/oci"
)

// Referrer modes: how a registry keeps the list of an image's referrers.
const (
	// ReferrersAPI: the registry implements OCI 1.1's referrers API and
	// lists a manifest as soon as it is pushed with a subject.
	ReferrersAPI = "referrers API"
	// ReferrersTag: a registry without it; the pusher maintains an index
	// of the referrers under the tag sha256-<hex> (distribution-spec's
	// referrers tag schema).
	ReferrersTag = "referrers tag schema"
)

// pushReferrers pushes the artifacts attached to top next to the image d,
// and checks that the registry lists each among the image's referrers.
// go-containerregistry picks the mode: it asks the registry for the
// image's referrers and, when the API is missing, updates the fallback tag.
func (o Options) pushReferrers(ctx context.Context, top oci.Top, d name.Digest) error {
	if len(top.Referrers) == 0 {
		return nil
	}
	for _, rd := range top.Referrers {
		a, err := top.Referrer(rd)
		if err != nil {
			return fmt.Errorf("attach to %s: %w", d, err)
		}
		ad := d.Context().Digest(rd.Digest.String())
		if err := o.retry(ctx, "attach "+rd.ArtifactType+" to "+d.String(), func() error {
			return remote.Write(ad, a, o.remoteOpts(ctx)...)
		}); err != nil {
			return err
		}
	}
	mode, listed, err := o.Referrers(ctx, d)
	if err != nil {
		return err
	}
	for _, rd := range top.Referrers {
		if _, ok := listed[rd.Digest]; !ok {
			return fmt.Errorf("the registry does not list %s (%s) among the referrers of %s", rd.Digest, rd.ArtifactType, d)
		}
		o.logf("  attached %s %s (%s)", rd.ArtifactType, rd.Digest, mode)
	}
	return nil
}

// Referrers returns how the registry keeps the referrers of d (ReferrersAPI
// or ReferrersTag) and the artifactType of each, by digest.
func (o Options) Referrers(ctx context.Context, d name.Digest) (string, map[v1.Hash]string, error) {
	o = o.withDefaults()
	mode := ReferrersAPI
	var idx v1.ImageIndex
	err := o.retry(ctx, "list the referrers of "+d.String(), func() error {
		var err error
		// Without the fallback first, to tell which mode the registry has.
		idx, err = remote.Referrers(d, append(o.remoteOpts(ctx), remote.WithReferrersTagFallback(false))...)
		if err != nil && strings.Contains(err.Error(), "does not support the Referrers API") {
			mode = ReferrersTag
			idx, err = remote.Referrers(d, o.remoteOpts(ctx)...)
		}
		return err
	})
	if err != nil {
		return "", nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return "", nil, fmt.Errorf("reading the referrers of %s: %w", d, err)
	}
	// The listing's artifactType is not trusted: some registries (among
	// them go-containerregistry's own) put the config's media type there.
	// The artifact's manifest says what it is.
	out := map[v1.Hash]string{}
	for _, r := range m.Manifests {
		var raw []byte
		if err := o.retry(ctx, "read referrer "+r.Digest.String(), func() error {
			desc, err := remote.Get(d.Context().Digest(r.Digest.String()), o.remoteOpts(ctx)...)
			if err == nil {
				raw = desc.Manifest
			}
			return err
		}); err != nil {
			return "", nil, err
		}
		var am struct {
			ArtifactType string `json:"artifactType"`
			Config       struct {
				MediaType string `json:"mediaType"`
			} `json:"config"`
		}
		if err := json.Unmarshal(raw, &am); err != nil {
			return "", nil, fmt.Errorf("reading referrer %s of %s: %w", r.Digest, d, err)
		}
		if am.ArtifactType == "" {
			am.ArtifactType = am.Config.MediaType
		}
		out[r.Digest] = am.ArtifactType
	}
	return mode, out, nil
}

// sign signs the image d and attests its SBOM and provenance (read from
// the artifacts attached to top) with o.Signer.
func (o Options) sign(ctx context.Context, top oci.Top, repository string, d name.Digest) error {
	sts, err := Statements(top, repository)
	if err != nil {
		return err
	}
	so := signing.Options{Remote: o.remoteOpts(ctx), Name: o.nameOpts()}
	if err := o.retry(ctx, "sign "+d.String(), func() error { return o.Signer.Sign(ctx, d, sts, so) }); err != nil {
		return err
	}
	var types []string
	for _, s := range sts {
		types = append(types, s.PredicateType)
	}
	o.logf("  signed %s and attested %s with %s", d.DigestStr(), strings.Join(types, ", "), o.Signer.Key)
	return nil
}

// Statements are the in-toto statements an image's attestations sign: its
// provenance statement as built, and its SBOM wrapped in a statement about
// the image (predicate type https://cyclonedx.org/bom, what `cosign attest
// --type cyclonedx` writes), both naming the image as repository (as
// written, e.g. docker.io/tytn/operator) and its digest.
func Statements(top oci.Top, repository string) ([]signing.Statement, error) {
	var out []signing.Statement
	for _, rd := range top.Referrers {
		a, err := top.Referrer(rd)
		if err != nil {
			return nil, err
		}
		_, data, err := oci.ArtifactBlob(a)
		if err != nil {
			return nil, err
		}
		switch rd.ArtifactType {
		case provenance.MediaType:
			out = append(out, signing.Statement{PredicateType: provenance.PredicateType, Payload: data})
		case sbom.MediaType:
			st, err := provenance.WrapPredicate(repository, top.Descriptor.Digest, sbom.PredicateType, data)
			if err != nil {
				return nil, err
			}
			out = append(out, signing.Statement{PredicateType: sbom.PredicateType, Payload: st})
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the image has no SBOM or provenance to attest (rebuild with `make images`)")
	}
	return out, nil
}
