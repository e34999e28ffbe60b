package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/releaseutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/titanml/inference-stack-operator/operator/podsecurity"
)

// A settled stack costs the API server nothing when the operator restarts
// or resyncs. Each reconcile that applies or verifies a stack's release
// leaves in the stack's status a digest of what it found: the release
// revision, what the release was rendered from besides the spec (the
// operator build, its chart, the cluster facts the chart reads, the
// namespace's Pod Security level), and the version of each of the
// release's objects as the API server returned it to that reconcile. A
// later reconcile that computes the same digest from its caches alone (the
// stack, the release Secrets' and the objects' metadata) knows that
// nothing changed since: no render, no release history, no read of any
// object. Anything that changed shows: a new spec generation, a revision
// written or removed, an object edited (a new generation, labels,
// annotations or owner references, or for kinds without a generation any
// write), deleted or replaced (a new UID), a new chart, a CRD the chart
// asks about. Then the reconcile takes the full path and writes the new
// digest.

// verifiedDigestPath is where a stack's status carries its digest.
var verifiedDigestPath = []string{"status", "verifiedDigest"}

// objectRef names one object of a release.
type objectRef struct {
	gvk             schema.GroupVersionKind
	namespace, name string
}

func (r objectRef) String() string {
	return r.gvk.GroupVersion().String() + "/" + r.gvk.Kind + " " + r.namespace + "/" + r.name
}

// manifestObject names one object of a manifest, as written there.
type manifestObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// manifestObjects names the objects of a release manifest, skipping
// documents that are neither.
func manifestObjects(manifest string) ([]manifestObject, error) {
	var out []manifestObject
	for _, doc := range releaseutil.SplitManifests(manifest) {
		var m manifestObject
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			return nil, err
		}
		if m.Kind != "" || m.APIVersion != "" {
			out = append(out, m)
		}
	}
	return out, nil
}

// releaseObjects lists, in a stable order, the objects of a release
// manifest that the stack's scope lets Helm act on (stackscope.go): the
// chart's kinds in namespace, where Helm creates an object without one.
func releaseObjects(manifest, namespace string) ([]objectRef, error) {
	objs, err := manifestObjects(manifest)
	if err != nil {
		return nil, fmt.Errorf("reading a release manifest: %w", err)
	}
	var refs []objectRef
	for _, m := range objs {
		if m.Kind == "" {
			continue
		}
		gv, err := schema.ParseGroupVersion(m.APIVersion)
		if err != nil {
			return nil, fmt.Errorf("reading a release manifest: %s %s: %w", m.Kind, m.Metadata.Name, err)
		}
		ns := m.Metadata.Namespace
		if ns == "" {
			ns = namespace
		}
		gvk := gv.WithKind(m.Kind)
		if ns != namespace || !chartKind(gvk.GroupKind()) {
			// Never acted on (stackscope.go), so neither watched nor
			// part of a digest.
			continue
		}
		refs = append(refs, objectRef{gvk: gvk, namespace: ns, name: m.Metadata.Name})
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].String() < refs[j].String() })
	return refs, nil
}

// objectVersion is what of an object's metadata changes whenever anything
// a release sets on it changes — what dependentChanged treats as possible
// drift: for a kind with a generation, the generation (the spec), labels,
// annotations other than controllers', owner references and deletion, the
// last four as a digest; for one without, the resourceVersion (any write).
// The UID tells a re-created object from the one verified. The caches
// keep it in place of the metadata it is made of (cachedVersion).
func objectVersion(m metav1.Object) string {
	if m.GetGeneration() == 0 {
		return versionHead(m)
	}
	h := sha256.New()
	writeSorted(h, "label", m.GetLabels())
	writeSorted(h, "annotation", withoutControllerAnnotations(m.GetAnnotations()))
	for _, o := range m.GetOwnerReferences() {
		fmt.Fprintf(h, " owner=%q/%q/%q/%q/%t/%t", o.APIVersion, o.Kind, o.Name, o.UID,
			o.Controller != nil && *o.Controller, o.BlockOwnerDeletion != nil && *o.BlockOwnerDeletion)
	}
	return fmt.Sprintf("%s%x", versionHead(m), h.Sum(nil)[:versionDigestBytes])
}

// versionDigestBytes is how much of the metadata's digest objectVersion
// keeps.
const versionDigestBytes = 16

// versionHead is objectVersion without the metadata's digest: all of it
// for a kind without a generation.
func versionHead(m metav1.Object) string {
	if m.GetGeneration() == 0 {
		return fmt.Sprintf("uid=%s rv=%s", m.GetUID(), m.GetResourceVersion())
	}
	return fmt.Sprintf("uid=%s generation=%d deleting=%t metadata=", m.GetUID(), m.GetGeneration(), m.GetDeletionTimestamp() != nil)
}

func writeSorted(w io.Writer, what string, m map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(w, " %s=%q:%q", what, k, m[k])
	}
}

