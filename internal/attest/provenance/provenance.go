// Package provenance writes how an image was built as an in-toto Statement
// (v1) with a SLSA Provenance v1 predicate, using the in-toto project's own
// Go types and validators (github.com/in-toto/attestation).
//
// The statement is deterministic: it records the build's inputs (source
// revision, the command and its parameters, VERSION, Go version, platforms,
// SOURCE_DATE_EPOCH) and the resolved dependencies, never when or where the
// build ran (SLSA's runDetails.metadata, with its timestamps and invocation
// ID, is left out), and it is serialised in a canonical form. A rebuild of
// the same source therefore writes the same bytes, which is what lets
// `isctl verify` compare a published statement with its own.
package provenance

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	slsa "github.com/in-toto/attestation/go/predicates/provenance/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

const (
	// MediaType is the media type of in-toto statements, and the
	// artifactType of the OCI artifacts that carry them.
	MediaType = "application/vnd.in-toto+json"
	// FileName is the name the statement is given in its artifact.
	FileName = "provenance.intoto.json"
	// PredicateType is SLSA Provenance v1.
	PredicateType = "https://slsa.dev/provenance/v1"
	// PredicateTypeAnnotation is the annotation that names the predicate of
	// an in-toto artifact (as other tools attaching in-toto referrers do).
	PredicateTypeAnnotation = "in-toto.io/predicate-type"
)

// Resource is a resolved dependency or a byproduct: at least a name or a
// URI, and a digest when the content is pinned.
type Resource struct {
	Name, URI string
	// Digest maps an algorithm of the in-toto digest set (sha256,
	// gitCommit, dirHash) to a lowercase hex value.
	Digest      map[string]string
	Annotations map[string]any
}

// Input is everything a statement records.
type Input struct {
	// Subject is the image: its repository and manifest digest.
	Repository string
	Digest     v1.Hash
	// BuildType is the URI that says how to read the parameters.
	BuildType string
	// BuilderID identifies the tool that built the image, and
	// BuilderVersion its versions.
	BuilderID      string
	BuilderVersion map[string]string
	// ExternalParameters are the inputs the person running the build
	// chooses; InternalParameters those the build tool fixes. Any value
	// encoding/json accepts.
	ExternalParameters any
	InternalParameters any
	Dependencies       []Resource
	Byproducts         []Resource
}

// Statement returns the in-toto statement of in, validated and in canonical
// JSON (protojson's field order and sorted map keys, two-space indentation,
// a final newline).
func Statement(in Input) ([]byte, error) {
	ext, err := toStruct(in.ExternalParameters)
	if err != nil {
		return nil, fmt.Errorf("provenance: external parameters: %w", err)
	}
	var internal *structpb.Struct
	if in.InternalParameters != nil {
		if internal, err = toStruct(in.InternalParameters); err != nil {
			return nil, fmt.Errorf("provenance: internal parameters: %w", err)
		}
	}
	deps, err := descriptors(in.Dependencies)
	if err != nil {
		return nil, err
	}
	byproducts, err := descriptors(in.Byproducts)
	if err != nil {
		return nil, err
	}
	pred := &slsa.Provenance{
		BuildDefinition: &slsa.BuildDefinition{
			BuildType:            in.BuildType,
			ExternalParameters:   ext,
			InternalParameters:   internal,
			ResolvedDependencies: deps,
		},
		RunDetails: &slsa.RunDetails{
			Builder:    &slsa.Builder{Id: in.BuilderID, Version: in.BuilderVersion},
			Byproducts: byproducts,
		},
	}
	if err := pred.Validate(); err != nil {
		return nil, fmt.Errorf("provenance: invalid SLSA predicate: %w", err)
	}
	return statement(in.Repository, in.Digest, PredicateType, pred)
}

// WrapPredicate returns the in-toto statement that says predicate (a JSON
// document, e.g. an SBOM) of the image repository@digest, in the same
// canonical form as Statement. It is what an attestation signs.
func WrapPredicate(repository string, digest v1.Hash, predicateType string, predicate []byte) ([]byte, error) {
	var p structpb.Struct
	if err := protojson.Unmarshal(predicate, &p); err != nil {
		return nil, fmt.Errorf("provenance: the %s predicate is not a JSON object: %w", predicateType, err)
	}
	return statement(repository, digest, predicateType, &p)
}

func statement(repository string, digest v1.Hash, predicateType string, pred proto.Message) ([]byte, error) {
	raw, err := protojson.Marshal(pred)
	if err != nil {
		return nil, fmt.Errorf("provenance: encoding the predicate: %w", err)
	}
	var ps structpb.Struct
	if err := protojson.Unmarshal(raw, &ps); err != nil {
		return nil, fmt.Errorf("provenance: encoding the predicate: %w", err)
	}
	st := &intoto.Statement{
		Type:          intoto.StatementTypeUri,
		Subject:       []*intoto.ResourceDescriptor{{Name: repository, Digest: map[string]string{digest.Algorithm: digest.Hex}}},
		PredicateType: predicateType,
		Predicate:     &ps,
	}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("provenance: invalid in-toto statement: %w", err)
	}
	out, err := protojson.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("provenance: encoding the statement: %w", err)
	}
	return canonical(out)
}

