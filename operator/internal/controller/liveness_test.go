package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/operator/internal/controller"
)

// TestLivenessIgnoresTenantWrites: nothing a tenant holding only the edit
// role of its namespace can write keeps a gone major alive. The v1
// operator is gone (no Lease where it runs) and left claims on stacks of
// two tenants; the v0 operator runs with exactly its generated RBAC.
//   - A Lease named after v1's, renewed until 2099, in a tenant's
//     namespace: v0 still voids v1's claims within the claim grace.
//   - The tenant writes v1's claim (label and finalizer) back on its
//     voided stack, and off and on again: each time the stack is voided
//     again, and v1 is no more alive for it: another tenant's stack
//     claimed by v1 is voided too.
func TestLivenessIgnoresTenantWrites(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	const claimGrace = 20 * time.Second
	// A void comes a claim grace after v0 first looks for v1's Lease, at
	// its next look (every half grace); the rest is room for a busy
	// machine.
	voidWithin := 2*claimGrace + time.Minute
	v0NS := inferencestack.Namespace("v0")
	for _, n := range []string{v0NS, "tenant-a", "tenant-b"} {
		if err := client.IgnoreAlreadyExists(e.cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})); err != nil {
			t.Fatal(err)
		}
	}
	v0 := newOperatorProcess(t, "operator-v0", "v0", e.operatorKubeconfig(v0NS, inferencestack.InstanceName("v0")),
		"--leader-elect", "--leader-election-namespace="+v0NS,
		"--unclaimed-grace=10s", "--claim-grace="+claimGrace.String())
	v0.start()
	e.eventually("v0 leads", time.Minute, func(context.Context) (bool, string) {
		return v0.LogContains("Successfully acquired lease"), "no lease yet"
	})

	alice := e.tenant("alice", "tenant-a")
	far := metav1.NewMicroTime(time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC))
	holder, duration := "inference-stack-operator-v1", int32(15)
	if err := alice.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: inferencestack.LeaseID("v1"), Namespace: "tenant-a"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &duration, AcquireTime: &far, RenewTime: &far},
	}); err != nil {
		t.Fatalf("a namespace editor cannot create a Lease (what this test is about): %v", err)
	}

	mine := types.NamespacedName{Namespace: "tenant-a", Name: "mine"}
	e.claimedByGoneV1(mine)
	gone := time.Now()
	e.waitVoided(mine, 1, voidWithin)
	t.Logf("%s voided %s after it was claimed, despite the Lease in tenant-a renewed until 2099", mine, time.Since(gone).Round(time.Second))

	claim := func(on bool) {
		t.Helper()
		u := e.stackIn(mine)
		// Unguarded, as kubectl's label and patch are.
		patch := client.MergeFrom(u.DeepCopy())
		l := u.GetLabels()
		if on {
			l[controller.ReconciledByLabel] = "v1"
			u.SetFinalizers([]string{"uninstall-helm-release"})
		} else {
			delete(l, controller.ReconciledByLabel)
		}
		u.SetLabels(l)
		if err := alice.Patch(ctx, u, patch); err != nil {
			t.Fatalf("alice writing v1's claim (%v) on %s: %v", on, mine, err)
		}
	}
	for round := 2; round <= 3; round++ {
		claim(true)
		claim(false)
		claim(true)
		e.waitVoided(mine, round, voidWithin)
	}
	if v0.LogContains("wrote its status: it runs") {
		t.Error("v0 took the tenant's claim label for a sign of life of v1")
	}

	theirs := types.NamespacedName{Namespace: "tenant-b", Name: "theirs"}
	e.claimedByGoneV1(theirs)
	e.waitVoided(theirs, 1, voidWithin)
	if s, r, _ := condition(e.stackIn(theirs), "Managed"); s != "False" || r != "NoOperatorClaimed" {
		t.Errorf("%s: Managed=%s (%s) after its claim was voided", theirs, s, r)
	}
	// Everything v0 did, it did with its generated RBAC.
	if v0.LogContains("is forbidden") {
		t.Errorf("v0 was refused something its RBAC should grant:\n%s", grepLines(v0.Tail(2000), "is forbidden"))
	}
}

// claimedByGoneV1 creates the stack key as the v1 operator left it when it
// was uninstalled: labelled and claimed for v1, with its finalizer.
func (e *env) claimedByGoneV1(key types.NamespacedName) {
	e.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "models.takeoff.co/v1alpha1", "kind": "InferenceStack",
		"metadata": map[string]any{
			"name": key.Name, "namespace": key.Namespace,
			"labels":     map[string]any{"operatorVersion": "v1", controller.ReconciledByLabel: "v1"},
			"finalizers": []any{"uninstall-helm-release"},
		},
		"spec": map[string]any{"applications": map[string]any{"a": map[string]any{}}},
	}}
	if err := e.cl.Create(e.t.Context(), u); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) stackIn(key types.NamespacedName) *unstructured.Unstructured {
	e.t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("models.takeoff.co/v1alpha1")
	u.SetKind("InferenceStack")
	if err := e.cl.Get(e.t.Context(), key, u); err != nil {
		e.t.Fatalf("getting stack %s: %v", key, err)
	}
	return u
}