// seenObjects records, within one reconcile, the version of each object of
// the stack's release as the API server last returned it (see
// absentObject).
type seenObjects struct {
	mu       sync.Mutex
	versions map[objectRef]string
}

func (s *seenObjects) record(ref objectRef, version string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.versions == nil {
		s.versions = map[objectRef]string{}
	}
	s.versions[ref] = version
}

func (s *seenObjects) forget(ref objectRef) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.versions, ref)
}

func (s *seenObjects) get(ref objectRef) (string, bool) {
	if s == nil {
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.versions[ref]
	return v, ok
}

// verifiedDigest is the digest of a stack (its UID and generation) whose
// release revision, rendered with facts, has objects refs, each at the
// version versionOf tells; false if one of them has none.
func verifiedDigest(stack metav1.Object, facts string, revision int, refs []objectRef, versionOf func(objectRef) (string, bool)) (string, bool) {
	h := sha256.New()
	fmt.Fprintf(h, "stack %s generation=%d\nrender %s\nrelease %s v%d\n", stack.GetUID(), stack.GetGeneration(), facts, stack.GetName(), revision)
	for _, ref := range refs {
		v, ok := versionOf(ref)
		if !ok {
			return "", false
		}
		fmt.Fprintf(h, "%s %s\n", ref, v)
	}
	return hex.EncodeToString(h.Sum(nil))[:32], true
}

// renderInputs identifies what a release is rendered from besides the
// stack's spec: the operator build (its version, chart and override
// values) and which of the cluster's capabilities the chart reads.
type renderInputs struct {
	build string
	// apis are the API versions the chart asks about
	// (.Capabilities.APIVersions.Has "..."); when the chart reads its
	// capabilities any other way, all of them count (allCaps).
	apis    []string
	allCaps bool
}

// capabilityCheck is the one use of .Capabilities whose answer the digest
// can name exactly; any other use counts every capability.
var capabilityCheck = regexp.MustCompile(`\.Capabilities\.APIVersions\.Has\s+"([^"]+)"`)

func newRenderInputs(version string, chrt *chart.Chart, overrides map[string]string) (*renderInputs, error) {
	h := sha256.New()
	fmt.Fprintf(h, "operator %s\n", version)
	if err := hashChart(h, chrt); err != nil {
		return nil, err
	}
	ov, err := json.Marshal(overrides)
	if err != nil {
		return nil, fmt.Errorf("reading the override values: %w", err)
	}
	fmt.Fprintf(h, "overrides %s\n", ov)
	r := &renderInputs{build: hex.EncodeToString(h.Sum(nil))[:16]}
	apis := map[string]bool{}
	var visit func(c *chart.Chart)
	visit = func(c *chart.Chart) {
		for _, t := range c.Templates {
			data := string(t.Data)
			uses := capabilityCheck.FindAllStringSubmatch(data, -1)
			if strings.Count(data, ".Capabilities") != len(uses) {
				r.allCaps = true
			}
			for _, u := range uses {
				apis[u[1]] = true
			}
		}
		for _, d := range c.Dependencies() {
			visit(d)
		}
	}
	visit(chrt)
	r.apis = slices.Sorted(maps.Keys(apis))
	return r, nil
}

// hashChart writes everything of c that a render reads.
func hashChart(h hash.Hash, c *chart.Chart) error {
	meta, err := json.Marshal(c.Metadata)
	if err != nil {
		return fmt.Errorf("reading chart metadata: %w", err)
	}
	vals, err := json.Marshal(c.Values)
	if err != nil {
		return fmt.Errorf("reading the values of chart %s: %w", c.Name(), err)
	}
	fmt.Fprintf(h, "chart %s\nvalues %s\n", meta, vals)
	for _, files := range [][]*chart.File{c.Templates, c.Files} {
		for _, f := range files {
			fmt.Fprintf(h, "file %q %d\n", f.Name, len(f.Data))
			h.Write(f.Data)
		}
	}
	for _, d := range c.Dependencies() {
		if err := hashChart(h, d); err != nil {
			return err
		}
	}
	return nil
}

// facts is what the render of a stack in namespace reads besides its spec,
// with caps the cluster's capabilities and namespaces the namespaces'
// metadata cache: the digest's render line.
func (r *renderInputs) facts(ctx context.Context, caps *chartutil.Capabilities, namespaces client.Reader, namespace string) (string, error) {
	ns := namespaceMetadata()
	if err := namespaces.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return "", fmt.Errorf("reading namespace %s: %w", namespace, err)
	}
	level, err := podsecurity.LevelOf(ns.GetLabels())
	if err != nil {
		return "", fmt.Errorf("namespace %s: %w", namespace, err)
	}
	return fmt.Sprintf("build=%s podsecurity=%s %s", r.build, level.String(), r.capabilityFacts(caps)), nil
}

// capabilityFacts is what of caps the chart reads.
func (r *renderInputs) capabilityFacts(caps *chartutil.Capabilities) string {
	var b strings.Builder
	if r.allCaps {
		fmt.Fprintf(&b, "kube=%s apis=%s", caps.KubeVersion.Version, strings.Join(slices.Sorted(slices.Values(caps.APIVersions)), ","))
		return b.String()
	}
	for _, api := range r.apis {
		fmt.Fprintf(&b, "%s=%t ", api, caps.APIVersions.Has(api))
	}
	return b.String()
}

