package controller

import (
	"context"
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
// Within one reconcile (its state found in reconciles by the stack's key)
// it also hands the library the stack as the reconcile just read or wrote
// it (see stackReconciler.read), rather than a cache that may not have
// caught up yet or a second read, and adds this operator's conditions to the status the
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
	// reconciles holds the state of the reconciles in flight.
	reconciles *reconciles
}

func newSelectorClient(c client.Client, cache, apiReader client.Reader, gvk schema.GroupVersionKind, selector labels.Selector, rs *reconciles) *selectorClient {
	return &selectorClient{Client: c, cache: cache, apiReader: apiReader, gvk: gvk, selector: selector, reconciles: rs}
}

func (c *selectorClient) isPrimary(obj client.Object) bool {
	return obj.GetObjectKind().GroupVersionKind() == c.gvk
}

func (c *selectorClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	reader := client.Reader(c.Client)
	if u, ok := obj.(*unstructured.Unstructured); ok && c.isPrimary(obj) {
		st := c.reconciles.of(key)
		if fresh := st.takeFresh(key); fresh != nil {
			fresh.DeepCopyInto(u)
			return nil
		}
		if st.readsCache(key) {
			reader = c.cache
		}
	}
	if err := reader.Get(ctx, key, obj, opts...); err != nil {
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
	st := w.c.reconciles.of(client.ObjectKeyFromObject(u))
	st.applyConditions(u)
	redactDeployedRelease(u)
	st.observe(u)
	st.stampDigest(u)
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
