package olmv0local

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/olmlocal"
)

// TestMapCatalogService plays the catalog operator's part on a real node,
// without OLM, in the order OLM v0 takes on a loaded machine: it creates a
// CatalogSource's registry Service, then — its status not yet naming the
// Service — deletes and recreates it (a new ClusterIP) before writing that
// status. MapCatalogService, started while the first Service exists, must
// map the catalog operator's host name to the Service that stays, and the
// catalog operator's pod must reach the catalog through it. A mapping taken
// from the first Service (what failed TestOLMv0Local under load with "dial
// tcp <ClusterIP>:50051: i/o timeout") points at an address nothing
// answers.
func TestMapCatalogService(t *testing.T) {
	if err := localcluster.CheckRealNode(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	t.Parallel()
	c := localcluster.StartForTest(t, localcluster.Options{RealNode: localcluster.RealNodeRequired})
	ctx := t.Context()
	cfg := c.RESTConfig()
	cs := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)

	dir, err := ModuleDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	crds, err := CRDs(dir)
	if err != nil {
		t.Fatal(err)
	}
	crds = slices.DeleteFunc(crds, func(u *unstructured.Unstructured) bool { return u.GetName() != "catalogsources.operators.coreos.com" })
	a, err := newApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range crds {
		if err := a.apply(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	if err := olmlocal.WaitEstablished(ctx, dyn, crds); err != nil {
		t.Fatal(err)
	}

	const source = "catalog"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The catalog operator (holding the pod's network namespace, from
	// which the Service is called) and the catalog pod, both on the node.
	one := int32(1)
	op := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: catalogDeployment, Namespace: Namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": catalogDeployment}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": catalogDeployment}},
				Spec:       pausePod(nil),
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(Namespace).Create(ctx, op, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	catalog := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: source, Namespace: Namespace, Labels: map[string]string{"olm.catalogSource": source}},
		Spec:       pausePod([]string{"/pause", "listen", "50051"}),
	}
	if _, err := cs.CoreV1().Pods(Namespace).Create(ctx, catalog, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cat := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "operators.coreos.com/v1alpha1",
		"kind":       "CatalogSource",
		"metadata":   map[string]any{"name": source, "namespace": Namespace},
		"spec":       map[string]any{"sourceType": "grpc", "image": "localhost/not-pulled/catalog:0"},
	}}
	if cat, err = dyn.Resource(gvrCatalogSource).Namespace(Namespace).Create(ctx, cat, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := createService(t, cs, source)

	o := &OLM{cluster: c, cfg: cfg, cs: cs, dyn: dyn, log: t.Output()}
	done := make(chan error, 1)
	mapCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	go func() { done <- o.MapCatalogService(mapCtx, Namespace, source) }()

	// OLM's next sync, its cache not yet showing the status: the Service is
	// replaced once the catalog serves, and only then is the status written.
	waitReady(t, cs, source)
	if err := cs.CoreV1().Services(Namespace).Delete(ctx, source, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	second := createService(t, cs, source)
	for second.Spec.ClusterIP == first.Spec.ClusterIP {
		// The allocator may hand the address out again (1 in 65k); only a
		// new address shows which Service was mapped.
		if err := cs.CoreV1().Services(Namespace).Delete(ctx, source, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		second = createService(t, cs, source)
	}
	t.Logf("registry Service replaced: ClusterIP %s → %s", first.Spec.ClusterIP, second.Spec.ClusterIP)
	if err := unstructured.SetNestedMap(cat.Object, map[string]any{
		"serviceName": source, "serviceNamespace": Namespace, "port": "50051", "protocol": "grpc",
		"createdAt": metav1.Now().UTC().Format(time.RFC3339),
	}, "status", "registryService"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(gvrCatalogSource).Namespace(Namespace).UpdateStatus(ctx, cat, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := <-done; err != nil {
		t.Fatal(err)
	}
	d, err := cs.AppsV1().Deployments(Namespace).Get(ctx, catalogDeployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mapped []string
	for _, a := range d.Spec.Template.Spec.HostAliases {
		if slices.Contains(a.Hostnames, source+"."+Namespace+".svc") {
			mapped = append(mapped, a.IP)
		}
	}
	if !slices.Equal(mapped, []string{second.Spec.ClusterIP}) {
		t.Fatalf("the catalog operator maps %s.%s.svc to %v; want the Service that stayed, %s (the first one was %s)",
			source, Namespace, mapped, second.Spec.ClusterIP, first.Spec.ClusterIP)
	}
}

// pausePod is a pod spec for the real node running the harness's image.
func pausePod(command []string) corev1.PodSpec {
	uid, yes, no := int64(65532), true, false
	c := corev1.Container{
		Name:            "main",
		Image:           localcluster.PauseImage,
		ImagePullPolicy: corev1.PullNever,
		Command:         command,
		SecurityContext: &corev1.SecurityContext{
			RunAsUser: &uid, RunAsNonRoot: &yes, ReadOnlyRootFilesystem: &yes, AllowPrivilegeEscalation: &no,
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
	if len(command) > 2 && command[1] == "listen" {
		c.ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.Parse(command[2])}},
			PeriodSeconds: 1,
		}
	}
	return corev1.PodSpec{
		NodeSelector:                 map[string]string{localcluster.RealNodeLabel: "true"},
		AutomountServiceAccountToken: &no,
		Containers:                   []corev1.Container{c},
	}
}

// createService creates the registry Service as OLM does: port 50051
// named grpc, selecting the CatalogSource's pods.
func createService(t *testing.T, cs kubernetes.Interface, source string) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: source, Namespace: Namespace},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"olm.catalogSource": source},
			Ports:    []corev1.ServicePort{{Name: "grpc", Port: 50051, TargetPort: intstr.FromInt32(50051)}},
		},
	}
	var got *corev1.Service
	// The deleted Service may still be going (its EndpointSlices): retry
	// AlreadyExists until it is gone.
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = cs.CoreV1().Services(Namespace).Create(ctx, svc, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("creating Service %s: %v", source, err)
	}
	return got
}

// waitReady waits until the pod is Ready.
func waitReady(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = fmt.Sprintf("%s %+v", p.Status.Phase, p.Status.ContainerStatuses)
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not Ready: %v (last: %s)", Namespace, name, err, last)
	}
}
