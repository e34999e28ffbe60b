package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// An object whose Helm label was removed (by anyone with edit, or a tool
// that rewrites labels) is one the operator's cache no longer holds: the
// operator must still see it, repair it, and delete it when the release
// drops it.
func TestStrippedHelmLabel(t *testing.T) {
	e := startEnv(t, operatorBuild{})
	const stack = "stripped"
	gateway, reader := stack+"-inference-stack-gateway", stack+"-inference-stack-b"
	e.apply(stack, "v0", `{applications: {a: {}, b: {}}}`)
	e.waitDeployed(stack)
	e.waitCondition(stack, "Ready", "True", "Available")
	strip := func(name string) {
		t.Helper()
		patch := []byte(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":null}}}`)
		if err := e.cl.Patch(t.Context(), &appsv1.Deployment{ObjectMeta: metav1ObjectMeta(name)}, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("a gateway without its label is repaired, and the stack stays Ready", func(t *testing.T) {
		e.t = t
		pods := e.podUIDs(gateway)
		strip(gateway)
		e.eventually("the label restored", 2*time.Minute, func(ctx context.Context) (bool, string) {
			l := e.deployment(gateway).Labels["app.kubernetes.io/managed-by"]
			_, r, m := condition(e.getStack(stack), "ReleaseFailed")
			return l == "Helm", fmt.Sprintf("managed-by=%q; ReleaseFailed %s: %s", l, r, m)
		})
		e.waitCondition(stack, "Ready", "True", "Available")
		if s, r, m := condition(e.getStack(stack), "ReleaseFailed"); s == "True" {
			t.Errorf("ReleaseFailed=True %s: %s", r, m)
		}
		e.samePods(gateway, pods)
	})

	t.Run("an application removed whose Deployment lost its label is deleted", func(t *testing.T) {
		e.t = t
		strip(reader)
		e.update(stack, func(u *unstructured.Unstructured) {
			unstructured.RemoveNestedField(u.Object, "spec", "applications", "b")
		})
		e.eventually(reader+" deleted", 2*time.Minute, func(ctx context.Context) (bool, string) {
			err := e.cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: reader}, &appsv1.Deployment{})
			_, r, m := condition(e.getStack(stack), "ReleaseFailed")
			return apierrors.IsNotFound(err), fmt.Sprintf("%v; ReleaseFailed %s: %s", err, r, m)
		})
	})
}

func metav1ObjectMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name}
}
