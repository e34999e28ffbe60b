package olmlocal_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/olmlocal"
)

// TestHarness starts OLM v1 on a local cluster the way the e2e does — as
// pods on a real node where the machine can run one, else as host
// processes — and checks what the rest of the suite relies on: both
// controllers ready as uid 65532, catalogd's webhook answering the API
// server, and the host left untouched.
func TestHarness(t *testing.T) {
	pods := localcluster.CheckRealNode() == nil
	if !pods {
		if err := olmlocal.CheckHostProcessSupport(); err != nil {
			t.Skipf("skipped: %v", err)
		}
	}
	t.Parallel()
	hostRun, _ := os.ReadDir("/run")
	_, secretsBefore := os.Stat("/run/secrets/kubernetes.io")

	opts := localcluster.Options{}
	if pods {
		opts.RealNode = localcluster.RealNodeRequired
	}
	c := localcluster.StartForTest(t, opts)
	ctx := t.Context()
	o, err := olmlocal.Start(ctx, c.RESTConfig(), olmlocal.Options{
		Log: t.Output(), Pods: pods, Cluster: c, RegistryHost: c.NodeAddress(), OnRegistry: c.TrustRegistry,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			o.DumpLogs(t.Output(), 60)
		}
		if err := o.Stop(context.Background()); err != nil {
			t.Errorf("stopping OLM: %v", err)
		}
	})

	if pods {
		cs := kubernetes.NewForConfigOrDie(c.RESTConfig())
		l, err := cs.CoreV1().Pods(olmlocal.SystemNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 2 {
			t.Fatalf("%d OLM pods, want catalogd's and operator-controller's", len(l.Items))
		}
		for _, p := range l.Items {
			if p.Spec.NodeName != localcluster.RealNodeName || len(p.Status.ContainerStatuses) != 1 || !p.Status.ContainerStatuses[0].Ready {
				t.Fatalf("OLM pod %s on %q is not Ready on the real node: %+v", p.Name, p.Spec.NodeName, p.Status)
			}
			proc, err := c.InspectContainer(p.Status.ContainerStatuses[0].ContainerID)
			if err != nil {
				t.Fatal(err)
			}
			if proc.UID != olmlocal.NonRootID || !proc.RootReadOnly {
				t.Errorf("OLM pod %s runs as uid %d (read-only root %v), want %d and read-only", p.Name, proc.UID, proc.RootReadOnly, olmlocal.NonRootID)
			}
			t.Logf("OLM pod %s: image %s, uid %d, read-only root", p.Name, p.Status.ContainerStatuses[0].ImageID, proc.UID)
		}
	} else {
		for _, p := range []*olmlocal.Process{o.Catalogd, o.OperatorController} {
			data, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/status")
			if err != nil {
				t.Fatalf("%s: %v", p.Name, err)
			}
			if !strings.Contains(string(data), "Uid:\t65532\t65532\t65532\t65532") {
				t.Errorf("%s does not run as uid 65532:\n%s", p.Name, data)
			}
		}
	}

	// A ClusterCatalog without the metadata.name label gets it from
	// catalogd's webhook, served by the host process.
	dyn := dynamic.NewForConfigOrDie(c.RESTConfig())
	gvr := schema.GroupVersionResource{Group: "olm.operatorframework.io", Version: "v1", Resource: "clustercatalogs"}
	cc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "olm.operatorframework.io/v1", "kind": "ClusterCatalog",
		"metadata": map[string]any{"name": "webhook-check"},
		"spec": map[string]any{"source": map[string]any{"type": "Image", "image": map[string]any{
			"ref": o.Registry.Addr + "/nothing/here@sha256:" + zeros}}},
	}}
	got, err := dyn.Resource(gvr).Create(ctx, cc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l := got.GetLabels()["olm.operatorframework.io/metadata.name"]; l != "webhook-check" {
		t.Errorf("webhook did not label the catalog: labels %v", got.GetLabels())
	}
	if err := dyn.Resource(gvr).Delete(ctx, "webhook-check", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// catalogd removes its finalizer.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := dyn.Resource(gvr).Get(ctx, "webhook-check", metav1.GetOptions{})
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("ClusterCatalog webhook-check still exists 30s after deletion")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := o.Alive(); err != nil {
		t.Fatal(err)
	}

	after, _ := os.ReadDir("/run")
	if len(after) != len(hostRun) {
		t.Errorf("the host's /run changed: %d entries before, %d after", len(hostRun), len(after))
	}
	if _, err := os.Stat("/run/secrets/kubernetes.io"); (err == nil) != (secretsBefore == nil) {
		t.Errorf("/run/secrets/kubernetes.io appeared on the host")
	}
}

const zeros = "0000000000000000000000000000000000000000000000000000000000000000"
