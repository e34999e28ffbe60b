package controller

import (
	"sync"
	"time"

	"helm.sh/helm/v3/pkg/release"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// reconciles holds the state of every reconcile in flight, by stack, for
// one controller. helm-operator-plugins' reconciler calls this operator's
// client and action client getter with only a context and the stack, so
// they find the reconcile they serve here, by the stack's key:
// controller-runtime never reconciles one key twice at once, so a key names
// at most one reconcile. A state lives from stackReconciler.Reconcile's
// begin to its end; a call for a stack with no reconcile in flight (such as
// the first read of the stack, or an action client got outside a reconcile)
// gets a nil state, whose methods do nothing.
type reconciles struct {
	mu       sync.Mutex
	inFlight map[client.ObjectKey]*reconcileState
}

func newReconciles() *reconciles {
	return &reconciles{inFlight: map[client.ObjectKey]*reconcileState{}}
}

// begin starts the reconcile of the stack key; end must follow.
func (r *reconciles) begin(key client.ObjectKey) *reconcileState {
	st := &reconcileState{key: key}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight[key] = st
	return st
}

// end forgets the reconcile of the stack key.
func (r *reconciles) end(key client.ObjectKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.inFlight, key)
}

// of returns the state of the reconcile of the stack key, or nil.
func (r *reconciles) of(key client.ObjectKey) *reconcileState {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inFlight[key]
}

// reconcileState is what one reconcile of a stack shares between this
// operator's code and the library's calls into it: the stack this operator
// wrote before handing over, and the conditions to add to the status the
// library writes.
type reconcileState struct {
	mu    sync.Mutex
	key   client.ObjectKey
	fresh *unstructured.Unstructured
	// deleting: the stack is being deleted; the library's later reads of
	// it (its wait for the deletion) are the cache's.
	deleting   bool
	conditions []condition
	// applied tells whether the library's status write carried conditions.
	applied bool
	// actionErr is the first Helm action (install, upgrade, dry run,
	// repair) that failed in this reconcile.
	actionErr error
	// observed: a status write of the library carried the generation its
	// release was applied at.
	observed bool
	// recheck, if set, is when the stack must be looked at again (an
	// upgrade waiting for its wave).
	recheck time.Duration

	// What the stack's verified digest is made of (see settled.go): the
	// release's objects as the API server returned them to this
	// reconcile, what its renders read besides the spec, and the release
	// it installed, upgraded to or verified.
	seen     seenObjects
	facts    string
	deployed *release.Release
	// refs are deployed's objects, read once from its manifest (refsErr
	// if it could not be).
	refs    []objectRef
	refsErr error
	// digestWritten: a status write carried the digest.
	digestWritten bool
	// upgradeHeld: the deployed release was kept although this build
	// renders another (an upgrade waiting for its wave).
	upgradeHeld bool
}

// lookAgain asks for the stack to be reconciled again within d.
func (s *reconcileState) lookAgain(d time.Duration) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recheck == 0 || d < s.recheck {
		s.recheck = d
	}
}

func (s *reconcileState) lookAgainIn() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recheck
}

// observe records, in a status the library writes after a release this
// reconcile did not fail, the generation of the spec it applied.
func (s *reconcileState) observe(u *unstructured.Unstructured) {
	if s == nil || client.ObjectKeyFromObject(u) != s.key {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.actionErr != nil {
		return
	}
	if !applied(u) {
		return
	}
	if _, found, _ := unstructured.NestedMap(u.Object, "status", "deployedRelease"); !found {
		return
	}
	_ = unstructured.SetNestedField(u.Object, u.GetGeneration(), "status", "observedGeneration")
	s.observed = true
}

// applied tells whether the library's conditions say the release is
// deployed and this reconcile neither failed nor was paused.
func applied(u *unstructured.Unstructured) bool {
	if c, ok := conditionOf(u, "Deployed"); !ok || c.Status != "True" {
		return false
	}
	for _, t := range []string{"ReleaseFailed", "Irreconcilable", "Paused"} {
		if c, ok := conditionOf(u, t); ok && c.Status == "True" {
			return false
		}
	}
	return true
}

// verifiable tells whether u's status may carry a verified digest computed
// at generation: u is deployed without failure at that generation, and its
// status says it observed it.
func verifiable(u *unstructured.Unstructured, generation int64) bool {
	observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	return applied(u) && u.GetGeneration() == generation && observed == generation
}

// observedWritten tells whether a status write carried the generation.
func (s *reconcileState) observedWritten() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.observed
}

// failed records a Helm action's failure.
func (s *reconcileState) failed(err error) {
	if s == nil || err == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.actionErr == nil {
		s.actionErr = err
	}
}

