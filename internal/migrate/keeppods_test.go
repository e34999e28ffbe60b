package migrate_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/internal/migrate"
)

// TestKeepPodsMakesNoReplicaSet resumes many paused Deployments whose pod
// templates changed, at once and while other ReplicaSets churn, the way a
// migration of a busy namespace does: each keeps its ReplicaSet and its
// pod, and kube-controller-manager never creates a ReplicaSet for the new
// template, not even one it scales down again a moment later. That is what
// it does when a Deployment is resumed before its cache holds the
// ReplicaSet's new template (the two arrive by separate watches).
func TestKeepPodsMakesNoReplicaSet(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short: starts a cluster")
	}
	c := startCluster(t)
	ctx := t.Context()
	const ns, n = "resume", 24
	if _, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deps := c.cs.AppsV1().Deployments(ns)
	for i := range n {
		name := fmt.Sprintf("d%d", i)
		one := int32(1)
		labels := map[string]string{"app": name}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.DeploymentSpec{
				Replicas: &one,
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: podTemplate(labels),
			},
		}
		if _, err := deps.Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c.eventually("a Running pod per Deployment", 2*time.Minute, func() (bool, string) {
		w := c.workloads(ns)
		running := 0
		for _, v := range w.podNodes {
			if v == localcluster.DefaultCPUNode+"/Running" {
				running++
			}
		}
		return running == n && len(w.replicaSets) == n, fmt.Sprintf("%d of %d pods Running, %d ReplicaSets", running, n, len(w.replicaSets))
	})
	before := c.workloads(ns)

	// What a migration does before keepPods: pause the Deployment, record
	// the ReplicaSet holding its pods, change its template.
	plans := make([]*migrate.DeploymentPlan, n)
	for i := range n {
		name := fmt.Sprintf("d%d", i)
		rss, err := c.cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil || len(rss.Items) != 1 {
			t.Fatalf("ReplicaSets of %s: %v %v", name, err, rss)
		}
		rs := rss.Items[0].Name
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"spec":{"paused":true}}`, migrate.PausedAnnotation, rs)
		d, err := deps.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := deps.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"template":{"metadata":{"annotations":{"new":"template"}}}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		plans[i] = &migrate.DeploymentPlan{Name: name, UID: d.UID, ReplicaSet: rs}
	}

	// ReplicaSet churn elsewhere keeps kube-controller-manager's
	// ReplicaSet watch busy, as a fleet rolling out does.
	noise, stopNoise := context.WithCancel(ctx)
	fast := rest.CopyConfig(c.cfg)
	fast.QPS, fast.Burst = -1, 0
	churner := kubernetes.NewForConfigOrDie(fast)
	var churn sync.WaitGroup
	for i := range 8 {
		zero := int32(0)
		labels := map[string]string{"noise": fmt.Sprint(i)}
		rs := &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("noise-%d", i)},
			Spec:       appsv1.ReplicaSetSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: podTemplate(labels)},
		}
		if _, err := c.cs.AppsV1().ReplicaSets("default").Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		churn.Go(func() {
			for k := 0; noise.Err() == nil; k++ {
				patch := fmt.Sprintf(`{"metadata":{"annotations":{"k":"%d"}}}`, k)
				_, _ = churner.AppsV1().ReplicaSets("default").Patch(noise, rs.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			}
		})
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, p := range plans {
		wg.Go(func() { errs[i] = migrate.KeepPods(ctx, c.cfg, ns, p) })
	}
	wg.Wait()
	stopNoise()
	churn.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Deployment %s: %v", plans[i].Name, err)
		}
	}
	// A ReplicaSet the Deployment controller creates for a resumed
	// Deployment exists before it records the resume as observed.
	c.eventually("every Deployment resumed and observed", time.Minute, func() (bool, string) {
		list, err := deps.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var pending []string
		for _, d := range list.Items {
			if d.Spec.Paused || d.Status.ObservedGeneration < d.Generation {
				pending = append(pending, d.Name)
			}
		}
		return len(pending) == 0 && len(list.Items) == n, fmt.Sprintf("not yet: %v", pending)
	})
	after := c.workloads(ns)
	if !maps.Equal(before.replicaSets, after.replicaSets) {
		t.Errorf("ReplicaSets changed: %v → %v", slices.Sorted(maps.Keys(before.replicaSets)), slices.Sorted(maps.Keys(after.replicaSets)))
	}
	if !maps.Equal(before.pods, after.pods) {
		t.Errorf("pods changed: %v → %v", before.podNodes, after.podNodes)
	}
}

// podTemplate is a pod of one container with labels (KWOK runs no image).
func podTemplate(labels map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c:1"}}},
	}
}
