package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// stackReconciler runs helm-operator-plugins' reconciler for one stack after
// making sure this operator has claimed it, and leaves the stack's Managed
// condition (and any recovery it made) in its status.
type stackReconciler struct {
	inner  reconcile.Reconciler
	client *selectorClient
	// apiReader reads past the cache, for writes that must not conflict
	// with a cache that has not caught up.
	apiReader client.Reader
	gvk       schema.GroupVersionKind
	major     majorSelector
	version   string
	recorder  record.EventRecorder
	backoff   *failureBackoff
	// settled tells a stack nothing changed since its last reconcile
	// (settled.go); such a stack is only looked at again after period.
	settled *settledCheck
	period  time.Duration
	// deps watches the kinds of a release's objects (nil when the watch
	// opts out): the library's post hook does that for the stacks it
	// reconciles.
	deps *dependentWatches
}

func (r *stackReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	obj, settled, err := r.read(ctx, req.NamespacedName)
	if err != nil {
		// NotFound includes stacks of other majors: nothing to do, and
		// nothing to retry.
		if apierrors.IsNotFound(err) {
			r.backoff.succeed(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if settled != nil {
		return r.keep(ctx, obj, settled)
	}
	// The library's calls into the selector client and the action client
	// find this reconcile's state by the stack's key; its first read of
	// the stack is the one made here.
	st := r.client.reconciles.begin(req.NamespacedName)
	defer r.client.reconciles.end(req.NamespacedName)
	st.fresh = obj
	st.deleting = obj.GetDeletionTimestamp() != nil
	if obj.GetDeletionTimestamp() == nil {
		for _, c := range r.conditions(obj) {
			st.ensure(c)
		}
	}

	// A failing release waits out its backoff (a new generation or drift
	// ends it); a stack being deleted never waits.
	if obj.GetDeletionTimestamp() == nil {
		if d := r.backoff.wait(req.NamespacedName, obj.GetGeneration()); d > 0 {
			return reconcile.Result{RequeueAfter: d}, nil
		}
	}

	res, err := r.inner.Reconcile(ctx, req)
	if st.deleting && errors.Is(err, context.DeadlineExceeded) {
		// The library's wait for the stack to disappear after its
		// uninstall (see waitForDeletionTimeout): another finalizer
		// holds it. Looked at again, without an error's backoff: read
		// lets an uninstalled stack go at no cost, and retries one whose
		// uninstall did not finish.
		ctrl.LoggerFrom(ctx).V(1).Info("uninstalled; the stack waits for other finalizers", "finalizers", obj.GetFinalizers())
		res, err = reconcile.Result{RequeueAfter: waitForDeletionTimeout}, nil
	}

	if failure := st.failure(); failure != nil && obj.GetDeletionTimestamp() == nil {
		c, delay := r.backoff.fail(req.NamespacedName, obj.GetGeneration(), failure.Error())
		st.ensure(c)
		ctrl.LoggerFrom(ctx).Info("the release failed; backing off", "retryIn", delay.String(), "error", failure.Error())
		res, err = reconcile.Result{RequeueAfter: delay}, nil
	} else if err == nil {
		// The stack's own status, not only this process's memory, says
		// whether it was failing: a restart or a new leader forgets.
		retrying, _ := conditionOf(obj, conditionRetrying)
		if r.backoff.succeed(req.NamespacedName) || retrying.Status == "True" {
			st.ensure(condition{Type: conditionRetrying, Status: "False", Reason: reasonRecovered,
				Message: fmt.Sprintf("the release succeeded at generation %d", obj.GetGeneration())})
		}
	}

	if d := st.lookAgainIn(); d > 0 && err == nil && (res.RequeueAfter == 0 || d < res.RequeueAfter) {
		res.RequeueAfter = d
	}

	// The library writes the status only when its own conditions change; a
	// condition of ours, or the generation just applied (a spec change that
	// changed no object), that no write carried is written here.
	var observed int64
	if err == nil && st.failure() == nil && obj.GetDeletionTimestamp() == nil && !st.observedWritten() {
		observed = obj.GetGeneration()
		if got, _, _ := unstructured.NestedInt64(obj.Object, "status", "observedGeneration"); got == observed {
			observed = 0
		}
	}
	pending := st.pending()
	if hasConditions(obj, pending) {
		pending = nil
	}
	var digest stackDigest
	if err == nil {
		digest = stackDigest{value: st.digestPending(obj), generation: obj.GetGeneration()}
		if d, _, _ := unstructured.NestedString(obj.Object, verifiedDigestPath...); d == digest.value {
			digest.value = ""
		}
	}
	if len(pending) > 0 || observed > 0 || digest.value != "" {
		if werr := r.writeStatus(ctx, req.NamespacedName, pending, observed, digest); werr != nil && err == nil {
			err = werr
		}
	}
	return res, err
}

// keep ends the reconcile of a settled stack: its objects' kinds are
// watched (after a restart the library's post hook has not run for it),
// and it is looked at again after the reconcile period, as the library
// would.
func (r *stackReconciler) keep(ctx context.Context, obj *unstructured.Unstructured, objects []objectRef) (reconcile.Result, error) {
	if r.deps != nil {
		if err := r.deps.watch(objects, ctrl.LoggerFrom(ctx)); err != nil {
			return reconcile.Result{}, err
		}
	}
	r.backoff.succeed(client.ObjectKeyFromObject(obj))
	ctrl.LoggerFrom(ctx).V(1).Info("settled: nothing changed since the last reconcile")
	return reconcile.Result{RequeueAfter: r.period}, nil
}

// read returns the stack as it is now, with one request at most: a stack
// the cache shows unclaimed is claimed, and the claim's response is the
// stack; a settled one is the cache's (returned with its release's
// objects), since nothing will be computed from it or written; any other
// is read from the API server. The
// cache alone would do for the decisions, but not for the status the
// library and this operator compute from the stack: one computed from a
// stale copy could write an old condition back over a newer one.
func (r *stackReconciler) read(ctx context.Context, key client.ObjectKey) (*unstructured.Unstructured, []objectRef, error) {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(r.gvk)
	if err := r.client.cache.Get(ctx, key, obj); err != nil {
		return nil, nil, err
	}
	if !r.major.own().Matches(labels.Set(obj.GetLabels())) {
		return nil, nil, apierrors.NewNotFound(schema.GroupResource{Group: r.gvk.Group, Resource: r.gvk.Kind}, key.Name)
	}
	if uninstalled(obj) {
		// As gone, at no cost.
		return nil, nil, apierrors.NewNotFound(schema.GroupResource{Group: r.gvk.Group, Resource: r.gvk.Kind}, key.Name)
	}
	if obj.GetDeletionTimestamp() == nil && (!claimedBy(obj, r.major.Major) || !controllerutil.ContainsFinalizer(obj, uninstallFinalizer)) {
		// Guarded by the resourceVersion read: a stale copy conflicts.
		if err := r.claim(ctx, obj); err != nil {
			return nil, nil, err
		}
		return obj, nil, nil
	}
	if r.settled != nil && hasConditions(obj, r.conditions(obj)) && r.backoff.wait(key, obj.GetGeneration()) == 0 {
		if objects, ok := r.settled.holds(ctx, obj); ok {
			return obj, objects, nil
		}
	}
	if err := r.client.Get(ctx, key, obj); err != nil {
		return nil, nil, err
	}
	if uninstalled(obj) {
		// The cache had not seen the uninstall yet.
		return nil, nil, apierrors.NewNotFound(schema.GroupResource{Group: r.gvk.Group, Resource: r.gvk.Kind}, key.Name)
	}
	return obj, nil, nil
}

// uninstalled tells whether the stack is being deleted and this operator's
// part of that is done (or was never due): its finalizer is gone. What
// holds it now is another finalizer (foreground deletion, another
// controller's), nothing of this operator's.
func uninstalled(obj *unstructured.Unstructured) bool {
	return obj.GetDeletionTimestamp() != nil && !controllerutil.ContainsFinalizer(obj, uninstallFinalizer)
}

// conditions are those a reconcile of obj leaves on it whatever the
// release does.
func (r *stackReconciler) conditions(obj *unstructured.Unstructured) []condition {
	cs := []condition{{Type: conditionManaged, Status: "True", Reason: reasonReconciling,
		Message: fmt.Sprintf("reconciled by the %s operator (%s)", r.major.Major, r.version)}}
	if c, ok := tokenCondition(obj); ok {
		cs = append(cs, c)
	}
	return cs
}

// claim records this operator as the stack's owner and adds the uninstall
// finalizer in one write, guarded by the resourceVersion read: a stack that
// changed meanwhile is retried with its new state.
func (r *stackReconciler) claim(ctx context.Context, obj *unstructured.Unstructured) error {
	previous := obj.GetLabels()[ReconciledByLabel]
	adopting := previous != "" && previous != r.major.Major
	patch := client.MergeFromWithOptions(obj.DeepCopy(), client.MergeFromWithOptimisticLock{})
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[ReconciledByLabel] = r.major.Major
	obj.SetLabels(labels)
	controllerutil.AddFinalizer(obj, uninstallFinalizer)
	// The embedded client, not the selector client: the patch must reach
	// the API server whatever the cache holds.
	if err := r.client.Client.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("claiming the stack for the %s operator: %w", r.major.Major, err)
	}
	if adopting {
		r.recorder.Eventf(obj, corev1.EventTypeNormal, "Adopted",
			"the %s operator took over the stack from the %s operator; its Helm release and workloads are kept", r.major.Major, previous)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("claimed stack", "previousOwner", previous)
	return nil
}

func hasConditions(obj *unstructured.Unstructured, cs []condition) bool {
	for _, c := range cs {
		if got, ok := conditionOf(obj, c.Type); !ok || got != c {
			return false
		}
	}
	return true
}

// writeStatus merges cs into the stack's status and, when observed > 0 and
// the release is deployed, records that generation as applied; a digest
// (settled.go) is recorded if the stack is still at the generation it was
// computed for. It reads the stack uncached so the write carries the
// status as it is now.
func (r *stackReconciler) writeStatus(ctx context.Context, key client.ObjectKey, cs []condition, observed int64, digest stackDigest) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(r.gvk)
		if err := r.apiReader.Get(ctx, key, obj); err != nil {
			return err
		}
		if obj.GetDeletionTimestamp() != nil || !r.major.own().Matches(labels.Set(obj.GetLabels())) {
			return nil
		}
		changed := setConditions(obj, time.Now(), cs...)
		if observed > 0 && observed == obj.GetGeneration() {
			if applied(obj) {
				if got, _, _ := unstructured.NestedInt64(obj.Object, "status", "observedGeneration"); got != observed {
					if err := unstructured.SetNestedField(obj.Object, observed, "status", "observedGeneration"); err != nil {
						return err
					}
					changed = true
				}
			}
		}
		if digest.holds(obj) {
			_ = unstructured.SetNestedField(obj.Object, digest.value, verifiedDigestPath...)
			changed = true
		}
		if !changed {
			return nil
		}
		return r.client.Client.Status().Update(ctx, obj)
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing the stack's status: %w", err)
	}
	return nil
}

// stackDigest is a stack's verified digest (settled.go) as computed at
// the start of a reconcile from the stack at generation.
type stackDigest struct {
	value      string
	generation int64
}

// holds tells whether the digest may go into obj's status as it is now:
// obj is still deployed at the generation it was computed for, and does
// not say so already.
func (d stackDigest) holds(obj *unstructured.Unstructured) bool {
	current, _, _ := unstructured.NestedString(obj.Object, verifiedDigestPath...)
	return d.value != "" && current != d.value && verifiable(obj, d.generation)
}
