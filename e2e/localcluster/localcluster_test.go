package localcluster_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/titanml/inference-stack-operator/e2e/localcluster"
)

func TestLocalCluster(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	c := localcluster.StartForTest(t, localcluster.Options{})
	t.Logf("cluster started in %s (including any binary build)", time.Since(begin).Round(10*time.Millisecond))
	ctx := t.Context()
	cs := kubernetes.NewForConfigOrDie(c.RESTConfig())

	procs := c.Processes()
	var total int64
	for _, p := range procs {
		t.Logf("component %-24s pid %-7d RSS %4d MiB", p.Name, p.PID, p.RSSBytes>>20)
		total += p.RSSBytes
	}
	t.Logf("components total RSS %d MiB", total>>20)
	for _, want := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller"} {
		if !hasProcess(procs, want) {
			t.Errorf("component %s is not running (have %v)", want, procs)
		}
	}
	checkLoopbackOnly(t, procs)

	t.Run("nodes", func(t *testing.T) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]corev1.Node{}
		for _, n := range nodes.Items {
			got[n.Name] = n
		}
		for _, want := range localcluster.DefaultNodes() {
			n, ok := got[want.Name]
			if !ok {
				t.Errorf("node %s missing", want.Name)
				continue
			}
			if !isReady(&n) {
				t.Errorf("node %s not Ready: %+v", n.Name, n.Status.Conditions)
			}
			if tainted := hasTaint(&n, localcluster.GPUTaintKey); tainted != (want.GPU != nil) {
				t.Errorf("node %s: GPU taint %v, want %v", n.Name, tainted, want.GPU != nil)
			}
			if tainted := hasTaint(&n, localcluster.ControlPlaneLabel); tainted != want.ControlPlane {
				t.Errorf("node %s: control-plane taint %v, want %v", n.Name, tainted, want.ControlPlane)
			}
			if want.GPU != nil {
				q := n.Status.Allocatable[localcluster.GPUResource]
				if q.Value() != int64(want.GPU.Count) || n.Labels[localcluster.GPUProductLabel] != want.GPU.Product {
					t.Errorf("node %s: allocatable %s=%s, product %q; want %d, %q", n.Name,
						localcluster.GPUResource, q.String(), n.Labels[localcluster.GPUProductLabel], want.GPU.Count, want.GPU.Product)
				}
			}
		}
	})

	gpuLimit := corev1.ResourceList{localcluster.GPUResource: resource.MustParse("1")}
	tolerateGPU := []corev1.Toleration{localcluster.GPUToleration()}

	t.Run("GPU pod runs on the selected GPU node", func(t *testing.T) {
		d := deployment("rtx", localcluster.ProductRTX3060, gpuLimit, tolerateGPU)
		pod := createAndWaitForPod(t, cs, d, func(p *corev1.Pod) bool {
			return p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning
		})
		if pod.Spec.NodeName != "gpu-rtx3060" {
			t.Errorf("pod %s bound to %s, want gpu-rtx3060", pod.Name, pod.Spec.NodeName)
		}
	})

	t.Run("absent GPU product stays Pending", func(t *testing.T) {
		d := deployment("absent", "NVIDIA-A100-SXM4-80GB", gpuLimit, tolerateGPU)
		pod := createAndWaitForPod(t, cs, d, unschedulable)
		expectPendingWith(t, cs, pod, "didn't match Pod's node affinity/selector")
	})

	t.Run("GPU taint needs a toleration", func(t *testing.T) {
		d := deployment("untolerated", localcluster.ProductRTX3060, nil, nil)
		pod := createAndWaitForPod(t, cs, d, unschedulable)
		expectPendingWith(t, cs, pod, "untolerated taint")
	})

	t.Run("Stop leaves no process behind", func(t *testing.T) {
		dir := c.Dir()
		begin := time.Now()
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("stopped in %s", time.Since(begin).Round(10*time.Millisecond))
		for _, p := range procs {
			if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID)); err == nil && procStartTime(string(stat)) == p.StartTime && procState(string(stat)) != "Z" {
				t.Errorf("%s (pid %d) still running after Stop", p.Name, p.PID)
			}
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("work dir %s not removed: %v", dir, err)
		}
	})
}

