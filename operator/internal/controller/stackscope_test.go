package controller

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/resource"
	"k8s.io/utils/ptr"
)

// scoped is the scope of stack "stack" (UID "stack-uid") in namespace
// "tenant".
func scoped() *stackScope {
	return &stackScope{namespace: "tenant", release: "stack", uid: "stack-uid"}
}

// info is what Helm's builder makes of an object of gvk.
func info(gvk schema.GroupVersionKind, namespaced bool, namespace, name string) *resource.Info {
	scope := meta.RESTScopeNamespace
	if !namespaced {
		scope = meta.RESTScopeRoot
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return &resource.Info{Name: name, Namespace: namespace, Object: u,
		Mapping: &meta.RESTMapping{GroupVersionKind: gvk, Scope: scope}}
}

// Helm acts only on the chart's kinds in the stack's namespace, whatever a
// manifest says.
func TestStackScopeAdmits(t *testing.T) {
	s := scoped()
	deployment := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	for _, tc := range []struct {
		info *resource.Info
		ok   bool
	}{
		{info(deployment, true, "tenant", "stack-gateway"), true},
		{info(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, true, "tenant", "stack-a"), true},
		{info(schema.GroupVersionKind{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObject"}, true, "tenant", "stack-a"), true},
		{info(deployment, true, "kube-system", "coredns"), false},
		{info(schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, true, "tenant", "db"), false},
		{info(schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, false, "", "admin"), false},
		{info(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, false, "tenant", "odd"), false},
		{&resource.Info{Name: "x", Namespace: "tenant", Object: &unstructured.Unstructured{}}, false},
	} {
		err := s.admit(tc.info)
		if (err == nil) != tc.ok {
			t.Errorf("%s %s/%s: admitted %t (%v), want %t", tc.info.Object.GetObjectKind().GroupVersionKind().Kind, tc.info.Namespace, tc.info.Name, err == nil, err, tc.ok)
		}
	}
}

// object is a ConfigMap in the stack's namespace whose controller has UID
// controller ("" for none), also owned (not controlled) by the stack, with
// the Helm annotations of release ("" for none).
func object(controller types.UID, release string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "stack-a", Namespace: "tenant", UID: "object-uid"}}
	m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "models.takeoff.co/v1alpha1", Kind: "InferenceStack", Name: "stack", UID: "stack-uid"}}
	if controller != "" {
		m.OwnerReferences = append(m.OwnerReferences, metav1.OwnerReference{APIVersion: "models.takeoff.co/v1alpha1", Kind: "InferenceStack",
			Name: "owner", UID: controller, Controller: ptr.To(true)})
	}
	if release != "" {
		m.Annotations = map[string]string{"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": "tenant"}
	}
	return m
}

// Helm changes an object the stack controls, or one without a controller
// that carries this release's Helm annotations (what Helm adopts); it
// deletes only what the stack controls; it creates only objects the stack
// controls, in its namespace.
func TestStackScopeChangesDeletesCreates(t *testing.T) {
	s := scoped()
	for _, tc := range []struct {
		what             string
		obj              *metav1.PartialObjectMetadata
		change, deletion bool
	}{
		{"controlled by the stack", object("stack-uid", ""), true, true},
		{"controlled by the stack, annotated for another release", object("stack-uid", "other"), true, true},
		{"no controller, annotated for this release", object("", "stack"), true, false},
		{"no controller, annotated for another release", object("", "other"), false, false},
		{"no controller, no annotations (owned, not controlled)", object("", ""), false, false},
		{"controlled by another stack, annotated for this release", object("other-uid", "stack"), false, false},
	} {
		if err := s.mayChange(tc.obj); (err == nil) != tc.change {
			t.Errorf("%s: change allowed %t (%v), want %t", tc.what, err == nil, err, tc.change)
		}
		if err := s.mayDelete(tc.obj); (err == nil) != tc.deletion {
			t.Errorf("%s: delete allowed %t (%v), want %t", tc.what, err == nil, err, tc.deletion)
		}
		created := tc.obj.DeepCopy()
		created.UID = ""
		if err := s.mayCreate(created, "stack-a"); (err == nil) != tc.deletion {
			t.Errorf("%s: create allowed %t (%v), want %t", tc.what, err == nil, err, tc.deletion)
		}
	}
	elsewhere := object("stack-uid", "")
	elsewhere.Namespace = "kube-system"
	if err := s.mayCreate(elsewhere, "stack-a"); err == nil {
		t.Error("a create in another namespace was allowed")
	}
	if err := s.mayCreate(object("stack-uid", ""), "stack-b"); err == nil {
		t.Error("a create of another name than the client's was allowed")
	}
}

// A delete carries the checked object's UID as a precondition, with the
// options Helm sent kept.
func TestWithUIDPrecondition(t *testing.T) {
	for name, body := range map[string]string{
		"Helm's options": `{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"}`,
		"no body":        "",
	} {
		req, err := http.NewRequest(http.MethodDelete, "https://api/api/v1/namespaces/tenant/configmaps/stack-a", nil)
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req = withBody(req, []byte(body))
		}
		out, err := withUIDPrecondition(req, "object-uid")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for round := range 2 { // the body, then the one a retry resends
			rc := out.Body
			if round == 1 {
				if rc, err = out.GetBody(); err != nil {
					t.Fatal(err)
				}
			}
			b, err := io.ReadAll(rc)
			if err != nil {
				t.Fatal(err)
			}
			var opts metav1.DeleteOptions
			if err := json.Unmarshal(b, &opts); err != nil {
				t.Fatalf("%s: %s: %v", name, b, err)
			}
			if opts.Preconditions == nil || opts.Preconditions.UID == nil || *opts.Preconditions.UID != "object-uid" || opts.Kind != "DeleteOptions" {
				t.Errorf("%s: sent %s", name, b)
			}
			if body != "" && (opts.PropagationPolicy == nil || *opts.PropagationPolicy != metav1.DeletePropagationBackground) {
				t.Errorf("%s: the propagation policy was lost: %s", name, b)
			}
		}
	}
}
