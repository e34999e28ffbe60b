package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// The hand-off contract, whatever the order of relabelling, unlabelling,
// operator restarts, leader changes, operator uninstalls and deletions:
//
//   - no stack keeps a finalizer that no running operator will remove;
//   - no operator removes a finalizer another major relies on;
//   - no workload is deleted by surprise: the operator that loses a stack
//     never uninstalls it, and the new major's operator adopts the Helm
//     release (keyed by namespace and stack name);
//   - a stack no operator reconciles says so in its Managed condition
//     instead of keeping a stale Deployed=True.
//
// It rests on two label-selected caches of stacks, each normally empty, so
// the state is read from the cluster rather than from events a stopped
// operator could have missed: at start-up the caches list what happened
// while it was away, and a resync re-checks them periodically at no API
// cost.
//
//   - released: claimed by this major but no longer labelled for it. The
//     operator removes its claim and the finalizer in one write guarded by
//     the resourceVersion (a stack claimed meanwhile by its new major, or
//     deleted and re-created, fails that guard and is left alone).
//   - unclaimed: claimed by no operator and not labelled for this one. A
//     missing or malformed label can never be claimed: the stack is told
//     so at once. A well-formed label of a major whose operator has not
//     claimed the stack within unclaimedGrace is reported too. Either way
//     a finalizer left on it (by a claim a label-replacing write wiped, or
//     an operator version without claims) is removed.
//
// Every object of a release keeps its owner reference to the stack, so
// deleting an unclaimed stack still garbage-collects all it created.
type handoff struct {
	client    client.Client
	released  cache.Cache
	unclaimed cache.Cache
	gvk       schema.GroupVersionKind
	major     majorSelector
	recorder  record.EventRecorder
	grace     time.Duration
}

func setupHandoff(mgr ctrl.Manager, gvk schema.GroupVersionKind, major majorSelector, recorder record.EventRecorder, opts Options) error {
	h := &handoff{client: mgr.GetClient(), gvk: gvk, major: major, recorder: recorder, grace: opts.unclaimedGrace()}
	var err error
	if h.released, err = newConditionsCache(mgr, major.released(), opts); err != nil {
		return err
	}
	if h.unclaimed, err = newConditionsCache(mgr, major.unclaimed(), opts); err != nil {
		return err
	}
	for _, c := range []cache.Cache{h.released, h.unclaimed} {
		if err := mgr.Add(c); err != nil {
			return fmt.Errorf("adding a hand-off cache: %w", err)
		}
	}
	c, err := controller.New(fmt.Sprintf("%s-handoff", strings.ToLower(gvk.Kind)), mgr, controller.Options{Reconciler: h})
	if err != nil {
		return fmt.Errorf("creating the hand-off controller: %w", err)
	}
	for _, src := range []cache.Cache{h.released, h.unclaimed} {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(gvk)
		if err := c.Watch(source.Kind(src, obj, &handler.TypedEnqueueRequestForObject[*unstructured.Unstructured]{})); err != nil {
			return fmt.Errorf("watching stacks for the hand-off: %w", err)
		}
	}
	return nil
}

// newConditionsCache caches the stacks selector matches, keeping only what
// the hand-off reads (metadata and status conditions), so even a cluster
// full of another major's unclaimed stacks costs little memory.
func newConditionsCache(mgr ctrl.Manager, selector labels.Selector, opts Options) (cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient:           mgr.GetHTTPClient(),
		Scheme:               mgr.GetScheme(),
		Mapper:               mgr.GetRESTMapper(),
		DefaultLabelSelector: selector,
		DefaultNamespaces:    opts.namespaces(),
		DefaultTransform:     keepConditions,
		SyncPeriod:           opts.resyncPeriod(),
	})
	if err != nil {
		return nil, fmt.Errorf("creating a hand-off cache for %s: %w", selector, err)
	}
	return c, nil
}

// keepConditions strips a cached stack down to its metadata and status
// conditions.
func keepConditions(in any) (any, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return in, nil
	}
	out := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": u.GetAPIVersion(),
		"kind":       u.GetKind(),
	}}
	meta := map[string]any{}
	for _, k := range []string{"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp", "labels", "finalizers"} {
		if v, ok := u.Object["metadata"].(map[string]any)[k]; ok {
			meta[k] = v
		}
	}
	out.Object["metadata"] = meta
	if conds, found, _ := unstructured.NestedSlice(u.Object, "status", "conditions"); found {
		out.Object["status"] = map[string]any{"conditions": conds}
	}
	return out, nil
}

