// Package supplychain checks the signatures and attestations `isctl push
// --sign-key` writes with the real cosign CLI (built from the pinned
// wrapper module e2e/binaries/cosign and cached like the cluster's
// binaries; a runfile under Bazel), against go-containerregistry's
// registry on loopback, with and without the OCI referrers API.
package supplychain

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/internal/attest/provenance"
	"github.com/titanml/inference-stack-operator/internal/attest/sbom"
	"github.com/titanml/inference-stack-operator/internal/attest/signing"
	"github.com/titanml/inference-stack-operator/internal/build"
	"github.com/titanml/inference-stack-operator/internal/oci"
	"github.com/titanml/inference-stack-operator/internal/push"
)

// cosignBinary is the cosign CLI of the cosign build of
// e2e/harness/localcluster/binaries.json (v2.5.0, from the wrapper module
// e2e/binaries/cosign), built and cached like the cluster's binaries; under
// Bazel, the runfile of @e2e_cosign.
func cosignBinary(t *testing.T) string {
	t.Helper()
	var logs bytes.Buffer
	p, err := localcluster.EnsureOutputs(context.Background(), "cosign", "cosign", &logs)
	t.Log(strings.TrimSpace(logs.String()))
	if err != nil {
		t.Fatal(err)
	}
	return p[0]
}

// layout writes a small image to dir with an SBOM and a provenance
// statement attached, as `isctl build` does, and returns its reference in
// repo.
func layout(t *testing.T, dir, repo string) (oci.Top, oci.Digest) {
	t.Helper()
	l, err := oci.LayerCache{}.Layer([]oci.Entry{oci.File("hello.txt", 0o644, []byte("hello\n"))}, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	img, err := oci.Image(oci.Config{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Created: time.Unix(0, 0)}, []oci.LayerSpec{{Layer: l}})
	if err != nil {
		t.Fatal(err)
	}
	if err := oci.WriteLayout(dir, img, nil, "1.0.0"); err != nil {
		t.Fatal(err)
	}
	top, err := oci.ReadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := sbom.Generate(sbom.Input{Subject: sbom.Subject{Repository: repo, Digest: top.Descriptor.Digest, Version: "1.0.0"}, Image: img, Tool: sbom.Tool{Name: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := provenance.Statement(provenance.Input{
		Repository: repo, Digest: top.Descriptor.Digest, BuildType: "https://example.com/test", BuilderID: "https://example.com/test",
		ExternalParameters: map[string]any{"version": "1.0.0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := build.AttachDocuments(dir, top, doc, st); err != nil {
		t.Fatal(err)
	}
	if top, err = oci.ReadLayout(dir); err != nil {
		t.Fatal(err)
	}
	ref, err := oci.ParseDigest(repo + "@" + top.Descriptor.Digest.String())
	if err != nil {
		t.Fatal(err)
	}
	return top, ref
}

// TestCosignVerifiesSignedPushes: `cosign verify` and `cosign
// verify-attestation --type slsaprovenance1|cyclonedx` accept what a push
// with a key writes, and the attested statements are the image's SBOM and
// provenance; with another key, cosign refuses.
func TestCosignVerifiesSignedPushes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the cosign CLI (first run only)")
	}
	cosign := cosignBinary(t)
	keys := t.TempDir()
	priv, pub, err := signing.GenerateKeyPair(keys, []byte("test password"))
	if err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	_, otherPub, err := signing.GenerateKeyPair(other, nil)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := signing.LoadSigner(priv, []byte("test password"))
	if err != nil {
		t.Fatal(err)
	}
	for mode, opts := range map[string][]registry.Option{
		push.ReferrersAPI: {registry.WithReferrersSupport(true)},
		push.ReferrersTag: nil,
	} {
		t.Run(mode, func(t *testing.T) {
			srv := httptest.NewServer(registry.New(append([]registry.Option{registry.Logger(log.New(io.Discard, "", 0))}, opts...)...))
			defer srv.Close()
			reg := strings.TrimPrefix(srv.URL, "http://")
			top, ref := layout(t, filepath.Join(t.TempDir(), "image"), reg+"/tytn/hello")
			var logs bytes.Buffer
			po := push.Options{Keychain: authn.NewMultiKeychain(), Backoff: time.Millisecond, Log: &logs, Signer: signer}
			if err := push.Image(context.Background(), top, ref, "1.0.0", po); err != nil {
				t.Fatalf("%v\n%s", err, logs.String())
			}
			if !strings.Contains(logs.String(), "("+mode+")") {
				t.Errorf("not attached through the %s:\n%s", mode, logs.String())
			}
			want, err := push.Statements(top, ref.Repository)
			if err != nil {
				t.Fatal(err)
			}
			home := t.TempDir()
			run := func(key string, args ...string) (string, error) {
				args = append(args, "--key", key, "--insecure-ignore-tlog=true", "--allow-http-registry", "--output", "json", ref.String())
				cmd := exec.Command(cosign, args...)
				// Nothing of the user's: no sigstore TUF cache, no docker config.
				cmd.Env = append(os.Environ(), "HOME="+home, "TUF_ROOT="+filepath.Join(home, "tuf"), "DOCKER_CONFIG="+filepath.Join(home, "docker"))
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err := cmd.Run()
				t.Logf("cosign %s: %v\n%s", strings.Join(args[:len(args)-7], " "), err, strings.TrimSpace(stderr.String()))
				return stdout.String(), err
			}
			out, err := run(pub, "verify")
			if err != nil || !strings.Contains(out, `"docker-manifest-digest":"`+ref.Digest+`"`) {
				t.Fatalf("cosign verify: %v\n%s", err, out)
			}
			for typ, predicate := range map[string]string{"slsaprovenance1": provenance.PredicateType, "cyclonedx": sbom.PredicateType} {
				out, err := run(pub, "verify-attestation", "--type", typ)
				if err != nil {
					t.Fatalf("cosign verify-attestation --type %s: %v", typ, err)
				}
				// One DSSE envelope per line: its payload is the statement.
				var env struct{ Payload string }
				if err := json.Unmarshal([]byte(strings.SplitN(strings.TrimSpace(out), "\n", 2)[0]), &env); err != nil {
					t.Fatalf("cosign output %q: %v", out, err)
				}
				got, _ := base64.StdEncoding.DecodeString(env.Payload)
				found := false
				for _, w := range want {
					found = found || (w.PredicateType == predicate && bytes.Equal(w.Payload, got))
				}
				if !found {
					t.Errorf("cosign verified a %s attestation that is not the image's:\n%s", typ, got)
				}
			}
			if _, err := run(otherPub, "verify"); err == nil {
				t.Error("cosign verify accepted another key")
			}
			if _, err := run(otherPub, "verify-attestation", "--type", "slsaprovenance1"); err == nil {
				t.Error("cosign verify-attestation accepted another key")
			}
		})
	}
}
