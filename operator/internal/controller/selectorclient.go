package controller

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	gvk      schema.GroupVersionKind
	selector labels.Selector
}

func newSelectorClient(c client.Client, gvk schema.GroupVersionKind, selector labels.Selector) *selectorClient {
	return &selectorClient{Client: c, gvk: gvk, selector: selector}
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

func (w *statusWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if u, ok := obj.(*unstructured.Unstructured); ok && w.c.isPrimary(obj) {
		stateFrom(ctx).applyConditions(u)
		redactDeployedRelease(u)
	}
	return w.SubResourceWriter.Update(ctx, obj, opts...)
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