var _ toolscache.TransformFunc = keepConditions

func (h *handoff) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	for _, step := range []struct {
		from cache.Cache
		do   func(context.Context, *unstructured.Unstructured) (reconcile.Result, error)
	}{{h.released, h.release}, {h.unclaimed, h.explain}} {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(h.gvk)
		err := step.from.Get(ctx, req.NamespacedName, obj)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return reconcile.Result{}, err
		}
		return step.do(ctx, obj)
	}
	return reconcile.Result{}, nil
}

// release lets go of a stack this operator claimed and that is no longer
// labelled for it: claim and finalizer go in one guarded write, the
// workloads stay.
func (h *handoff) release(ctx context.Context, obj *unstructured.Unstructured) (reconcile.Result, error) {
	patch := client.MergeFromWithOptions(obj.DeepCopy(), client.MergeFromWithOptimisticLock{})
	lbls := obj.GetLabels()
	delete(lbls, ReconciledByLabel)
	obj.SetLabels(lbls)
	controllerutil.RemoveFinalizer(obj, uninstallFinalizer)
	if err := h.client.Patch(ctx, obj, patch); err != nil {
		// A conflict means the stack changed (claimed by its new major,
		// deleted and re-created): retried with what the cache then holds.
		return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("releasing the stack: %w", err))
	}
	value, present := obj.GetLabels()[h.major.Key]
	ctrl.LoggerFrom(ctx).Info("stack no longer selected: released it without uninstalling", "labels", obj.GetLabels())
	h.recorder.Eventf(obj, corev1.EventTypeNormal, "Released",
		"no longer labelled %s=%s: the %s operator stopped reconciling the stack and removed its finalizer; its workloads were kept",
		h.major.Key, h.major.Major, h.major.Major)
	if obj.GetDeletionTimestamp() != nil {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, h.writeConditions(ctx, obj, unmanaged(h.major.Key, value, present, h.major.Major))
}

// explain reports why no operator reconciles an unclaimed stack.
func (h *handoff) explain(ctx context.Context, obj *unstructured.Unstructured) (reconcile.Result, error) {
	value, present := obj.GetLabels()[h.major.Key]
	wellFormed := present && majorLabelValue.MatchString(value)
	if wellFormed {
		// Its major's operator claims the stack within moments if it is
		// installed and running.
		if wait := h.grace - time.Since(obj.GetCreationTimestamp().Time); wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
	}
	// A finalizer on an unclaimed stack has nobody to remove it: its claim
	// was lost with a write that replaced the labels, or an operator version
	// without claims put it there. Without it, deleting the stack still
	// removes everything through the owner references; an operator of the
	// stack's major that turns up later claims it and adds it back.
	if controllerutil.ContainsFinalizer(obj, uninstallFinalizer) {
		patch := client.MergeFromWithOptions(obj.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(obj, uninstallFinalizer)
		if err := h.client.Patch(ctx, obj, patch); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("removing the finalizer of an unclaimed stack: %w", err))
		}
		h.recorder.Eventf(obj, corev1.EventTypeNormal, "Released",
			"no operator has claimed this stack (%s=%q); the %s operator removed the uninstall finalizer so it can be deleted; the workloads were kept",
			h.major.Key, value, h.major.Major)
	}
	if obj.GetDeletionTimestamp() != nil {
		return reconcile.Result{}, nil
	}
	if c, ok := conditionOf(obj, conditionManaged); wellFormed && ok && c.Status == "False" {
		// Already explained, by the operator that released it or another.
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, h.writeConditions(ctx, obj, unmanaged(h.major.Key, value, present, ""))
}

// writeConditions sets the Managed condition c (and clears a stale
// Deployed=True) with a status patch guarded by the resourceVersion.
func (h *handoff) writeConditions(ctx context.Context, obj *unstructured.Unstructured, c condition) error {
	before := obj.DeepCopy()
	if !setConditions(obj, time.Now(), append([]condition{c}, notDeployed(obj)...)...) {
		return nil
	}
	patch := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
	if err := h.client.Status().Patch(ctx, obj, patch); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("writing the Managed condition: %w", err))
	}
	h.recorder.Event(obj, corev1.EventTypeWarning, c.Reason, c.Message)
	return nil
}
