// Command demo is the main job for a newcomer (make demo): it starts the local
// cluster with simulated GPU nodes, installs the InferenceStack CRD, builds
// and runs the operator against it, applies example stacks (the seed
// documents' example among them) and shows where their pods landed. The
// environment stays up; `make down` stops it.
//
//	demo up   --dir D   build, start, apply, report (re-running reuses what exists)
//	demo down --dir D   stop the operator and the cluster
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/titanml/inference-stack-operator/crds"
	"github.com/titanml/inference-stack-operator/e2e/localcluster"
)

var stackGVR = schema.GroupVersionResource{Group: "models.takeoff.co", Version: "v1alpha1", Resource: "inferencestacks"}

// examples are applied in order. The first is the seed documents' example
// (labelled for this operator's major); the last is labelled for a major no
// operator runs, to show it is left alone.
const examples = `
apiVersion: models.takeoff.co/v1alpha1
kind: InferenceStack
metadata:
  name: my-inference-stack
  namespace: default
  labels: {operatorVersion: v0}
spec:
  applications:
    hello-world:
      nodeSelector:
        nvidia.com/gpu.product: NVIDIA-GeForce-RTX-3060
      readerConfig:
        modelName: "unsloth/Llama-3.2-1B-Instruct"
        device: cuda
  imagePullSecrets:
    - name: regcred
---
apiVersion: models.takeoff.co/v1alpha1
kind: InferenceStack
metadata:
  name: big-models
  namespace: default
  labels: {operatorVersion: v0}
spec:
  applicationTemplate:
    readerConfig: {consumerGroup: big}
  applications:
    llama-70b:
      nodeSelector:
        nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
      readerConfig: {modelName: meta-llama/Llama-3.3-70B-Instruct, device: cuda, tensorParallel: 4}
    embedder:
      readerConfig: {modelName: BAAI/bge-small-en-v1.5, device: cpu}
---
apiVersion: models.takeoff.co/v1alpha1
kind: InferenceStack
metadata:
  name: no-such-gpu
  namespace: default
  labels: {operatorVersion: v0}
spec:
  applications:
    waiting:
      nodeSelector: {nvidia.com/gpu.product: NVIDIA-B200}
      readerConfig: {device: cuda}
---
apiVersion: models.takeoff.co/v1alpha1
kind: InferenceStack
metadata:
  name: for-another-major
  namespace: default
  labels: {operatorVersion: v1}
spec:
  applications:
    untouched: {}
`

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 || (args[0] != "up" && args[0] != "down") {
		return errors.New("usage: demo up|down --dir D")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	dir := fs.String("dir", ".cache/demo", "work directory of the demo environment")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if args[0] == "down" {
		return down(ctx, abs)
	}
	return up(ctx, abs)
}

func step(format string, args ...any) {
	fmt.Printf("==> "+format+"\n", args...)
}

func up(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	clusterDir := filepath.Join(dir, "cluster")
	step("local cluster (real etcd, kube-apiserver, controller-manager, scheduler; KWOK GPU nodes)")
	c, err := localcluster.Attach(clusterDir, os.Stderr)
	if err != nil {
		c, err = localcluster.Start(ctx, localcluster.Options{Dir: clusterDir, Log: os.Stderr})
		if err != nil {
			return err
		}
	} else {
		fmt.Println("    reusing the running cluster in", clusterDir)
	}
	cfg := c.RESTConfig()

	step("installing the InferenceStack CRD")
	if err := crds.Install(ctx, cfg); err != nil {
		return err
	}

	step("building and starting the operator (reconciles operatorVersion=v0)")
	if err := startOperator(ctx, dir, c.Kubeconfig()); err != nil {
		return err
	}

	step("applying example InferenceStacks")
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var names []string
	for _, doc := range strings.Split(examples, "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return fmt.Errorf("example: %w", err)
		}
		_, err := dyn.Resource(stackGVR).Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("applying %s: %w", u.GetName(), err)
		}
		fmt.Printf("    %s (operatorVersion=%s)\n", u.GetName(), u.GetLabels()["operatorVersion"])
		names = append(names, u.GetName())
	}

	step("waiting for the v0 stacks to be deployed and their pods scheduled")
	if err := waitDeployed(ctx, dyn, names[:3], operatorAlive(dir)); err != nil {
		logTail, _ := os.ReadFile(filepath.Join(dir, "operator.log"))
		return fmt.Errorf("%w\noperator log (%s):\n%s", err, filepath.Join(dir, "operator.log"), lastLines(string(logTail), 30))
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := report(ctx, cs, dyn); err != nil {
		return err
	}
	kubectl := c.Binaries().Kubectl
	fmt.Printf(`
The environment is up. Try:
  export KUBECONFIG=%s
  %s get inferencestacks,deployments,pods -o wide
Operator log: %s
Stop everything: make down
`, c.Kubeconfig(), kubectl, filepath.Join(dir, "operator.log"))
	return nil
}

