package localcluster_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
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
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/poll"
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

// TestRealNodeAvailable fails where the machine could run a real node (root,
// cgroups) but something it needs is missing: there the e2e must not fall
// back to simulated pods silently. It skips, saying why, where the machine
// cannot run one at all.
func TestRealNodeAvailable(t *testing.T) {
	err := localcluster.CheckRealNode()
	if errors.Is(err, localcluster.ErrRealNodeUnsupported) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI must run the real node: %v", err)
		}
		t.Skipf("skipped: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestRealNode starts a cluster with a real node and checks what only a
// real kubelet and container runtime do: the node registers and is Ready
// beside the simulated ones (KWOK leaves it alone), a pod there runs the
// harness's image with the security context it asks for, reaches the API
// server through the `kubernetes` Service with its service-account token,
// answers `kubectl logs` and `kubectl exec` through the kubelet's client
// certificate auth, and Stop leaves nothing behind.
func TestRealNode(t *testing.T) {
	if err := localcluster.CheckRealNode(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	t.Parallel()
	begin := time.Now()
	c := localcluster.StartForTest(t, localcluster.Options{RealNode: localcluster.RealNodeRequired})
	t.Logf("cluster with a real node started in %s", time.Since(begin).Round(10*time.Millisecond))
	ctx := t.Context()
	cs := kubernetes.NewForConfigOrDie(c.RESTConfig())
	if !c.HasRealNode() {
		t.Fatal("no real node")
	}

	node, err := cs.CoreV1().Nodes().Get(ctx, localcluster.RealNodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !isReady(node) {
		t.Errorf("real node not Ready: %+v", node.Status.Conditions)
	}
	if _, ok := node.Annotations[localcluster.KwokNodeAnnotation]; ok {
		t.Errorf("the real node carries %s", localcluster.KwokNodeAnnotation)
	}
	if rt := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(rt, "containerd://") {
		t.Errorf("real node runtime %q, want containerd", rt)
	}
	if v := node.Status.NodeInfo.KubeletVersion; v != localcluster.KubernetesVersion {
		t.Errorf("kubelet %s, want %s", v, localcluster.KubernetesVersion)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, localcluster.DefaultCPUNode, metav1.GetOptions{}); err == nil {
		t.Errorf("simulated CPU node %s exists beside the real node", localcluster.DefaultCPUNode)
	}

	uid, yes, no := int64(65532), true, false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "real", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{localcluster.RealNodeLabel: "true"},
			Containers: []corev1.Container{{
				Name:            "probe",
				Image:           localcluster.PauseImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"/pause", "apiserver"},
				SecurityContext: &corev1.SecurityContext{
					RunAsUser:                &uid,
					RunAsNonRoot:             &yes,
					ReadOnlyRootFilesystem:   &yes,
					AllowPrivilegeEscalation: &no,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		got, err = cs.CoreV1().Pods(pod.Namespace).Get(waitCtx, pod.Name, metav1.GetOptions{})
		if err == nil && got.Status.Phase == corev1.PodRunning && len(got.Status.ContainerStatuses) == 1 && got.Status.ContainerStatuses[0].Ready {
			break
		}
		select {
		case <-waitCtx.Done():
			evs, _ := cs.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{})
			for _, e := range evs.Items {
				t.Logf("event %s %s/%s %s: %s", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
			}
			t.Fatalf("pod not Running and ready: %v (last: %+v)", waitCtx.Err(), got)
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Logf("pod %s Running on %s with IP %s", got.Name, got.Spec.NodeName, got.Status.PodIP)
	if got.Spec.NodeName != localcluster.RealNodeName {
		t.Errorf("pod on %s, want %s", got.Spec.NodeName, localcluster.RealNodeName)
	}
	if !strings.HasPrefix(got.Status.ContainerStatuses[0].ContainerID, "containerd://") {
		t.Errorf("container %q was not run by containerd", got.Status.ContainerStatuses[0].ContainerID)
	}

	// What the runtime made of the security context, seen from the host.
	proc, err := c.InspectContainer(got.Status.ContainerStatuses[0].ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("container process: %+v", *proc)
	if proc.UID != 65532 || !proc.RootReadOnly || proc.CapEff != 0 {
		t.Errorf("container runs as uid %d, read-only root %v, capabilities %#x; want 65532, true, 0", proc.UID, proc.RootReadOnly, proc.CapEff)
	}

	// kubectl logs: the API server → the kubelet, with client certificates.
	var logs string
	err = poll.Until(ctx, 30*time.Second, "the pod's logs", poll.Check(func() (bool, string) {
		b, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		logs = string(b)
		return err == nil && strings.Contains(logs, "apiserver 200 OK"), fmt.Sprintf("%v: %s", err, b)
	}))
	if err != nil {
		t.Fatalf("the pod did not reach the API server through the kubernetes Service (logs): %v", err)
	}
	if !strings.Contains(logs, localcluster.KubernetesVersion) {
		t.Errorf("logs do not show the API server's version: %s", logs)
	}
	t.Logf("pod log: %s", strings.TrimSpace(logs))

	// kubectl exec: SPDY/websocket through the API server to the kubelet.
	out, err := exec.CommandContext(ctx, c.Binaries().Kubectl, "--kubeconfig", c.Kubeconfig(), "exec", pod.Name, "--", "/pause", "echo", "hello from the real node").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "hello from the real node" {
		t.Errorf("kubectl exec: %v: %s", err, out)
	}

	checkServices(t, c, cs, got.Name)

	// Stop leaves nothing behind.
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if left := c.RealNodeLeftovers(); len(left) > 0 {
		t.Errorf("left behind after Stop:\n%s", strings.Join(left, "\n"))
	}
}

// checkServices runs a server pod behind a ClusterIP Service on the real
// node and calls it the ways the e2e's pods do: from another pod across the
// node's bridge (OLM's controllers calling their catalogs), from the server
// itself through its own Service (hairpin), and from the node's namespace.
// Every call must be answered at once: the cluster is ready only when
// kube-proxy serves the `kubernetes` Service, and a new Service's rules
// follow within moments. A Service without endpoints fails at that hop.
func checkServices(t *testing.T, c *localcluster.Cluster, cs kubernetes.Interface, client string) {
	ctx := t.Context()
	ns := metav1.NamespaceDefault
	uid, yes, no := int64(65532), true, false
	server := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns, Labels: map[string]string{"app": "echo"}},
		Spec: corev1.PodSpec{
			NodeSelector:                 map[string]string{localcluster.RealNodeLabel: "true"},
			AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{
				Name:            "echo",
				Image:           localcluster.PauseImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"/pause", "listen", "8080"},
				Ports:           []corev1.ContainerPort{{Name: "echo", ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("echo")}},
					PeriodSeconds: 1,
				},
				SecurityContext: &corev1.SecurityContext{
					RunAsUser: &uid, RunAsNonRoot: &yes, ReadOnlyRootFilesystem: &yes, AllowPrivilegeEscalation: &no,
					Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, server, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, selector := range map[string]string{"echo": "echo", "nobody": "nobody"} {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": selector},
				Ports:    []corev1.ServicePort{{Name: "echo", Port: 80, TargetPort: intstr.FromString("echo")}},
			},
		}
		if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err := poll.Until(ctx, 2*time.Minute, "the server pod Ready", poll.Check(func() (bool, string) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, server.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready, fmt.Sprintf("%s %+v", p.Status.Phase, p.Status.ContainerStatuses)
	}))
	if err != nil {
		t.Fatalf("server pod not ready: %v", err)
	}
	for _, chk := range []localcluster.ServiceCheck{
		{Namespace: ns, Name: "echo", FromNamespace: ns, FromPod: client},
		{Namespace: ns, Name: "echo", FromNamespace: ns, FromPod: server.Name},
		{Namespace: ns, Name: "echo"},
		{Namespace: metav1.NamespaceDefault, Name: "kubernetes", FromNamespace: ns, FromPod: client},
	} {
		begin := time.Now()
		if err := c.WaitService(ctx, chk, time.Minute); err != nil {
			t.Error(err)
			continue
		}
		t.Logf("%s answers (%s)", chk, time.Since(begin).Round(time.Millisecond))
	}
	err = c.CheckService(ctx, localcluster.ServiceCheck{Namespace: ns, Name: "nobody", FromNamespace: ns, FromPod: client})
	var se *localcluster.ServiceError
	if !errors.As(err, &se) || se.Hop != localcluster.HopEndpoints {
		t.Errorf("a Service without endpoints: got %v, want a ServiceError at hop %q", err, localcluster.HopEndpoints)
	} else {
		t.Logf("a Service without endpoints: %v", err)
	}
}
