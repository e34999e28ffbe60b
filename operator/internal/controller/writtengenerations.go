package controller

import (
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
)

// writtenGenerations are the generations the API server gave the stacks'
// Deployments in answer to the operator's own writes. The readiness
// controller reads Deployments from the cache, which can lag the stack's:
// right after an upgrade it could find the old generation fully rolled out
// and say Ready of the old pods. A Deployment the cache holds at an older
// generation than one written is taken to be at the written one, not yet
// observed by its controller.
type writtenGenerations struct {
	mu sync.Mutex
	m  map[types.NamespacedName]writtenGeneration
}

type writtenGeneration struct {
	uid        types.UID
	generation int64
}

func newWrittenGenerations() *writtenGenerations {
	return &writtenGenerations{m: map[types.NamespacedName]writtenGeneration{}}
}

// note records that the Deployment key (uid) is at generation at least.
func (w *writtenGenerations) note(key types.NamespacedName, uid types.UID, generation int64) {
	if w == nil || generation == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.m[key]; !ok || old.uid != uid || old.generation < generation {
		w.m[key] = writtenGeneration{uid: uid, generation: generation}
	}
}

// atLeast is d as the readiness must judge it: d itself, or, while the
// cache holds it at an older generation than written, a copy at the
// written generation. What the cache has caught up with is forgotten.
func (w *writtenGenerations) atLeast(d *appsv1.Deployment) *appsv1.Deployment {
	if w == nil || d == nil {
		return d
	}
	key := types.NamespacedName{Namespace: d.Namespace, Name: d.Name}
	w.mu.Lock()
	defer w.mu.Unlock()
	got, ok := w.m[key]
	switch {
	case !ok:
		return d
	case got.uid != d.UID || d.Generation >= got.generation:
		delete(w.m, key)
		return d
	}
	ahead := d.DeepCopy()
	ahead.Generation = got.generation
	return ahead
}

// forget drops what was written of the Deployment key (deleted).
func (w *writtenGenerations) forget(key types.NamespacedName) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, key)
}