// startOperator builds the operator and starts it detached, unless the one
// recorded in dir is still running.
func startOperator(ctx context.Context, dir, kubeconfig string) error {
	pidFile := filepath.Join(dir, "operator.pid")
	if pid, err := readPID(pidFile); err == nil && syscall.Kill(pid, 0) == nil {
		fmt.Println("    reusing the running operator, pid", pid)
		return nil
	}
	bin := filepath.Join(dir, "operator")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./operator")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the operator: %w", err)
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(dir, "operator.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin,
		"--kubeconfig="+kubeconfig,
		"--zap-encoder=console",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1]),
		"--leader-elect=false")
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session, so it outlives this command and Ctrl-C here.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the operator: %w", err)
	}
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		return err
	}
	fmt.Println("    operator pid", cmd.Process.Pid, "log", logf.Name())
	return cmd.Process.Release()
}

// operatorAlive reports whether the operator recorded in dir still runs.
func operatorAlive(dir string) func() error {
	return func() error {
		pid, err := readPID(filepath.Join(dir, "operator.pid"))
		if err != nil {
			return err
		}
		var status syscall.WaitStatus
		// Reap it if it was our child and exited, so Kill(0) tells the truth.
		if p, _ := syscall.Wait4(pid, &status, syscall.WNOHANG, nil); p == pid || syscall.Kill(pid, 0) != nil {
			return fmt.Errorf("the operator (pid %d) exited", pid)
		}
		return nil
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func waitDeployed(ctx context.Context, dyn dynamic.Interface, names []string, alive func() error) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := alive(); err != nil {
			return false, err
		}
		for _, n := range names {
			u, err := dyn.Resource(stackGVR).Namespace("default").Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if status, _ := deployed(u); status != "True" {
				return false, nil
			}
		}
		return true, nil
	})
}

func deployed(u *unstructured.Unstructured) (status, reason string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Deployed" {
			s, _ := m["status"].(string)
			r, _ := m["reason"].(string)
			return s, r
		}
	}
	return "-", ""
}

func report(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface) error {
	stacks, err := dyn.Resource(stackGVR).Namespace("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Println()
	fmt.Fprintln(tw, "STACK\tOPERATOR\tDEPLOYED\tREASON")
	for _, s := range stacks.Items {
		st, r := deployed(&s)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.GetName(), s.GetLabels()["operatorVersion"], st, r)
	}
	tw.Flush()

	// Pods go Running (or stay Pending) within a second of scheduling.
	var pods *corev1.PodList
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err = cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == "" && !unschedulable(&p) {
				return false, nil
			}
		}
		return len(pods.Items) > 0, nil
	})
	if pods == nil {
		return errors.New("listing pods failed")
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	gpu := map[string]string{}
	for _, n := range nodes.Items {
		gpu[n.Name] = n.Labels["nvidia.com/gpu.product"]
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
	fmt.Println()
	fmt.Fprintln(tw, "POD\tGPUS\tNODE\tGPU PRODUCT\tPHASE")
	for _, p := range pods.Items {
		q := p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]
		node, product, phase := p.Spec.NodeName, gpu[p.Spec.NodeName], string(p.Status.Phase)
		if node == "" {
			node = "-"
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
					phase += ": " + c.Message
				}
			}
		}
		if product == "" {
			product = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, q.String(), node, product, phase)
	}
	return tw.Flush()
}

func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

func down(ctx context.Context, dir string) error {
	if pid, err := readPID(filepath.Join(dir, "operator.pid")); err == nil {
		if err := syscall.Kill(pid, syscall.SIGTERM); err == nil {
			step("stopped the operator (pid %d)", pid)
		}
		_ = os.Remove(filepath.Join(dir, "operator.pid"))
	}
	c, err := localcluster.Attach(filepath.Join(dir, "cluster"), os.Stderr)
	if err != nil {
		step("no cluster running in %s", dir)
		return nil
	}
	step("stopping the local cluster")
	return c.Stop(ctx)
}

func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
