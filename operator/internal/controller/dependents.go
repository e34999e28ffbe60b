package controller

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/go-logr/logr"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// dependentWatches is a post-release hook that starts watching each kind a
// release contains the first time it sees it, so that a deleted or edited
// object brings its stack back to the release's manifest. It enqueues the
// owning stack through the controller owner reference that
// helm-operator-plugins puts on every object of a release.
type dependentWatches struct {
	owner  *unstructured.Unstructured // carries only the primary GVK
	cache  cache.Cache
	scheme *runtime.Scheme
	mapper meta.RESTMapper

	backoff *failureBackoff
	// reconciles hold the objects of the release each reconcile verified.
	reconciles *reconciles

	mu         sync.Mutex
	controller controller.Controller
	watched    map[schema.GroupVersionKind]bool
}

func (d *dependentWatches) Exec(stack *unstructured.Unstructured, rel release.Release, log logr.Logger) error {
	refs, err := d.reconciles.of(client.ObjectKeyFromObject(stack)).objectsOf(&rel)
	if err != nil {
		return fmt.Errorf("release %s: %w", rel.Name, err)
	}
	return d.watch(refs, log)
}

// watch starts watching the kinds of refs not watched yet.
func (d *dependentWatches) watch(refs []objectRef, log logr.Logger) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ref := range refs {
		gvk := ref.gvk
		if gvk.Empty() || d.watched[gvk] {
			continue
		}
		mapping, err := d.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("mapping %s: %w", gvk, err)
		}
		if mapping.Scope.Name() == meta.RESTScopeNameRoot {
			// A namespaced stack cannot own a cluster-scoped object; the
			// chart renders none.
			log.Info("not watching a cluster-scoped kind of the release", "kind", gvk)
			d.watched[gvk] = true
			continue
		}
		// Only metadata is cached: drift in a spec shows as a new generation,
		// and what changed is diffed from the live object by the reconcile.
		watched := &metav1.PartialObjectMetadata{}
		watched.SetGroupVersionKind(gvk)
		if err := d.controller.Watch(source.Kind(d.cache, watched,
			drift(d.backoff, handler.TypedEnqueueRequestForOwner[*metav1.PartialObjectMetadata](d.scheme, d.mapper, d.owner, handler.OnlyControllerOwner())),
			dependentChanged)); err != nil {
			return fmt.Errorf("watching %s: %w", gvk, err)
		}
		d.watched[gvk] = true
		log.V(1).Info("watching dependent kind", "kind", gvk)
	}
	return nil
}

// dependentChanged lets through the events that can mean drift from the
// release: deletions, and updates that change an object's version
// (objectVersion: the spec, as a new generation; labels, annotations
// other than those the cluster's controllers write, owner references; for
// kinds without a generation, such as ConfigMaps, anything), the same
// rule a verified digest is made of. Status updates and the Deployment
// controller's revision annotation, which follow every rollout, do not
// cost a reconcile. Creations are the operator's own.
var dependentChanged = predicate.TypedFuncs[*metav1.PartialObjectMetadata]{
	CreateFunc:  func(event.TypedCreateEvent[*metav1.PartialObjectMetadata]) bool { return false },
	DeleteFunc:  func(event.TypedDeleteEvent[*metav1.PartialObjectMetadata]) bool { return true },
	GenericFunc: func(event.TypedGenericEvent[*metav1.PartialObjectMetadata]) bool { return false },
	UpdateFunc: func(e event.TypedUpdateEvent[*metav1.PartialObjectMetadata]) bool {
		o, n := e.ObjectOld, e.ObjectNew
		// The same resourceVersion is a resync: nothing changed.
		return o.ResourceVersion != n.ResourceVersion && cachedVersion(o) != cachedVersion(n)
	},
}

// controllerWrittenAnnotations are written by Kubernetes controllers on the
// objects of a release, never by the chart.
var controllerWrittenAnnotations = []string{"deployment.kubernetes.io/revision"}

func withoutControllerAnnotations(a map[string]string) map[string]string {
	out := maps.Clone(a)
	for _, k := range controllerWrittenAnnotations {
		delete(out, k)
	}
	return out
}

// drift enqueues what h enqueues, as drift of the stack's objects: behind
// new work (lowPriority), and ending the backoff of a failing stack.
func drift[T client.Object](b *failureBackoff, h handler.TypedEventHandler[T, reconcile.Request]) handler.TypedEventHandler[T, reconcile.Request] {
	kick := func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		return kickQueue{TypedRateLimitingInterface: q, backoff: b}
	}
	return lowPriority(handler.TypedFuncs[T, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Create(ctx, e, kick(q))
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(ctx, e, kick(q))
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Delete(ctx, e, kick(q))
		},
		GenericFunc: func(ctx context.Context, e event.TypedGenericEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Generic(ctx, e, kick(q))
		},
	})
}

// kickQueue ends the backoff of every stack it enqueues.
type kickQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	backoff *failureBackoff
}

func (q kickQueue) Add(item reconcile.Request) {
	q.backoff.kick(item.NamespacedName)
	q.TypedRateLimitingInterface.Add(item)
}

// lowPriority enqueues what h enqueues behind new work, so repairing drift
// in one stack never delays installing another.
func lowPriority[T client.Object](h handler.TypedEventHandler[T, reconcile.Request]) handler.TypedEventHandler[T, reconcile.Request] {
	return handler.TypedFuncs[T, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Create(ctx, e, lowPriorityQueue{q})
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(ctx, e, lowPriorityQueue{q})
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Delete(ctx, e, lowPriorityQueue{q})
		},
		GenericFunc: func(ctx context.Context, e event.TypedGenericEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Generic(ctx, e, lowPriorityQueue{q})
		},
	}
}

// lowPriorityQueue adds at handler.LowPriority when the controller's queue
// is a priority queue (controller-runtime's default).
type lowPriorityQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
}

func (q lowPriorityQueue) Add(item reconcile.Request) {
	if pq, ok := q.TypedRateLimitingInterface.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		low := handler.LowPriority
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: &low}, item)
		return
	}
	q.TypedRateLimitingInterface.Add(item)
}