// waitVoided waits until the stack key carries no claim and no finalizer
// and has had n ClaimVoided events.
func (e *env) waitVoided(key types.NamespacedName, n int, within time.Duration) {
	e.t.Helper()
	e.eventually(fmt.Sprintf("%s voided (%d)", key, n), within, func(context.Context) (bool, string) {
		// Read with the test's context, so that the last look explains a
		// timeout.
		ctx := e.t.Context()
		u := e.stackIn(key)
		var evs corev1.EventList
		if err := e.cl.List(ctx, &evs, client.InNamespace(key.Namespace)); err != nil {
			return false, err.Error()
		}
		voids := 0
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Name == key.Name && ev.Reason == "ClaimVoided" {
				voids += max(int(ev.Count), 1)
			}
		}
		var leases coordinationv1.LeaseList
		if err := e.cl.List(ctx, &leases); err != nil {
			return false, err.Error()
		}
		var v1Leases []string
		for _, l := range leases.Items {
			if l.Name == inferencestack.LeaseID("v1") {
				v1Leases = append(v1Leases, fmt.Sprintf("%s renewed %v", l.Namespace, l.Spec.RenewTime))
			}
		}
		s, r, m := condition(u, "Managed")
		return voids >= n && u.GetLabels()[controller.ReconciledByLabel] == "" && len(u.GetFinalizers()) == 0,
			fmt.Sprintf("labels %v finalizers %v, %d ClaimVoided events, Managed=%s (%s: %s); v1's Leases: %v",
				u.GetLabels(), u.GetFinalizers(), voids, s, r, m, v1Leases)
	})
}

// operatorKubeconfig grants the service account namespace/name exactly
// operator/rbac/role.yaml (its ClusterRole cluster-wide, its Role in
// namespace, as the bundle's CSV does) and returns a kubeconfig acting as
// that account.
func (e *env) operatorKubeconfig(namespace, name string) string {
	e.t.Helper()
	ctx := e.t.Context()
	data, err := os.ReadFile("../../rbac/role.yaml")
	if err != nil {
		e.t.Fatal(err)
	}
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: namespace}}
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		var r rbacv1.Role
		if err := yaml.Unmarshal(bytes.TrimPrefix(doc, []byte("---\n")), &r); err != nil {
			e.t.Fatal(err)
		}
		var objs []client.Object
		switch r.Kind {
		case "ClusterRole":
			objs = []client.Object{
				&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: r.Rules},
				&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}},
			}
		case "Role":
			objs = []client.Object{
				&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Rules: r.Rules},
				&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Subjects: subject,
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}},
			}
		default:
			e.t.Fatalf("operator/rbac/role.yaml: unexpected %q", r.Kind)
		}
		for _, o := range objs {
			if err := e.cl.Create(ctx, o); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	cfg, err := clientcmd.LoadFromFile(e.cluster.Kubeconfig())
	if err != nil {
		e.t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = "system:serviceaccount:" + namespace + ":" + name
	}
	path := filepath.Join(e.t.TempDir(), "operator-kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// tenant gives user the built-in edit role in namespace, with the stacks'
// rules the catalog chart aggregates into it (templates/tenant-rbac.yaml),
// and returns a client acting as user once the aggregation has happened.
func (e *env) tenant(user, namespace string) client.Client {
	e.t.Helper()
	ctx := e.t.Context()
	for _, o := range []client.Object{
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "stacks-edit", Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-edit": "true"}},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"models.takeoff.co"}, Resources: []string{"inferencestacks"}, Verbs: []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}},
				{APIGroups: []string{"models.takeoff.co"}, Resources: []string{"inferencestacks/status"}, Verbs: []string{"get", "list", "watch"}},
			},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: namespace},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
		},
	} {
		if err := e.cl.Create(ctx, o); err != nil {
			e.t.Fatal(err)
		}
	}
	cfg := e.cluster.RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	cl := newClient(e.t, cfg)
	e.eventually(user+" may list stacks in "+namespace, time.Minute, func(ctx context.Context) (bool, string) {
		var l unstructured.UnstructuredList
		l.SetAPIVersion("models.takeoff.co/v1alpha1")
		l.SetKind("InferenceStackList")
		if err := cl.List(ctx, &l, client.InNamespace(namespace)); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return cl
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	lines := strings.Split(s, "\n")
	return strings.Join(slices.DeleteFunc(lines, func(l string) bool { return !strings.Contains(l, sub) }), "\n")
}