// failure returns the first failed Helm action's error, if any.
func (s *reconcileState) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.actionErr
}

// takeFresh returns the stack written in this reconcile, once: later reads
// go to the API server, but for a stack being deleted (see readsCache).
func (s *reconcileState) takeFresh(key client.ObjectKey) *unstructured.Unstructured {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fresh == nil || key != s.key {
		return nil
	}
	f := s.fresh
	s.fresh = nil
	return f
}

// ensure adds c to the conditions this reconcile must leave on the stack.
func (s *reconcileState) ensure(c condition) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.conditions {
		if s.conditions[i].Type == c.Type {
			s.conditions[i] = c
			s.applied = false
			return
		}
	}
	s.conditions = append(s.conditions, c)
	s.applied = false
}

func (s *reconcileState) applyConditions(u *unstructured.Unstructured) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if client.ObjectKeyFromObject(u) != s.key {
		return
	}
	setConditions(u, time.Now(), s.conditions...)
	s.applied = true
}

// pending returns the conditions no status write of the library carried.
func (s *reconcileState) pending() []condition {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.applied {
		return nil
	}
	return append([]condition(nil), s.conditions...)
}

// objects returns where the reconcile's Helm clients record the objects
// they read and write; nil outside a reconcile.
func (s *reconcileState) objects() *seenObjects {
	if s == nil {
		return nil
	}
	return &s.seen
}

// renderedWith records what the reconcile's renders read besides the spec.
func (s *reconcileState) renderedWith(facts string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.facts = facts
}

// held records that the reconcile kept a deployed release this build
// would render differently.
func (s *reconcileState) held() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.upgradeHeld = true
}

// verified records the release the reconcile installed, upgraded to, or
// verified the objects of.
func (s *reconcileState) verified(rel *release.Release) {
	if s == nil || rel == nil {
		return
	}
	refs, err := releaseObjects(rel.Manifest, rel.Namespace)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deployed, s.refs, s.refsErr = rel, refs, err
}

// objectsOf returns the objects of rel: those read when the reconcile
// verified it, or read now from its manifest.
func (s *reconcileState) objectsOf(rel *release.Release) ([]objectRef, error) {
	if s != nil {
		s.mu.Lock()
		d, refs, err := s.deployed, s.refs, s.refsErr
		s.mu.Unlock()
		if d != nil && d.Name == rel.Name && d.Namespace == rel.Namespace && d.Version == rel.Version && d.Manifest == rel.Manifest {
			return refs, err
		}
	}
	return releaseObjects(rel.Manifest, rel.Namespace)
}

// digest is the stack's verified digest after this reconcile: false if it
// failed, applied or verified no release, or did not see every object of
// it.
func (s *reconcileState) digest(stack *unstructured.Unstructured) (string, bool) {
	if s == nil {
		return "", false
	}
	s.mu.Lock()
	rel, refs, refsErr, facts, failed := s.deployed, s.refs, s.refsErr, s.facts, s.actionErr != nil || s.upgradeHeld
	s.mu.Unlock()
	if failed || rel == nil || refsErr != nil || facts == "" || rel.Info == nil || rel.Info.Status != release.StatusDeployed || rel.Name != stack.GetName() {
		return "", false
	}
	return verifiedDigest(stack, facts, rel.Version, refs, s.seen.get)
}

// stampDigest puts this reconcile's digest in a status the library writes
// (which replaces the whole status), or leaves none when there is none.
func (s *reconcileState) stampDigest(u *unstructured.Unstructured) {
	if s == nil || client.ObjectKeyFromObject(u) != s.key {
		return
	}
	d, ok := s.digest(u)
	if !ok || !verifiable(u, u.GetGeneration()) {
		unstructured.RemoveNestedField(u.Object, verifiedDigestPath...)
		return
	}
	_ = unstructured.SetNestedField(u.Object, d, verifiedDigestPath...)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.digestWritten = true
}

// digestPending returns the digest no status write carried yet.
func (s *reconcileState) digestPending(stack *unstructured.Unstructured) string {
	s.mu.Lock()
	written := s.digestWritten
	s.mu.Unlock()
	if written {
		return ""
	}
	d, _ := s.digest(stack)
	return d
}

// readsCache tells whether the library's reads of the stack after the
// first are answered from the cache: those of a stack being deleted, which
// after its uninstall the library polls every 10 ms until it is gone (for
// waitForDeletionTimeout), and which another finalizer may keep for as long
// as it likes.
func (s *reconcileState) readsCache(key client.ObjectKey) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deleting && key == s.key
}
