package release

// Verifying a published catalog: what a platform team runs before it lets
// a cluster pull from it. Every bundle the catalog pins, and the operator
// image each bundle pins, must rebuild from its recorded commit to the
// pinned digest, carry (as OCI referrers) exactly the SBOM and provenance
// the rebuild attaches, and be signed, with those two documents attested,
// by the given key. The catalog itself is signed and attested too; it is
// not rebuilt, since it is assembled at release time from records that
// only the next commit holds, but every bundle it pins is.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"

	"github.com/titanml/inference-stack-operator/internal/attest/provenance"
	"github.com/titanml/inference-stack-operator/internal/attest/sbom"
	"github.com/titanml/inference-stack-operator/internal/attest/signing"
	"github.com/titanml/inference-stack-operator/internal/build"
	"github.com/titanml/inference-stack-operator/internal/catalog"
	"github.com/titanml/inference-stack-operator/internal/oci"
	"github.com/titanml/inference-stack-operator/internal/push"
)

// CatalogOptions configure VerifyCatalog.
type CatalogOptions struct {
	// Catalog is the published catalog image (a tag or a digest).
	Catalog string
	// Key verifies the signatures; required.
	Key *signing.Verifier
	// Registry says how to reach the registries (credentials, -insecure).
	Registry push.Options
	// WorkDir, Env and Log are as for Verify.
	WorkDir string
	Env     []string
	Log     io.Writer
	// Out receives one line per image.
	Out io.Writer
}

// Check is the verdict on one image.
type Check struct {
	// Kind is catalog, bundle or operator.
	Kind    string
	Version string
	Ref     string
	OK      bool
	// Detail says what was checked, or what did not match.
	Detail string
}

func (c Check) String() string {
	status := "ok  "
	if !c.OK {
		status = "FAIL"
	}
	v := c.Version
	if v == "" {
		v = "-"
	}
	return fmt.Sprintf("%s %-8s %-8s %s  %s", status, c.Kind, v, c.Ref, c.Detail)
}

// ErrMismatch is returned (wrapped) when an image does not verify.
var ErrMismatch = errors.New("verification failed")

// VerifyCatalog verifies the published catalog o.Catalog against the
// releases recorded in the repository at root. It writes one line per
// image to o.Out and stops at the first image that does not verify,
// returning an error wrapping ErrMismatch.
func VerifyCatalog(ctx context.Context, root string, o CatalogOptions) ([]Check, error) {
	if o.Key == nil {
		return nil, errors.New("verifying a catalog needs the public key its images are signed with")
	}
	work := o.WorkDir
	if work == "" {
		var err error
		if work, err = os.MkdirTemp("", "isctl-verify-"); err != nil {
			return nil, fmt.Errorf("creating the verification directory: %w", err)
		}
		defer os.RemoveAll(work)
	}
	v := &verifier{ctx: ctx, root: root, work: work, o: o}
	rels, err := catalog.LoadReleases(filepath.Join(root, catalog.ReleasedDir))
	if err != nil {
		return nil, fmt.Errorf("reading the recorded releases: %w", err)
	}

	cfg, err := v.catalog()
	if err != nil {
		return v.checks, err
	}
	bundles := append([]declcfg.Bundle(nil), cfg.Bundles...)
	sort.SliceStable(bundles, func(i, j int) bool { return versionLess(bundleVersion(bundles[i]), bundleVersion(bundles[j])) })
	for _, b := range bundles {
		version := bundleVersion(b)
		rel, ok := catalog.Find(rels, version)
		if !ok {
			return v.checks, v.fail("bundle", version, b.Image, "no release of %s is recorded in %s of this repository", version, catalog.ReleasedDir)
		}
		if err := v.release(rel, b); err != nil {
			return v.checks, err
		}
	}
	return v.checks, nil
}

type verifier struct {
	ctx    context.Context
	root   string
	work   string
	o      CatalogOptions
	checks []Check
}

func (v *verifier) report(c Check) {
	v.checks = append(v.checks, c)
	if v.o.Out != nil {
		fmt.Fprintln(v.o.Out, c)
	}
}

func (v *verifier) ok(kind, version, ref, detail string) {
	v.report(Check{Kind: kind, Version: version, Ref: ref, OK: true, Detail: detail})
}

func (v *verifier) fail(kind, version, ref, format string, args ...any) error {
	detail := fmt.Sprintf(format, args...)
	v.report(Check{Kind: kind, Version: version, Ref: ref, Detail: detail})
	return fmt.Errorf("%w: %s %s %s: %s", ErrMismatch, kind, version, ref, detail)
}

func (v *verifier) remote() []remote.Option { return v.o.Registry.Remote(v.ctx) }

func (v *verifier) signingOptions() signing.Options {
	return signing.Options{Remote: v.remote(), Name: v.o.Registry.Names()}
}

