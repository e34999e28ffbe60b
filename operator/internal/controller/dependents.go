package controller

import (
	"fmt"
	"reflect"
	"sync"

	"github.com/go-logr/logr"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/yaml"
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

	mu         sync.Mutex
	controller controller.Controller
	watched    map[schema.GroupVersionKind]bool
}

func (d *dependentWatches) Exec(_ *unstructured.Unstructured, rel release.Release, log logr.Logger) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, doc := range releaseutil.SplitManifests(rel.Manifest) {
		var obj unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
			return fmt.Errorf("reading the manifest of release %s: %w", rel.Name, err)
		}
		gvk := obj.GroupVersionKind()
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
		watched := &unstructured.Unstructured{}
		watched.SetGroupVersionKind(gvk)
		if err := d.controller.Watch(source.Kind(d.cache, watched,
			handler.TypedEnqueueRequestForOwner[*unstructured.Unstructured](d.scheme, d.mapper, d.owner, handler.OnlyControllerOwner()),
			dependentChanged)); err != nil {
			return fmt.Errorf("watching %s: %w", gvk, err)
		}
		d.watched[gvk] = true
		log.V(1).Info("watching dependent kind", "kind", gvk)
	}
	return nil
}

// dependentChanged lets through the events that can mean drift from the
// release: deletions, and updates that change more than what the cluster's
// controllers write on their own (status, the Deployment controller's
// revision annotation, bookkeeping metadata). Creations are the operator's
// own.
var dependentChanged = predicate.TypedFuncs[*unstructured.Unstructured]{
	CreateFunc:  func(event.TypedCreateEvent[*unstructured.Unstructured]) bool { return false },
	DeleteFunc:  func(event.TypedDeleteEvent[*unstructured.Unstructured]) bool { return true },
	GenericFunc: func(event.TypedGenericEvent[*unstructured.Unstructured]) bool { return false },
	UpdateFunc: func(e event.TypedUpdateEvent[*unstructured.Unstructured]) bool {
		return !reflect.DeepEqual(desiredPart(e.ObjectOld), desiredPart(e.ObjectNew))
	},
}

// controllerWrittenAnnotations are written by Kubernetes controllers on the
// objects of a release, never by the chart.
var controllerWrittenAnnotations = []string{"deployment.kubernetes.io/revision"}

// desiredPart is the part of a dependent that a release can disagree with.
func desiredPart(u *unstructured.Unstructured) map[string]any {
	c := u.DeepCopy()
	delete(c.Object, "status")
	unstructured.RemoveNestedField(c.Object, "metadata", "resourceVersion")
	unstructured.RemoveNestedField(c.Object, "metadata", "generation")
	unstructured.RemoveNestedField(c.Object, "metadata", "managedFields")
	for _, a := range controllerWrittenAnnotations {
		unstructured.RemoveNestedField(c.Object, "metadata", "annotations", a)
	}
	return c.Object
}
