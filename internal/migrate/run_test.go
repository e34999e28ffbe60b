package migrate

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestAdoptedRefs: the ModelOrchestra's reference goes and the stack
// becomes the controller, once; an object another controller holds keeps
// it and gets no second one.
func TestAdoptedRefs(t *testing.T) {
	yes, no := true, false
	mo := metav1.OwnerReference{APIVersion: "models.titanml.co/v1alpha1", Kind: "ModelOrchestra", Name: "m", UID: "mo", Controller: &yes}
	stack := metav1.OwnerReference{APIVersion: "models.takeoff.co/v1alpha1", Kind: "InferenceStack", Name: "m", UID: "stack", Controller: &yes, BlockOwnerDeletion: &yes}
	other := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "c", UID: "cm", Controller: &no}
	rs := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "r", UID: "rs", Controller: &yes}
	for _, c := range []struct {
		name    string
		in      []metav1.OwnerReference
		want    []types.UID
		changed bool
	}{
		{"owned by the ModelOrchestra", []metav1.OwnerReference{mo}, []types.UID{"stack"}, true},
		{"and another owner", []metav1.OwnerReference{other, mo}, []types.UID{"cm", "stack"}, true},
		{"no owner", nil, []types.UID{"stack"}, true},
		{"adopted already", []metav1.OwnerReference{stack}, []types.UID{"stack"}, false},
		{"adopted, the reference put back", []metav1.OwnerReference{stack, mo}, []types.UID{"stack"}, true},
		{"another controller", []metav1.OwnerReference{rs}, []types.UID{"rs"}, false},
	} {
		got, changed := adoptedRefs(c.in, "mo", stack)
		var uids []types.UID
		for _, r := range got {
			uids = append(uids, r.UID)
		}
		if fmt.Sprint(uids) != fmt.Sprint(c.want) || changed != c.changed {
			t.Errorf("%s: got %v (changed %v), want %v (changed %v)", c.name, uids, changed, c.want, c.changed)
		}
	}
}
