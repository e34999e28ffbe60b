package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// uninstallFinalizer is the finalizer helm-operator-plugins puts on every
// stack it has installed.
const uninstallFinalizer = "uninstall-helm-release"

// The hand-off contract, for a stack whose operatorVersion label is changed
// to another major or removed:
//
//   - the workloads are never uninstalled by the operator that loses the
//     stack (no surprise deletion);
//   - that operator removes its uninstall finalizer, so no stack is left with
//     a finalizer nobody will remove;
//   - the operator of the new major (if any) adopts the Helm release, which
//     is keyed by namespace and stack name, and adds its finalizer back;
//   - every object of the release keeps its owner reference to the stack, so
//     deleting an unclaimed stack still garbage-collects all it created.
//
// The cache only holds stacks matching the selector, so a relabelled stack
// leaves it with a delete event; only those events reach this controller,
// which therefore never acts on a stack that was not this operator's.
func setupHandoff(mgr ctrl.Manager, primary *unstructured.Unstructured, selector labels.Selector, recorder record.EventRecorder) error {
	h := &handoff{
		reader:   mgr.GetAPIReader(),
		client:   mgr.GetClient(),
		gvk:      primary.GroupVersionKind(),
		selector: selector,
		recorder: recorder,
	}
	c, err := controller.New(fmt.Sprintf("%s-handoff", primary.GetKind()), mgr, controller.Options{Reconciler: h})
	if err != nil {
		return err
	}
	return c.Watch(source.Kind[client.Object](mgr.GetCache(), primary, handler.Funcs{
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
		},
	}))
}

type handoff struct {
	reader   client.Reader
	client   client.Client
	gvk      schema.GroupVersionKind
	selector labels.Selector
	recorder record.EventRecorder
}

func (h *handoff) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(h.gvk)
	// An uncached read: the cache no longer holds the stack by construction.
	if err := h.reader.Get(ctx, req.NamespacedName, obj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if h.selector.Matches(labels.Set(obj.GetLabels())) || !controllerutil.ContainsFinalizer(obj, uninstallFinalizer) {
		// Deleted and re-created, relabelled back, or never installed.
		return reconcile.Result{}, nil
	}
	patch := client.MergeFromWithOptions(obj.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(obj, uninstallFinalizer)
	if err := h.client.Patch(ctx, obj, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("releasing %s: %w", req.NamespacedName, err)
	}
	log.Info("stack no longer selected: released it without uninstalling", "stack", req.NamespacedName, "labels", obj.GetLabels())
	h.recorder.Eventf(obj, corev1.EventTypeNormal, "Released",
		"no longer matches %s: this operator stopped reconciling the stack and removed its finalizer; its workloads were kept", h.selector)
	return reconcile.Result{}, nil
}
