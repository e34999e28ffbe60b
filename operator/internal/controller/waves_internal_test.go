package controller

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// The stacks of one namespace hold at most half the places of a wave
// while another namespace's stack waits: a freed place goes to the first
// waiting stack of a namespace below its share, and a stack of a namespace
// at its share waits even with a place free.
func TestWavePlacesPerNamespace(t *testing.T) {
	w := &upgradeWaves{stacks: func(context.Context) (int, error) { return 8, nil }, size: intstr.FromString("25%"),
		wake: make(chan event.GenericEvent, 8), gvk: schema.GroupVersionKind{Group: "models.takeoff.co", Version: "v1alpha1", Kind: "InferenceStack"},
		rolling: map[types.NamespacedName]*waveEntry{}}
	stack := func(ns, name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }
	admit := func(k types.NamespacedName, want bool) {
		t.Helper()
		got, _, err := w.admit(t.Context(), k, nil)
		if err != nil || got != want {
			t.Fatalf("admit %s = %v, %v; want %v", k, got, err, want)
		}
	}
	// A wave of two (a quarter of eight), one place per namespace while
	// another waits.
	admit(stack("a", "1"), true)
	admit(stack("b", "1"), true)
	admit(stack("a", "2"), false)
	admit(stack("a", "3"), false)
	admit(stack("b", "2"), false)
	w.mu.Lock()
	w.endTurn(stack("b", "1"))
	w.mu.Unlock()
	select {
	case ev := <-w.wake:
		if got := ev.Object.GetNamespace() + "/" + ev.Object.GetName(); got != "b/2" {
			t.Errorf("the freed place went to %s, while a/1 rolls and b/2 waits", got)
		}
	default:
		t.Fatal("no stack was given the freed place")
	}
	admit(stack("b", "2"), true) // the place kept for it
	// With a place free, a stack of a namespace at its share waits while
	// another namespace's does.
	w.mu.Lock()
	delete(w.rolling, stack("b", "2"))
	w.held = append(w.held, stack("c", "1"))
	w.mu.Unlock()
	admit(stack("a", "4"), false)
	// Alone, a namespace takes every place.
	w.mu.Lock()
	w.rolling = map[types.NamespacedName]*waveEntry{stack("a", "1"): {generations: map[string]int64{}}}
	w.held = nil
	w.mu.Unlock()
	admit(stack("a", "5"), true)
}
