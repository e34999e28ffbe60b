// Package signing signs pushed images and their attestations in the format
// `cosign verify` and `cosign verify-attestation` read, and verifies them,
// with sigstore's own Go libraries (cosign v2's OCI and verification
// packages, sigstore's signature and DSSE packages) rather than by writing
// the formats by hand.
//
// What is written next to an image repository@sha256:<hex>, as cosign does:
//   - <repository>:sha256-<hex>.sig: the image's signature, a "simple
//     signing" payload naming the digest, signed with the key;
//   - <repository>:sha256-<hex>.att: one DSSE envelope per in-toto
//     statement (the SBOM and the SLSA provenance), signed with the key.
//
// Keys are cosign's: an encrypted private key as `cosign generate-key-pair`
// writes it (its password from COSIGN_PASSWORD, as cosign reads it) and a
// PEM public key. Signing is key-based only: keyless signing needs Fulcio
// and Rekor, and verification therefore skips the transparency log (the
// equivalent of `cosign verify --insecure-ignore-tlog`).
//
// Signatures are not deterministic (ECDSA is randomised), which is why
// they are made at push time and not by `make images`.
package signing

import (
	"bytes"
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	cremote "github.com/sigstore/cosign/v2/pkg/cosign/remote"
	"github.com/sigstore/cosign/v2/pkg/oci"
	"github.com/sigstore/cosign/v2/pkg/oci/empty"
	"github.com/sigstore/cosign/v2/pkg/oci/mutate"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"
	"github.com/sigstore/cosign/v2/pkg/oci/static"
	ctypes "github.com/sigstore/cosign/v2/pkg/types"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/dsse"
	sigpayload "github.com/sigstore/sigstore/pkg/signature/payload"
)

// PasswordEnv holds the private key's password, as for cosign.
const PasswordEnv = "COSIGN_PASSWORD"

// PredicateTypeAnnotation is the annotation cosign puts on an attestation
// layer to name its predicate type.
const PredicateTypeAnnotation = "predicateType"

// Statement is an in-toto statement to sign, with its predicate type.
type Statement struct {
	PredicateType string
	Payload       []byte
}

// GenerateKeyPair writes a new cosign key pair into dir, as `cosign
// generate-key-pair` does: cosign.key (ECDSA P-256, encrypted with
// password) and cosign.pub. Existing files are not overwritten.
func GenerateKeyPair(dir string, password []byte) (priv, pub string, err error) {
	keys, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return password, nil })
	if err != nil {
		return "", "", fmt.Errorf("generating a key pair: %w", err)
	}
	priv, pub = filepath.Join(dir, "cosign.key"), filepath.Join(dir, "cosign.pub")
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{priv, keys.PrivateBytes, 0o600}, {pub, keys.PublicBytes, 0o644}} {
		fh, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
		if err != nil {
			return "", "", fmt.Errorf("writing the key pair: %w", err)
		}
		_, err = fh.Write(f.data)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", "", fmt.Errorf("writing the key pair: %w", err)
		}
	}
	return priv, pub, nil
}

// Signer signs with a private key.
type Signer struct {
	sv signature.SignerVerifier
	// Key says where the key came from (a path), for messages.
	Key string
}

// LoadSigner reads a cosign private key (encrypted PEM) from path,
// decrypting it with password.
func LoadSigner(path string, password []byte) (*Signer, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the signing key: %w", err)
	}
	sv, err := cosign.LoadPrivateKey(pem, password)
	if err != nil {
		return nil, fmt.Errorf("loading the signing key %s (a cosign private key; its password comes from $%s): %w", path, PasswordEnv, err)
	}
	return &Signer{sv: sv, Key: path}, nil
}

// PublicKey returns the signer's public key in PEM.
func (s *Signer) PublicKey() ([]byte, error) {
	pub, err := s.sv.PublicKey()
	if err != nil {
		return nil, err
	}
	return cryptoutils.MarshalPublicKeyToPEM(pub)
}

