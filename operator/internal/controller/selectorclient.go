package controller

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// selectorClient is the client helm-operator-plugins' reconciler uses.
//
// It hides primary objects that do not match the operator's selector: Get
// answers NotFound for them. The library reads the primary object through
// this client and does nothing for a NotFound, so a request for a foreign
// stack (enqueued by a dependent's event, or by a stale cache) never
// installs, upgrades, adds a finalizer to or uninstalls it.
//
// Within one reconcile (see reconcileState) it also hands the library the
// stack as this operator just wrote it, rather than a cache that may not
// have caught up yet, and adds this operator's conditions to the status the
// library writes, so neither costs another write or another reconcile. It
// keeps plain-text access tokens out of that status (secrets.go).
type selectorClient struct {
	client.Client
	// cache reads the stack as the cache holds it (the embedded client
	// reads unstructured objects from the API server).
	cache client.Reader
	// apiReader re-reads a stack whose status write conflicted.
	apiReader client.Reader
	gvk       schema.GroupVersionKind
	selector  labels.Selector
}

func newSelectorClient(c client.Client, cache, apiReader client.Reader, gvk schema.GroupVersionKind, selector labels.Selector) *selectorClient {
	return &selectorClient{Client: c, cache: cache, apiReader: apiReader, gvk: gvk, selector: selector}
}

func (c *selectorClient) isPrimary(obj client.Object) bool {
	return obj.GetObjectKind().GroupVersionKind() == c.gvk
}

func (c *selectorClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if u, ok := obj.(*unstructured.Unstructured); ok && c.isPrimary(obj) {
		if fresh := stateFrom(ctx).takeFresh(key); fresh != nil {
			fresh.DeepCopyInto(u)
			return nil
		}
	}
	if err := c.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if c.isPrimary(obj) && !c.selector.Matches(labels.Set(obj.GetLabels())) {
		return apierrors.NewNotFound(schema.GroupResource{Group: c.gvk.Group, Resource: c.gvk.Kind}, key.Name)
	}
	return nil
}

func (c *selectorClient) Status() client.SubResourceWriter {
	return &statusWriter{SubResourceWriter: c.Client.Status(), c: c}
}

type statusWriter struct {
	client.SubResourceWriter
	c *selectorClient
}

// Update writes the library's status. The library replaces the whole
// status with its conditions and deployed release; what the readiness
// controller owns (the Ready condition, endpoint, availability) is carried
// over from the stack as it is, and a conflict with a readiness write in
// between is retried on the fresh stack instead of failing the reconcile.
func (w *statusWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || !w.c.isPrimary(obj) {
		return w.SubResourceWriter.Update(ctx, obj, opts...)
	}
	st := stateFrom(ctx)
	st.applyConditions(u)
	redactDeployedRelease(u)
	st.observe(u)
	// The library's own status, before the readiness is merged in.
	status := runtime.DeepCopyJSONValue(u.Object["status"])
	current := &unstructured.Unstructured{}
	current.SetGroupVersionKind(w.c.gvk)
	if err := w.c.cache.Get(ctx, client.ObjectKeyFromObject(u), current); err == nil {
		keepReadiness(u, current, time.Now())
	}
	err := w.SubResourceWriter.Update(ctx, u, opts...)
	if !apierrors.IsConflict(err) || w.c.apiReader == nil {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		fresh := &unstructured.Unstructured{}
		fresh.SetGroupVersionKind(w.c.gvk)
		if err := w.c.apiReader.Get(ctx, client.ObjectKeyFromObject(u), fresh); err != nil {
			return err
		}
		if !w.c.selector.Matches(labels.Set(fresh.GetLabels())) {
			// Handed to another major meanwhile: its status is not ours
			// to write.
			return apierrors.NewNotFound(schema.GroupResource{Group: w.c.gvk.Group, Resource: w.c.gvk.Kind}, u.GetName())
		}
		mine := fresh.DeepCopy()
		mine.Object["status"] = runtime.DeepCopyJSONValue(status)
		keepReadiness(mine, fresh, time.Now())
		if err := w.SubResourceWriter.Update(ctx, mine, opts...); err != nil {
			return err
		}
		mine.DeepCopyInto(u)
		return nil
	})
}

// reconcileState is what one reconcile of a stack shares between this
// operator's code and the library's calls into it: the stack this operator
// wrote before handing over, and the conditions to add to the status the
// library writes.
type reconcileState struct {
	mu         sync.Mutex
	key        client.ObjectKey
	fresh      *unstructured.Unstructured
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

type reconcileStateKey struct{}

func withState(ctx context.Context, s *reconcileState) context.Context {
	return context.WithValue(ctx, reconcileStateKey{}, s)
}

// stateFrom returns the reconcile's state; calls outside a reconcile get a
// nil state, whose methods do nothing.
func stateFrom(ctx context.Context) *reconcileState {
	s, _ := ctx.Value(reconcileStateKey{}).(*reconcileState)
	return s
}

// takeFresh returns the stack written in this reconcile, once: later reads
// (such as the library's wait for a deletion) go to the cache.
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
