package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// A stack that outlives the operator's finalizer (foreground deletion,
// another controller's finalizer) costs nothing once uninstalled: no
// polling of the API server, no worker held, whatever wakes it.
func TestStacksHeldByAnotherFinalizer(t *testing.T) {
	e := startEnv(t, operatorBuild{})
	const hold = "example.com/hold"
	var held []string
	for i := range 8 {
		name := fmt.Sprintf("held-%d", i)
		held = append(held, name)
		e.apply(name, "v0", `{applications: {a: {}}}`)
	}
	for _, name := range held {
		e.waitDeployed(name)
		e.update(name, func(u *unstructured.Unstructured) { controllerutil.AddFinalizer(u, hold) })
	}
	t.Cleanup(func() {
		for _, name := range held {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("models.takeoff.co/v1alpha1")
			u.SetKind("InferenceStack")
			if err := e.cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, u); err == nil {
				controllerutil.RemoveFinalizer(u, hold)
				_ = e.cl.Update(context.Background(), u)
			}
		}
	})
	for _, name := range held {
		if err := e.cl.Delete(t.Context(), e.getStack(name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range held {
		e.eventually(name+" uninstalled, held by the other finalizer", 90*time.Second, func(ctx context.Context) (bool, string) {
			u := e.getStack(name)
			return u.GetDeletionTimestamp() != nil && slices.Equal(u.GetFinalizers(), []string{hold}), fmt.Sprintf("finalizers %v", u.GetFinalizers())
		})
	}

	// The reconciles that uninstalled them end (with the library's last
	// status write) once their short wait for the deletion is over.
	e.eventually("the uninstalls' reconciles ended", 30*time.Second, func(ctx context.Context) (bool, string) {
		n := strings.Count(e.log.String(), "uninstalled; the stack waits for other finalizers")
		return n >= len(held), fmt.Sprintf("%d of %d", n, len(held))
	})

	// From here on the held stacks are the other finalizer's. A new stack
	// installs meanwhile, and each held one is woken twice (a label, an
	// annotation): none of that may cost a request about them.
	from := e.requests.since()
	e.apply("meanwhile", "v0", `{applications: {a: {}}}`)
	for _, name := range held {
		e.update(name, func(u *unstructured.Unstructured) {
			l := u.GetLabels()
			l["touched"] = "yes"
			u.SetLabels(l)
		})
		e.update(name, func(u *unstructured.Unstructured) { u.SetAnnotations(map[string]string{"touched": "yes"}) })
	}
	e.waitCondition("meanwhile", "Ready", "True", "Available")
	var about []string
	for _, name := range held {
		about = append(about, e.requests.about(from, name)...)
	}
	// The operator's writes to the held stacks would show too: none.
	if len(about) > 0 {
		t.Errorf("the held stacks cost %d requests: %v", len(about), about)
	}
	// And the stacks go once the other finalizer does.
	for _, name := range held {
		e.update(name, func(u *unstructured.Unstructured) { controllerutil.RemoveFinalizer(u, hold) })
	}
	for _, name := range held {
		e.eventually(name+" gone", 30*time.Second, func(ctx context.Context) (bool, string) {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("models.takeoff.co/v1alpha1")
			u.SetKind("InferenceStack")
			err := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u)
			return err != nil, fmt.Sprintf("finalizers %v", u.GetFinalizers())
		})
	}
}