// Verifier returns a verifier for the signer's own key.
func (s *Signer) Verifier() *Verifier { return &Verifier{v: s.sv} }

// Options say how to reach the registry.
type Options struct {
	Remote []remote.Option
	Name   []name.Option
}

func (o Options) oci() []ociremote.Option {
	return []ociremote.Option{ociremote.WithRemoteOptions(o.Remote...), ociremote.WithNameOptions(o.Name...)}
}

// Sign writes the image's signature and the signed attestations of
// statements next to the image ref. Signing again with the same key is
// harmless: an identical signature is kept, and an attestation whose
// statement is already there signed by this key is not written again.
func (s *Signer) Sign(ctx context.Context, ref name.Digest, statements []Statement, o Options) error {
	se := ociremote.SignedUnknown(ref, o.oci()...)
	// The image signature: cosign's simple-signing payload for the digest.
	payload, err := (&sigpayload.Cosign{Image: ref}).MarshalJSON()
	if err != nil {
		return fmt.Errorf("sign %s: %w", ref, err)
	}
	raw, err := s.sv.SignMessage(bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("sign %s: %w", ref, err)
	}
	sig, err := static.NewSignature(payload, base64.StdEncoding.EncodeToString(raw))
	if err != nil {
		return fmt.Errorf("sign %s: %w", ref, err)
	}
	signed, err := mutate.AttachSignatureToEntity(se, sig, mutate.WithDupeDetector(cremote.NewDupeDetector(s.sv)))
	if err != nil {
		return fmt.Errorf("sign %s: %w", ref, err)
	}
	if err := ociremote.WriteSignatures(ref.Repository, signed, o.oci()...); err != nil {
		return fmt.Errorf("writing the signature of %s: %w", ref, err)
	}

	// The attestations: ECDSA signatures differ each time, so an
	// unchanged statement is recognised by verifying what is there.
	present, _ := s.Verifier().Attestations(ctx, ref, o)
	wrapped := dsse.WrapSigner(s.sv, ctypes.IntotoPayloadType)
	changed := false
	attested := signed
	for _, st := range statements {
		if containsPayload(present[st.PredicateType], st.Payload) {
			continue
		}
		env, err := wrapped.SignMessage(bytes.NewReader(st.Payload))
		if err != nil {
			return fmt.Errorf("attest %s for %s: %w", st.PredicateType, ref, err)
		}
		att, err := static.NewAttestation(env, static.WithLayerMediaType(ctypes.DssePayloadType),
			static.WithAnnotations(map[string]string{PredicateTypeAnnotation: st.PredicateType}))
		if err != nil {
			return fmt.Errorf("attest %s for %s: %w", st.PredicateType, ref, err)
		}
		// One attestation per predicate type: the new one replaces any
		// earlier one of its type.
		if attested, err = mutate.AttachAttestationToEntity(attested, att, mutate.WithReplaceOp(replacePredicate(st.PredicateType))); err != nil {
			return fmt.Errorf("attest %s for %s: %w", st.PredicateType, ref, err)
		}
		changed = true
	}
	if !changed {
		return nil
	}
	if err := ociremote.WriteAttestations(ref.Repository, attested, o.oci()...); err != nil {
		return fmt.Errorf("writing the attestations of %s: %w", ref, err)
	}
	return nil
}

// replacePredicate is a cosign ReplaceOp that drops the attestations of one
// predicate type (cosign's own prints a line for every one it keeps).
type replacePredicate string

func (r replacePredicate) Replace(base oci.Signatures, att oci.Signature) (oci.Signatures, error) {
	sigs, err := base.Get()
	if err != nil {
		return nil, err
	}
	var keep []oci.Signature
	for _, s := range sigs {
		if ann, err := s.Annotations(); err == nil && ann[PredicateTypeAnnotation] == string(r) {
			continue
		}
		keep = append(keep, s)
	}
	return mutate.AppendSignatures(empty.Signatures(), false, append(keep, att)...)
}