// catalog resolves and checks the catalog image, and returns its FBC.
func (v *verifier) catalog() (*declcfg.DeclarativeConfig, error) {
	ref, err := name.ParseReference(v.o.Catalog, v.o.Registry.Names()...)
	if err != nil {
		return nil, fmt.Errorf("catalog reference %q: %w", v.o.Catalog, err)
	}
	var desc *remote.Descriptor
	if err := v.o.Registry.Retry(v.ctx, "pull "+ref.String(), func() error {
		var err error
		desc, err = remote.Get(ref, v.remote()...)
		return err
	}); err != nil {
		return nil, v.fail("catalog", "", v.o.Catalog, "cannot pull it: %v", err)
	}
	d := ref.Context().Digest(desc.Digest.String())
	show := d.String()
	img, err := desc.Image()
	if err != nil {
		return nil, v.fail("catalog", "", show, "not a single image: %v", err)
	}
	cfg, err := push.CatalogConfig(v.ctx, img)
	if err != nil {
		return nil, v.fail("catalog", "", show, "%v", err)
	}
	// Its SBOM and provenance: present, about this digest, consistent with
	// its content, and attested with the key.
	docs, err := v.remoteDocuments(d)
	if err != nil {
		return nil, v.fail("catalog", "", show, "%v", err)
	}
	st, prov, err := provenance.Read(docs[provenance.MediaType])
	if err != nil || prov == nil || st.GetSubject()[0].GetDigest()["sha256"] != desc.Digest.Hex {
		return nil, v.fail("catalog", "", show, "its provenance is not SLSA provenance about this image (%v)", err)
	}
	listed := map[string]bool{}
	for _, dep := range prov.GetBuildDefinition().GetResolvedDependencies() {
		listed[dep.GetName()] = true
	}
	if missing := pinnedNotListed(cfg, listed); len(missing) > 0 {
		return nil, v.fail("catalog", "", show, "its provenance does not list the bundles it pins: %s", strings.Join(missing, ", "))
	}
	want, err := statementsOf(docs, st.GetSubject()[0].GetName(), desc.Digest)
	if err != nil {
		return nil, v.fail("catalog", "", show, "%v", err)
	}
	if err := v.signed(d, want); err != nil {
		return nil, v.fail("catalog", "", show, "%v", err)
	}
	v.ok("catalog", "", show, fmt.Sprintf("signed; SBOM and provenance attached and attested; pins %d bundle(s)", len(cfg.Bundles)))
	return cfg, nil
}

// release checks the bundle b that the catalog pins for rel's version, and
// the operator image it pins, against a rebuild of rel.
func (v *verifier) release(rel catalog.Release, b declcfg.Bundle) error {
	version := rel.Version
	out, err := rebuild(v.ctx, v.root, v.work, rel, VerifyOptions{Env: v.o.Env, Log: v.o.Log})
	if err != nil {
		return v.fail("bundle", version, b.Image, "rebuild from %s failed: %v", short(rel.Revision), err)
	}
	refs, err := build.ReadDigests(out)
	if err != nil {
		return v.fail("bundle", version, b.Image, "reading the rebuild: %v", err)
	}
	from := "rebuilt from " + short(rel.Revision)
	bundle, operator := refs[build.Bundle], refs[build.Operator]
	if b.Image != bundle.String() {
		return v.fail("bundle", version, b.Image, "%s gives %s (recorded: %s)", from, bundle, rel.BundleImage)
	}
	if err := v.image(build.Bundle, version, out, bundle.String()); err != nil {
		return err
	}
	v.ok("bundle", version, b.Image, from+"; SBOM and provenance match; signed")
	// The operator the rebuilt bundle pins is the rebuilt operator; the
	// catalog must name the same one among the bundle's related images.
	related := false
	for _, ri := range b.RelatedImages {
		related = related || ri.Image == operator.String()
	}
	if !related || rel.OperatorImage != operator.String() {
		return v.fail("operator", version, operator.String(), "%s, but the catalog's bundle names %v and the record %s", from, b.RelatedImages, rel.OperatorImage)
	}
	if err := v.image(build.Operator, version, out, operator.String()); err != nil {
		return err
	}
	v.ok("operator", version, operator.String(), from+"; SBOM and provenance match; signed")
	return nil
}

// image checks that the published image ref (the digest the rebuild in out
// produced as image n) is in its registry with exactly the rebuild's SBOM
// and provenance as referrers, signed and attested with the key.
func (v *verifier) image(n, version, out, ref string) error {
	d, err := name.NewDigest(ref, v.o.Registry.Names()...)
	if err != nil {
		return v.fail(n, version, ref, "%v", err)
	}
	if err := v.o.Registry.Retry(v.ctx, "check "+ref, func() error {
		_, err := remote.Head(d, v.remote()...)
		return err
	}); err != nil {
		return v.fail(n, version, ref, "not in its registry: %v", err)
	}
	top, err := oci.ReadLayout(filepath.Join(out, "images", n))
	if err != nil {
		return v.fail(n, version, ref, "reading the rebuild: %v", err)
	}
	rebuilt := map[v1.Hash]string{}
	for _, rd := range top.Referrers {
		rebuilt[rd.Digest] = rd.ArtifactType
	}
	if len(top.ReferrersOfType(sbom.MediaType)) == 0 || len(top.ReferrersOfType(provenance.MediaType)) == 0 {
		return v.fail(n, version, ref, "the rebuild attaches no SBOM or provenance (its revision predates them)")
	}
	_, published, err := v.o.Registry.Referrers(v.ctx, d)
	if err != nil {
		return v.fail(n, version, ref, "listing its referrers: %v", err)
	}
	for dg, at := range rebuilt {
		if _, ok := published[dg]; !ok {
			return v.fail(n, version, ref, "its %s is not the rebuild's (%s is not among its referrers)", kindOf(at), dg)
		}
	}
	for dg, at := range published {
		if _, ok := rebuilt[dg]; !ok && (at == sbom.MediaType || at == provenance.MediaType) {
			return v.fail(n, version, ref, "it carries another %s (%s) than the rebuild's", kindOf(at), dg)
		}
	}
	// The statements name the repository as the build wrote it, which is
	// the reference's as the catalog and the record write it.
	want, err := push.Statements(top, repoOf(ref))
	if err != nil {
		return v.fail(n, version, ref, "%v", err)
	}
	if err := v.signed(d, want); err != nil {
		return v.fail(n, version, ref, "%v", err)
	}
	return nil
}