// canonical re-indents protojson's output: protojson deliberately varies
// its whitespace between builds of a program, so its bytes are not stable
// as they come out. Its field order and its (sorted) map keys are.
func canonical(raw []byte) ([]byte, error) {
	var compact, out bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, err
	}
	if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

func toStruct(v any) (*structpb.Struct, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var s structpb.Struct
	if err := protojson.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

func descriptors(rs []Resource) ([]*intoto.ResourceDescriptor, error) {
	var out []*intoto.ResourceDescriptor
	for _, r := range rs {
		d := &intoto.ResourceDescriptor{Name: r.Name, Uri: r.URI, Digest: r.Digest}
		if len(r.Annotations) > 0 {
			a, err := toStruct(r.Annotations)
			if err != nil {
				return nil, fmt.Errorf("provenance: annotations of %s: %w", r.Name+r.URI, err)
			}
			d.Annotations = a
		}
		if err := d.Validate(); err != nil {
			return nil, fmt.Errorf("provenance: resource %s: %w", r.Name+r.URI, err)
		}
		out = append(out, d)
	}
	return out, nil
}

var commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Source is the source tree as a resolved dependency: its URI and, for a
// clean commit, its gitCommit digest (a dirty or unknown revision has no
// digest to pin and is recorded as an annotation only).
func Source(uri, revision string) Resource {
	r := Resource{Name: "source", URI: uri}
	if commitRE.MatchString(revision) {
		r.URI += "@" + revision
		r.Digest = map[string]string{"gitCommit": revision}
	} else {
		r.Annotations = map[string]any{"revision": revision}
	}
	return r
}

// Image is an image pinned by digest as a resolved dependency.
func Image(ref string, digest v1.Hash) Resource {
	return Resource{Name: ref, URI: "oci://" + ref, Digest: map[string]string{digest.Algorithm: digest.Hex}}
}

// File is a file as a byproduct or dependency, by SHA-256.
func File(name string, data []byte) Resource {
	s := sha256.Sum256(data)
	return Resource{Name: name, Digest: map[string]string{"sha256": hex.EncodeToString(s[:])}}
}

// GoModules lists the Go toolchain and the modules of Go binaries (from
// their build information; the union, sorted) as resolved dependencies. A
// module's digest is go.sum's h1: hash as in-toto's dirHash.
func GoModules(infos ...*debug.BuildInfo) []Resource {
	byURI := map[string]Resource{}
	for _, bi := range infos {
		tc := "pkg:golang/stdlib@" + strings.TrimPrefix(bi.GoVersion, "go")
		byURI[tc] = Resource{Name: "go toolchain " + bi.GoVersion, URI: tc}
		for _, m := range bi.Deps {
			mod := m
			if m.Replace != nil {
				mod = m.Replace
			}
			r := Resource{Name: mod.Path, URI: "pkg:golang/" + mod.Path + "@" + mod.Version}
			if raw, ok := strings.CutPrefix(mod.Sum, "h1:"); ok {
				if b, err := base64.StdEncoding.DecodeString(raw); err == nil && len(b) == sha256.Size {
					r.Digest = map[string]string{"dirHash": hex.EncodeToString(b)}
				}
			}
			if m.Replace != nil {
				r.Annotations = map[string]any{"replaces": m.Path + "@" + m.Version}
			}
			byURI[r.URI] = r
		}
	}
	var uris []string
	for u := range byURI {
		uris = append(uris, u)
	}
	sort.Strings(uris)
	out := make([]Resource, 0, len(uris))
	for _, u := range uris {
		out = append(out, byURI[u])
	}
	return out
}

// Read parses and validates a statement; the predicate is returned as
// SLSA provenance when that is its type.
func Read(data []byte) (*intoto.Statement, *slsa.Provenance, error) {
	var st intoto.Statement
	if err := protojson.Unmarshal(data, &st); err != nil {
		return nil, nil, fmt.Errorf("not an in-toto statement: %w", err)
	}
	if err := st.Validate(); err != nil {
		return nil, nil, fmt.Errorf("invalid in-toto statement: %w", err)
	}
	if st.GetPredicateType() != PredicateType {
		return &st, nil, nil
	}
	raw, err := protojson.Marshal(st.GetPredicate())
	if err != nil {
		return nil, nil, err
	}
	var p slsa.Provenance
	if err := protojson.Unmarshal(raw, &p); err != nil {
		return nil, nil, fmt.Errorf("not SLSA provenance: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, nil, fmt.Errorf("invalid SLSA provenance: %w", err)
	}
	return &st, &p, nil
}