// settledCheck tells, from the caches alone, whether a stack is exactly as
// the reconcile that wrote its digest left it.
type settledCheck struct {
	render *renderInputs
	caps   *capabilities
	// cache holds the stacks and the metadata of the release Secrets,
	// of the namespaces and of the releases' objects.
	cache client.Reader
}

// holds tells whether stack, as the cache holds it, is settled: deployed
// at its generation without a failure, and with a digest that the caches
// reproduce; if so, it returns the objects of its release. It makes no
// request (but for the cluster's capabilities, refreshed once a minute
// for all stacks).
func (s *settledCheck) holds(ctx context.Context, stack *unstructured.Unstructured) ([]objectRef, bool) {
	want, _, _ := unstructured.NestedString(stack.Object, verifiedDigestPath...)
	if want == "" || stack.GetDeletionTimestamp() != nil || !applied(stack) {
		return nil, false
	}
	if observed, _, _ := unstructured.NestedInt64(stack.Object, "status", "observedGeneration"); observed != stack.GetGeneration() {
		return nil, false
	}
	for _, t := range []string{conditionRetrying, conditionOperatorUpgrade} {
		if c, ok := conditionOf(stack, t); ok && c.Status == "True" {
			return nil, false
		}
	}
	name, _, _ := unstructured.NestedString(stack.Object, "status", "deployedRelease", "name")
	manifest, _, _ := unstructured.NestedString(stack.Object, "status", "deployedRelease", "manifest")
	if name != stack.GetName() || manifest == "" {
		return nil, false
	}
	revision, ok := s.deployedRevision(ctx, stack)
	if !ok {
		return nil, false
	}
	refs, err := releaseObjects(manifest, stack.GetNamespace())
	if err != nil {
		return nil, false
	}
	caps, err := s.caps.get()
	if err != nil {
		return nil, false
	}
	facts, err := s.render.facts(ctx, caps, s.cache, stack.GetNamespace())
	if err != nil {
		return nil, false
	}
	// The first read of a kind starts its informer and waits for it to
	// sync; one that cannot sync must not hold the reconcile.
	ctx, cancel := context.WithTimeout(ctx, cacheSyncWait)
	defer cancel()
	got, ok := verifiedDigest(stack, facts, revision, refs, func(ref objectRef) (string, bool) {
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(ref.gvk)
		if err := s.cache.Get(ctx, client.ObjectKey{Namespace: ref.namespace, Name: ref.name}, m); err != nil {
			return "", false
		}
		return cachedVersion(m), true
	})
	if !ok || got != want {
		return nil, false
	}
	return refs, true
}

// deployedRevision is the revision of the stack's release that the cache
// of release Secrets shows deployed and latest, written for this stack
// (its controller owner); false if there is none.
func (s *settledCheck) deployedRevision(ctx context.Context, stack *unstructured.Unstructured) (int, bool) {
	secrets, err := releaseSecretsOf(ctx, s.cache, stack.GetNamespace(), stack.GetName())
	if err != nil {
		return 0, false
	}
	latest, status := 0, ""
	var owner *metav1.OwnerReference
	for i := range secrets.Items {
		s := &secrets.Items[i]
		if v, err := strconv.Atoi(s.Labels["version"]); err == nil && v > latest {
			latest, status, owner = v, s.Labels["status"], metav1.GetControllerOf(s)
		}
	}
	if latest == 0 || status != "deployed" || owner == nil || owner.UID != stack.GetUID() {
		return 0, false
	}
	return latest, true
}

// releaseNameIndex indexes the cached release Secrets by release name, so
// that a stack's revisions are found without going through every release
// of its namespace.
const releaseNameIndex = "helm.release.name"

// releaseSecretsOf lists the cached release Secrets of release name in
// namespace, whoever wrote them.
func releaseSecretsOf(ctx context.Context, cache client.Reader, namespace, name string) (*metav1.PartialObjectMetadataList, error) {
	secrets := &metav1.PartialObjectMetadataList{}
	secrets.SetGroupVersionKind(releaseSecret().GroupVersionKind().GroupVersion().WithKind("SecretList"))
	err := cache.List(ctx, secrets, client.InNamespace(namespace), client.MatchingFields{releaseNameIndex: name})
	return secrets, err
}

// indexReleaseSecrets adds releaseNameIndex to the cache of release
// Secrets; it must be called before the cache starts.
func indexReleaseSecrets(ctx context.Context, indexer client.FieldIndexer) error {
	err := indexer.IndexField(ctx, releaseSecret(), releaseNameIndex, func(o client.Object) []string {
		if l := o.GetLabels(); l["owner"] == "helm" && l["name"] != "" {
			return []string{l["name"]}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("indexing release Secrets: %w", err)
	}
	return nil
}