// TestMinimalCluster covers the options used by API-only tests (e.g. CRD
// validation): no nodes, no scheduler, no controller-manager.
func TestMinimalCluster(t *testing.T) {
	t.Parallel()
	c := localcluster.StartForTest(t, localcluster.Options{
		Nodes:                    []localcluster.Node{},
		WithoutScheduler:         true,
		WithoutControllerManager: true,
	})
	var names []string
	for _, p := range c.Processes() {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	if got, want := strings.Join(names, ","), "etcd,kube-apiserver,kwok-controller"; got != want {
		t.Errorf("components %s, want %s", got, want)
	}
	nodes, err := kubernetes.NewForConfigOrDie(c.RESTConfig()).CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 0 {
		t.Errorf("%d nodes, want none", len(nodes.Items))
	}
}

func deployment(name, product string, limits corev1.ResourceList, tolerations []corev1.Toleration) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{localcluster.GPUProductLabel: product},
					Tolerations:  tolerations,
					Containers: []corev1.Container{{
						Name:      "reader",
						Image:     "tytn/takeoff-pro:never-pulled",
						Resources: corev1.ResourceRequirements{Limits: limits},
					}},
				},
			},
		},
	}
}

// createAndWaitForPod creates d and polls its pods until one satisfies ok.
func createAndWaitForPod(t *testing.T, cs kubernetes.Interface, d *appsv1.Deployment, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	begin := time.Now()
	if _, err := cs.AppsV1().Deployments(d.Namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating deployment %s: %v", d.Name, err)
	}
	var last string
	for {
		pods, err := cs.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + d.Name})
		if err == nil {
			for i := range pods.Items {
				p := &pods.Items[i]
				if ok(p) {
					t.Logf("pod %s: node %q, phase %s after %s", p.Name, p.Spec.NodeName, p.Status.Phase, time.Since(begin).Round(time.Millisecond))
					return p
				}
				last = fmt.Sprintf("pod %s: node %q, phase %s, conditions %+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions)
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("deployment %s: no pod reached the expected state: %v (last: %s)", d.Name, ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// expectPendingWith checks that pod is unbound and Pending and that a
// FailedScheduling event for it mentions reason.
func expectPendingWith(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod, reason string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sel := fields.Set{"involvedObject.name": pod.Name, "reason": "FailedScheduling"}.AsSelector().String()
	var msgs []string
	for {
		events, err := cs.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err == nil {
			msgs = msgs[:0]
			for _, e := range events.Items {
				msgs = append(msgs, e.Message)
				if strings.Contains(e.Message, reason) {
					t.Logf("FailedScheduling: %s", e.Message)
					p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
					if err != nil {
						t.Fatal(err)
					}
					if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
						t.Errorf("pod %s: node %q, phase %s; want unbound and Pending", p.Name, p.Spec.NodeName, p.Status.Phase)
					}
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no FailedScheduling event for %s mentioning %q: %v (events: %q)", pod.Name, reason, ctx.Err(), msgs)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func isReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key && t.Effect == corev1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
}

func hasProcess(procs []localcluster.Process, name string) bool {
	for _, p := range procs {
		if p.Name == name {
			return true
		}
	}
	return false
}

// checkLoopbackOnly fails if any component has a listening TCP socket on an
// address other than 127.0.0.1 / ::1, by matching the socket inodes in
// /proc/<pid>/fd against the LISTEN entries of /proc/net/tcp{,6}.
func checkLoopbackOnly(t *testing.T, procs []localcluster.Process) {
	t.Helper()
	listeners := map[string]string{} // socket inode -> local address
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatalf("reading listening sockets: %v", err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" { // 0A = LISTEN
				continue
			}
			listeners[fields[9]] = fields[1]
		}
		fh.Close()
	}
	count := 0
	for _, p := range procs {
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", p.PID))
		for _, fd := range fds {
			target, err := os.Readlink(fd)
			if err != nil || !strings.HasPrefix(target, "socket:[") {
				continue
			}
			inode := strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")
			addr, ok := listeners[inode]
			if !ok {
				continue
			}
			count++
			host, port, _ := strings.Cut(addr, ":")
			portN, _ := strconv.ParseUint(port, 16, 16)
			// /proc/net/tcp prints 127.0.0.1 as 0100007F; tcp6 prints ::1
			// as 00000000000000000000000001000000.
			if host != "0100007F" && host != "00000000000000000000000001000000" {
				t.Errorf("%s (pid %d) listens on %s port %d, not loopback", p.Name, p.PID, host, portN)
			}
		}
	}
	if count == 0 {
		t.Errorf("found no listening sockets of the components; the loopback check is broken")
	}
	t.Logf("%d listening sockets, all on loopback", count)
}

func procState(stat string) string {
	i := strings.LastIndexByte(stat, ')')
	f := strings.Fields(stat[i+1:])
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func procStartTime(stat string) uint64 {
	i := strings.LastIndexByte(stat, ')')
	f := strings.Fields(stat[i+1:])
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}
