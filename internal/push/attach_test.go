package push

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/cosign/v2/pkg/cosign"

	"github.com/titanml/inference-stack-operator/internal/attest/provenance"
	"github.com/titanml/inference-stack-operator/internal/attest/sbom"
	"github.com/titanml/inference-stack-operator/internal/attest/signing"
	"github.com/titanml/inference-stack-operator/internal/build"
	"github.com/titanml/inference-stack-operator/internal/oci"
)

// testKey writes a cosign key pair (as `cosign generate-key-pair` does,
// encrypted with a password) and returns the paths of both halves.
func testKey(t *testing.T, password string) (priv, pub string) {
	t.Helper()
	keys, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return []byte(password), nil })
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	priv, pub = filepath.Join(dir, "cosign.key"), filepath.Join(dir, "cosign.pub")
	if err := os.WriteFile(priv, keys.PrivateBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pub, keys.PublicBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	return priv, pub
}

func modes() map[string][]registry.Option {
	return map[string][]registry.Option{
		ReferrersAPI: {registry.WithReferrersSupport(true)},
		ReferrersTag: nil,
	}
}

// TestReferrersInBothModes pushes the three images with their SBOM and
// provenance to a registry with the OCI 1.1 referrers API and to one
// without it: the artifacts are listed as the images' referrers either
// way, through the API or the sha256-<hex> tag, and pull back intact.
func TestReferrersInBothModes(t *testing.T) {
	for mode, opts := range modes() {
		t.Run(mode, func(t *testing.T) {
			reg := newRegistryWith(t, nil, opts...)
			out, refs := buildOut(t, reg)
			var log bytes.Buffer
			o := testOptions(&log)
			for i := 0; i < 2; i++ { // the second push changes nothing
				if _, err := Outputs(context.Background(), out, build.Names, o); err != nil {
					t.Fatalf("push %d: %v\n%s", i+1, err, log.String())
				}
			}
			if !strings.Contains(log.String(), "not signing: no signing key given") {
				t.Errorf("the log does not say that nothing is signed:\n%s", log.String())
			}
			for _, n := range build.Names {
				top, err := oci.ReadLayout(filepath.Join(out, "images", n))
				if err != nil {
					t.Fatal(err)
				}
				d, _ := name.NewDigest(refs[n].String())
				got, listed, err := o.withDefaults().Referrers(context.Background(), d)
				if err != nil {
					t.Fatal(err)
				}
				if got != mode || len(listed) != 2 {
					t.Fatalf("%s: mode %q, referrers %v", n, got, listed)
				}
				for _, rd := range top.Referrers {
					if listed[rd.Digest] != rd.ArtifactType {
						t.Errorf("%s: %s listed as %q, want %q", n, rd.Digest, listed[rd.Digest], rd.ArtifactType)
					}
					a, err := remote.Image(d.Context().Digest(rd.Digest.String()))
					if err != nil {
						t.Fatal(err)
					}
					m, data, err := oci.ArtifactBlob(a)
					if err != nil {
						t.Fatal(err)
					}
					la, _ := top.Referrer(rd)
					_, want, _ := oci.ArtifactBlob(la)
					if !bytes.Equal(data, want) || m.Subject.Digest != top.Descriptor.Digest {
						t.Errorf("%s: pulled %s differs from the layout's", n, rd.ArtifactType)
					}
				}
				tag, _ := name.NewTag(refs[n].Repository + ":sha256-" + strings.TrimPrefix(refs[n].Digest, "sha256:"))
				_, err = remote.Head(tag)
				if (mode == ReferrersTag) != (err == nil) {
					t.Errorf("%s in mode %s: referrers tag: %v", n, mode, err)
				}
			}
		})
	}
}

// TestSignedPushVerifiesWithCosign signs the pushed images and their
// attestations with a test key, and checks them with cosign's own
// verification (what `cosign verify` and `cosign verify-attestation` run).
func TestSignedPushVerifiesWithCosign(t *testing.T) {
	for mode, opts := range modes() {
		t.Run(mode, func(t *testing.T) {
			reg := newRegistryWith(t, nil, opts...)
			out, refs := buildOut(t, reg)
			priv, pub := testKey(t, "test password")
			if _, err := signing.LoadSigner(priv, []byte("wrong")); err == nil || !strings.Contains(err.Error(), signing.PasswordEnv) {
				t.Fatalf("wrong password: %v", err)
			}
			signer, err := signing.LoadSigner(priv, []byte("test password"))
			if err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			o := testOptions(&log)
			o.Signer = signer
			if _, err := Outputs(context.Background(), out, build.Names, o); err != nil {
				t.Fatalf("%v\n%s", err, log.String())
			}
			if strings.Contains(log.String(), "test password") {
				t.Error("the password is in the log")
			}
			v, err := signing.LoadVerifier(pub)
			if err != nil {
				t.Fatal(err)
			}
			_, otherPub := testKey(t, "")
			other, _ := signing.LoadVerifier(otherPub)
			so := signing.Options{Remote: o.withDefaults().remoteOpts(context.Background())}
			sigTags := map[string]string{}
			for _, n := range build.Names {
				d, _ := name.NewDigest(refs[n].String())
				if err := v.VerifyImage(context.Background(), d, so); err != nil {
					t.Fatalf("%s: %v", n, err)
				}
				if err := other.VerifyImage(context.Background(), d, so); err == nil {
					t.Errorf("%s verifies with another key", n)
				}
				atts, err := v.Attestations(context.Background(), d, so)
				if err != nil {
					t.Fatal(err)
				}
				top, _ := oci.ReadLayout(filepath.Join(out, "images", n))
				want, _ := Statements(top, refs[n].Repository)
				if got := strings.Join(signing.PredicateTypes(atts), " "); got != sbom.PredicateType+" "+provenance.PredicateType {
					t.Fatalf("%s: attestations %s", n, got)
				}
				for _, w := range want {
					if len(atts[w.PredicateType]) != 1 || !bytes.Equal(atts[w.PredicateType][0], w.Payload) {
						t.Errorf("%s: the %s attestation is not the built statement", n, w.PredicateType)
					}
				}
				for _, suffix := range []string{".sig", ".att"} {
					tag, _ := name.NewTag(refs[n].Repository + ":sha256-" + strings.TrimPrefix(refs[n].Digest, "sha256:") + suffix)
					desc, err := remote.Head(tag)
					if err != nil {
						t.Fatalf("%s: %v", tag, err)
					}
					sigTags[tag.String()] = desc.Digest.String()
				}
			}
			// Pushing and signing again keeps the signatures and attestations.
			if _, err := Outputs(context.Background(), out, build.Names, o); err != nil {
				t.Fatal(err)
			}
			for tag, digest := range sigTags {
				tr, _ := name.NewTag(tag)
				if desc, err := remote.Head(tr); err != nil || desc.Digest.String() != digest {
					t.Errorf("%s changed on the second push: %v", tag, err)
				}
			}
		})
	}
}