// signed checks the signature of d and that its attestations signed by the
// key are exactly the statements want (one per predicate type).
func (v *verifier) signed(d name.Digest, want []signing.Statement) error {
	so := v.signingOptions()
	if err := v.o.Key.VerifyImage(v.ctx, d, so); err != nil {
		return err
	}
	atts, err := v.o.Key.Attestations(v.ctx, d, so)
	if err != nil {
		return err
	}
	for _, w := range want {
		got := atts[w.PredicateType]
		if len(got) == 0 {
			return fmt.Errorf("no %s attestation signed by the key", w.PredicateType)
		}
		for _, g := range got {
			if !bytes.Equal(g, w.Payload) {
				return fmt.Errorf("its signed %s attestation differs from its %s", w.PredicateType, kindOfPredicate(w.PredicateType))
			}
		}
	}
	return nil
}

// remoteDocuments pulls the SBOM and provenance attached to d in its
// registry; there must be exactly one of each.
func (v *verifier) remoteDocuments(d name.Digest) (map[string][]byte, error) {
	_, listed, err := v.o.Registry.Referrers(v.ctx, d)
	if err != nil {
		return nil, fmt.Errorf("listing its referrers: %w", err)
	}
	docs := map[string][]byte{}
	for dg, at := range listed {
		if at != sbom.MediaType && at != provenance.MediaType {
			continue
		}
		if _, dup := docs[at]; dup {
			return nil, fmt.Errorf("it carries more than one %s", kindOf(at))
		}
		var data []byte
		if err := v.o.Registry.Retry(v.ctx, "pull "+dg.String(), func() error {
			img, err := remote.Image(d.Context().Digest(dg.String()), v.remote()...)
			if err != nil {
				return err
			}
			m, blob, err := oci.ArtifactBlob(img)
			if err == nil && (m.Subject == nil || m.Subject.Digest.String() != d.DigestStr()) {
				err = fmt.Errorf("artifact %s does not refer to the image", dg)
			}
			data = blob
			return err
		}); err != nil {
			return nil, err
		}
		docs[at] = data
	}
	for _, at := range []string{sbom.MediaType, provenance.MediaType} {
		if docs[at] == nil {
			return nil, fmt.Errorf("it carries no %s", kindOf(at))
		}
	}
	return docs, nil
}

// statementsOf are the statements the attestations of an image must sign,
// from its published SBOM and provenance.
func statementsOf(docs map[string][]byte, repository string, digest v1.Hash) ([]signing.Statement, error) {
	wrapped, err := provenance.WrapPredicate(repository, digest, sbom.PredicateType, docs[sbom.MediaType])
	if err != nil {
		return nil, err
	}
	return []signing.Statement{
		{PredicateType: sbom.PredicateType, Payload: wrapped},
		{PredicateType: provenance.PredicateType, Payload: docs[provenance.MediaType]},
	}, nil
}

// repoOf is the repository part of an image reference as written.
func repoOf(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

// pinnedNotListed returns the bundles the catalog pins that its provenance
// does not list among its resolved dependencies.
func pinnedNotListed(cfg *declcfg.DeclarativeConfig, listed map[string]bool) []string {
	var missing []string
	for _, b := range cfg.Bundles {
		if !listed[b.Image] {
			missing = append(missing, b.Image)
		}
	}
	return missing
}

func bundleVersion(b declcfg.Bundle) string {
	if props, err := property.Parse(b.Properties); err == nil && len(props.Packages) == 1 {
		return props.Packages[0].Version
	}
	return ""
}

func versionLess(a, b string) bool {
	va, errA := semver.Parse(a)
	vb, errB := semver.Parse(b)
	if errA != nil || errB != nil {
		return a < b
	}
	return va.LT(vb)
}

func kindOf(artifactType string) string {
	switch artifactType {
	case sbom.MediaType:
		return "SBOM"
	case provenance.MediaType:
		return "provenance"
	}
	return artifactType
}

func kindOfPredicate(predicateType string) string {
	if predicateType == sbom.PredicateType {
		return "SBOM"
	}
	return "provenance"
}

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
