package migrate_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/titanml/inference-stack-operator/internal/migrate"
)

// TestPlanRefusesAnOlderReplicaSetOfTheNewTemplate: a Deployment whose
// revision history holds a ReplicaSet of exactly the template the chart
// renders cannot be handed over in place. Resumed, the Deployment
// controller would take that older ReplicaSet as the template's and scale
// it up, replacing the pods keepPods handed over; the plan says so, and a
// template the history does not hold passes.
func TestPlanRefusesAnOlderReplicaSetOfTheNewTemplate(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short: starts a cluster")
	}
	c := startCluster(t)
	ctx := t.Context()
	deps := c.cs.AppsV1().Deployments("default")
	labels := map[string]string{"app": "reader"}
	withRevision := func(rev string) appsv1.DeploymentSpec {
		one := int32(1)
		tmpl := podTemplate(labels)
		tmpl.Annotations = map[string]string{"rev": rev}
		return appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}
	}
	// Revision 1 runs the template the chart will render; revision 2,
	// running now, another.
	d, err := deps.Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "reader"}, Spec: withRevision("chart")}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	complete := func(what string) *appsv1.Deployment {
		var live *appsv1.Deployment
		c.eventually(what, 2*time.Minute, func() (bool, string) {
			live, err = deps.Get(ctx, "reader", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			s := live.Status
			return s.ObservedGeneration == live.Generation && s.UpdatedReplicas == 1 && s.AvailableReplicas == 1 && s.Replicas == 1,
				fmt.Sprintf("generation %d observed %d, %d updated, %d available, %d in all", live.Generation, s.ObservedGeneration, s.UpdatedReplicas, s.AvailableReplicas, s.Replicas)
		})
		return live
	}
	complete("revision 1 rolled out")
	patch := `{"spec":{"template":{"metadata":{"annotations":{"rev":"operator"}}}}}`
	if _, err := deps.Patch(ctx, d.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	live := complete("revision 2 rolled out")

	rendered := func(rev string) *unstructured.Unstructured {
		want := &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
			ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: "default"}, Spec: withRevision(rev)}
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(want)
		if err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: obj}
	}
	historyBlocker := func(blockers []string) string {
		for _, b := range blockers {
			if strings.Contains(b, "older ReplicaSet") {
				return b
			}
		}
		return ""
	}

	dp, blockers, err := migrate.PlanDeployment(ctx, c.cfg, live, rendered("chart"))
	if err != nil {
		t.Fatal(err)
	}
	if b := historyBlocker(blockers); b == "" || !strings.Contains(b, "(revision 1)") {
		t.Errorf("the chart's template is revision 1's; blockers: %q", blockers)
	}
	if dp == nil || dp.ReplicaSet == "" || len(dp.Pods) != 1 {
		t.Errorf("plan %+v: want the running ReplicaSet and its pod", dp)
	}

	if _, blockers, err = migrate.PlanDeployment(ctx, c.cfg, live, rendered("new")); err != nil {
		t.Fatal(err)
	}
	if len(blockers) > 0 {
		t.Errorf("a template no ReplicaSet has: blockers %q", blockers)
	}
	if _, blockers, err = migrate.PlanDeployment(ctx, c.cfg, live, rendered("operator")); err != nil {
		t.Fatal(err)
	}
	if len(blockers) > 0 {
		t.Errorf("the running template (nothing changes): blockers %q", blockers)
	}
}
