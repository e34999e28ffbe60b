package controller_test

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/operator/internal/controller"
)

// TestClaimsThatEnd runs the v0 and v1 operators and checks that a claim
// never strands a stack: a write that replaces the labels of a claimed
// stack is claimed again at once (the other major does not take it for
// unclaimed), and once the v1 operator is gone its claims are void, so
// deleting its stack or the stack's namespace completes, while a stack
// nobody deletes keeps its workloads until v1 returns and claims it again
// (and is then known to run, even without a Lease, once it has written the
// stack's status). Each operator's Lease is in its own namespace: v0's
// default one, and one the CRD's annotation names for v1 (were it not
// read, v0 would void the claims of a running v1).
func TestClaimsThatEnd(t *testing.T) {
	e := newEnv(t)
	const claimGrace = 20 * time.Second
	leaseNS := map[string]string{"v0": inferencestack.Namespace("v0"), "v1": "ops-v1"}
	e.annotateCRD(inferencestack.OperatorNamespacesAnnotation, `{"v1":"ops-v1"}`)
	ops := map[string]*operatorProcess{}
	for _, m := range []string{"v0", "v1"} {
		if err := client.IgnoreAlreadyExists(e.cl.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNS[m]}})); err != nil {
			t.Fatal(err)
		}
		ops[m] = newOperatorProcess(t, "operator-"+m, m, e.cluster.Kubeconfig(),
			"--leader-elect", "--leader-election-namespace="+leaseNS[m],
			"--unclaimed-grace=10s", "--claim-grace="+claimGrace.String())
		ops[m].start()
	}
	const spec = `{applications: {a: {}}}`
	claimed := func(name, major string) {
		e.t.Helper()
		e.eventually(name+" claimed by "+major, 30*time.Second, func(context.Context) (bool, string) {
			u := e.getStack(name)
			return u.GetLabels()[controller.ReconciledByLabel] == major && slices.Contains(u.GetFinalizers(), "uninstall-helm-release"),
				fmt.Sprintf("labels %v finalizers %v", u.GetLabels(), u.GetFinalizers())
		})
	}

	// A PUT that rewrites the labels and finalizers, as kubectl replace
	// does with the manifest the user wrote: the claim and the finalizer
	// come back, from v0.
	e.apply("replaced", "v0", spec)
	e.waitDeployed("replaced")
	replacedPods := e.podUIDs("replaced-inference-stack-a")
	e.update("replaced", func(u *unstructured.Unstructured) {
		u.SetLabels(map[string]string{"operatorVersion": "v0"})
		u.SetFinalizers(nil)
	})
	claimed("replaced", "v0")

	// Stacks v1 claims, in this namespace and in one that will be deleted.
	const doomedNS = "doomed"
	if err := e.cl.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: doomedNS}}); err != nil {
		t.Fatal(err)
	}
	doomed := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "models.takeoff.co/v1alpha1", "kind": "InferenceStack",
		"metadata": map[string]any{"name": "doomed", "namespace": doomedNS, "labels": map[string]any{"operatorVersion": "v1"}},
		"spec":     map[string]any{"applications": map[string]any{"a": map[string]any{}}},
	}}
	if err := e.cl.Create(t.Context(), doomed); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"orphan", "kept"} {
		e.apply(name, "v1", spec)
	}
	e.waitDeployed("orphan")
	keptPods := e.podUIDs(e.waitDeployed("kept").GetName() + "-inference-stack-a")
	e.eventually("doomed/doomed claimed by v1", 90*time.Second, func(ctx context.Context) (bool, string) {
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(doomed), doomed); err != nil {
			return false, err.Error()
		}
		s, _, m := condition(doomed, "Deployed")
		return s == "True" && doomed.GetLabels()[controller.ReconciledByLabel] == "v1", fmt.Sprintf("Deployed=%s %s labels %v", s, m, doomed.GetLabels())
	})

	// v1 is uninstalled: its process ends and nothing renews its Lease.
	ops["v1"].Kill(syscall.SIGTERM)
	gone := time.Now()
	if err := e.cl.Delete(t.Context(), e.getStack("orphan")); err != nil {
		t.Fatal(err)
	}
	if err := e.cl.Delete(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: doomedNS}}); err != nil {
		t.Fatal(err)
	}
	e.eventually("orphan deleted, with its Deployment", 2*time.Minute, func(ctx context.Context) (bool, string) {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("models.takeoff.co/v1alpha1")
		u.SetKind("InferenceStack")
		err := e.cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: "orphan"}, u)
		if !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("stack: finalizers %v labels %v (%v)", u.GetFinalizers(), u.GetLabels(), err)
		}
		return !exists(ctx, e.cl, &appsv1.Deployment{}, "orphan-inference-stack-a"), "its Deployment is still there"
	})
	t.Logf("orphan deleted %s after its operator stopped (claim grace %s)", time.Since(gone).Round(time.Second), claimGrace)
	e.eventually("namespace "+doomedNS+" deleted", 3*time.Minute, func(ctx context.Context) (bool, string) {
		var n corev1.Namespace
		err := e.cl.Get(ctx, types.NamespacedName{Name: doomedNS}, &n)
		return apierrors.IsNotFound(err), fmt.Sprintf("phase %s conditions %v (%v)", n.Status.Phase, n.Status.Conditions, err)
	})

	// Nobody deleted "kept": its claim is void, it says so, its pods run on.
	e.waitCondition("kept", "Managed", "False", "NoOperatorClaimed")
	if u := e.getStack("kept"); len(u.GetFinalizers()) != 0 || u.GetLabels()[controller.ReconciledByLabel] != "" {
		t.Errorf("kept: finalizers %v labels %v after its claim was voided", u.GetFinalizers(), u.GetLabels())
	}
	if ev, ok := hasEvent(e.events("kept"), "ClaimVoided"); !ok {
		t.Errorf("kept: no ClaimVoided event")
	} else {
		t.Logf("kept: %s", ev.Message)
	}
	e.samePods("kept-inference-stack-a", keptPods)

	// v1 returns and claims its stack again, without touching its pods —
	// run without leader election, so its Lease stays as it was left and
	// still looks gone: its re-claim, and its status write that follows,
	// are what prove it runs, and v0 keeps its hands off from then on
	// instead of taking the stack back and forth.
	noLease := newOperatorProcess(t, "operator-v1-no-lease", "v1", e.cluster.Kubeconfig(),
		"--unclaimed-grace=10s", "--claim-grace="+claimGrace.String())
	noLease.start()
	e.eventually("v0 sees v1 alive by its re-claim", 2*time.Minute, func(context.Context) (bool, string) {
		return ops["v0"].LogContains("claimed a stack again and wrote its status: it runs"),
			fmt.Sprintf("%d ClaimVoided events on kept", e.countEventsOf("kept", "ClaimVoided"))
	})
	claimed("kept", "v1")
	e.waitCondition("kept", "Managed", "True", "Reconciling")
	if n := e.countEventsOf("kept", "ClaimVoided"); n != 1 {
		t.Errorf("kept: %d ClaimVoided events, want 1", n)
	}
	e.samePods("kept-inference-stack-a", keptPods)

	// Long after the unclaimed grace, the replaced stack is still v0's and
	// v1 never took it for unclaimed.
	claimed("replaced", "v0")
	e.waitCondition("replaced", "Managed", "True", "Reconciling")
	for _, reason := range []string{"Released", "ClaimVoided"} {
		if ev, ok := hasEvent(e.events("replaced"), reason); ok {
			t.Errorf("replaced: unexpected %s event: %s", reason, ev.Message)
		}
	}
	e.samePods("replaced-inference-stack-a", replacedPods)
	e.deleteAndWait("replaced")
	e.deleteAndWait("kept")
}

// annotateCRD sets an annotation of the InferenceStack CRD, as the catalog
// chart does.
func (e *env) annotateCRD(key, value string) {
	e.t.Helper()
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	if err := e.cl.Get(e.t.Context(), types.NamespacedName{Name: "inferencestacks.models.takeoff.co"}, crd); err != nil {
		e.t.Fatal(err)
	}
	patch := client.MergeFrom(crd.DeepCopy())
	ann := crd.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[key] = value
	crd.SetAnnotations(ann)
	if err := e.cl.Patch(e.t.Context(), crd, patch); err != nil {
		e.t.Fatal(err)
	}
}