func containsPayload(payloads [][]byte, p []byte) bool {
	for _, q := range payloads {
		if bytes.Equal(q, p) {
			return true
		}
	}
	return false
}

// Verifier checks signatures with a public key.
type Verifier struct {
	v signature.Verifier
}

// LoadVerifier reads a PEM public key (cosign.pub) from path.
func LoadVerifier(path string) (*Verifier, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the public key: %w", err)
	}
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(data)
	if err != nil {
		return nil, fmt.Errorf("reading the public key %s: %w", path, err)
	}
	v, err := signature.LoadVerifier(pub, crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("loading the public key %s: %w", path, err)
	}
	return &Verifier{v: v}, nil
}

func (v *Verifier) checkOpts(o Options, claims func(oci.Signature, v1.Hash, map[string]any) error) *cosign.CheckOpts {
	return &cosign.CheckOpts{
		RegistryClientOpts: o.oci(),
		SigVerifier:        v.v,
		ClaimVerifier:      claims,
		// Key-based signatures without a transparency log: what
		// `cosign verify --key ... --insecure-ignore-tlog` checks.
		IgnoreTlog: true,
		IgnoreSCT:  true,
		Offline:    true,
	}
}

// VerifyImage checks that ref carries a signature by the key over its
// digest (cosign's simple-signing claim), as `cosign verify` does.
func (v *Verifier) VerifyImage(ctx context.Context, ref name.Digest, o Options) error {
	sigs, _, err := cosign.VerifyImageSignatures(ctx, ref, v.checkOpts(o, cosign.SimpleClaimVerifier))
	if err != nil {
		return fmt.Errorf("no valid signature of %s by the key: %w", ref, err)
	}
	if len(sigs) == 0 {
		return fmt.Errorf("no valid signature of %s by the key", ref)
	}
	return nil
}

// Attestations returns the in-toto statements about ref that are signed
// by the key and whose subject is ref's digest (as `cosign
// verify-attestation` checks them), by predicate type. It fails when there
// is none.
func (v *Verifier) Attestations(ctx context.Context, ref name.Digest, o Options) (map[string][][]byte, error) {
	atts, _, err := cosign.VerifyImageAttestations(ctx, ref, v.checkOpts(o, cosign.IntotoSubjectClaimVerifier))
	if err != nil {
		return nil, fmt.Errorf("no valid attestation of %s by the key: %w", ref, err)
	}
	out := map[string][][]byte{}
	for _, a := range atts {
		env, err := a.Payload()
		if err != nil {
			return nil, fmt.Errorf("reading an attestation of %s: %w", ref, err)
		}
		var e struct {
			PayloadType string `json:"payloadType"`
			Payload     string `json:"payload"`
		}
		if err := json.Unmarshal(env, &e); err != nil || e.PayloadType != ctypes.IntotoPayloadType {
			return nil, fmt.Errorf("an attestation of %s is not a DSSE envelope of an in-toto statement", ref)
		}
		st, err := base64.StdEncoding.DecodeString(e.Payload)
		if err != nil {
			return nil, fmt.Errorf("decoding an attestation of %s: %w", ref, err)
		}
		var head struct {
			PredicateType string `json:"predicateType"`
		}
		if err := json.Unmarshal(st, &head); err != nil || head.PredicateType == "" {
			return nil, fmt.Errorf("an attestation of %s has no predicate type", ref)
		}
		out[head.PredicateType] = append(out[head.PredicateType], st)
	}
	if len(out) == 0 {
		return nil, errors.New("no attestation")
	}
	return out, nil
}

// PredicateTypes lists the keys of an Attestations result, sorted.
func PredicateTypes(atts map[string][][]byte) []string {
	var out []string
	for k := range atts {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
