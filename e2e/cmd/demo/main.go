// Command demo is the main job for a newcomer (make demo): the product's
// flow under OLM v1, for a person. It builds the operator, bundle and
// catalog images, starts a local cluster with simulated GPU nodes and real
// OLM v1 (or uses kind, or an existing cluster), installs the catalog chart,
// lets OLM install the operator from its channel, applies example
// InferenceStacks and shows which pod landed on which GPU node. The
// environment stays up; `make down` stops it.
//
//	demo up   [--dir D] [--cluster local|kind] [--kubeconfig K --registry R]
//	demo down [--dir D]
//	demo serve --dir D   (internal: keeps OLM, the registry and the operator running for `up`)
//
// Re-running `up` reuses the running cluster, OLM and every cached build.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/olmlocal"
	"github.com/titanml/inference-stack-operator/e2e/harness/samples"
	"github.com/titanml/inference-stack-operator/e2e/scenario"
)

func main() {
	// The catalog renderer (operator-registry) logs at info level through
	// logrus for every bundle it reads; isctl keeps it quiet the same way.
	logrus.SetLevel(logrus.WarnLevel)
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

const usage = "usage: demo up|down [--dir D] [--cluster local|kind] [--kubeconfig K --registry R]"

// state is what `down` (and a second `up`) need: saved as <dir>/demo.json.
type state struct {
	Cluster    string // local, kind or existing
	Kubeconfig string
	Registry   string // existing cluster: where images are pushed
	KindName   string
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	cmd := args[0]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	dir := fs.String("dir", ".cache/demo", "work directory of the demo environment")
	cluster := fs.String("cluster", "local", "local (real control plane + KWOK GPU nodes + OLM v1 as host processes) or kind (needs Docker and internet)")
	kubeconfig := fs.String("kubeconfig", "", "use this existing cluster (with OLM v1 installed) instead of starting one")
	registry := fs.String("registry", "", "with --kubeconfig: registry/namespace the cluster can pull from, e.g. ghcr.io/me (push credentials from the docker config)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return fmt.Errorf("--dir: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch cmd {
	case "up":
		st := state{Cluster: *cluster}
		if *kubeconfig != "" {
			if *registry == "" {
				return errors.New("--kubeconfig needs --registry (where to push the images so that the cluster can pull them)")
			}
			st = state{Cluster: "existing", Kubeconfig: *kubeconfig, Registry: *registry}
		}
		return up(ctx, abs, st)
	case "down":
		return down(ctx, abs)
	case "serve":
		return serve(ctx, abs)
	default:
		return errors.New(usage)
	}
}

func step(format string, args ...any) {
	fmt.Printf("==> "+format+"\n", args...)
}

// up starts (or reuses) the environment, deploys the operator through OLM
// at the repository's VERSION, applies the example stacks and reports
// where their pods landed.
func up(ctx context.Context, dir string, st state) error {
	begin := time.Now()
	env, st, v, err := startEnv(ctx, dir, st)
	if err != nil {
		return err
	}
	s, err := scenario.New(env, indent(os.Stdout))
	if err != nil {
		return err
	}
	operatorPod, err := deploy(ctx, s, env, v)
	if err != nil {
		return diagnosed(s, dir, err)
	}
	if err := applyExamples(ctx, s); err != nil {
		return diagnosed(s, dir, err)
	}
	if err := report(ctx, s, operatorPod); err != nil {
		return err
	}
	printUsage(dir, st, env, time.Since(begin))
	return nil
}

// startEnv starts or reattaches to the environment st describes, records
// it for `down`, and returns it with the version to deploy.
func startEnv(ctx context.Context, dir string, st state) (*scenario.Env, state, string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, st, "", fmt.Errorf("creating the demo directory: %w", err)
	}
	if prev, err := loadState(dir); err == nil && prev.Cluster != st.Cluster {
		return nil, st, "", fmt.Errorf("%s holds a %s environment; run `make down` first", dir, prev.Cluster)
	}
	root, err := localcluster.RepoRoot()
	if err != nil {
		return nil, st, "", err
	}
	version, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return nil, st, "", fmt.Errorf("reading the version to deploy: %w", err)
	}
	var env *scenario.Env
	v := strings.TrimSpace(string(version))
	switch st.Cluster {
	case "local":
		env, err = upLocal(ctx, dir, root, v)
	case "kind":
		step("kind cluster with OLM v1 and an in-cluster registry (Docker and internet needed)")
		st.KindName = "inference-stack-demo"
		env, err = scenario.StartKind(ctx, scenario.KindOptions{Name: st.KindName, Dir: filepath.Join(dir, "kind"), Inputs: scenario.Inputs{Root: root}, Log: os.Stdout, Keep: true})
		if err == nil {
			st.Kubeconfig = env.Kubeconfig
		}
	case "existing":
		env, err = existingEnv(dir, root, st)
	default:
		return nil, st, "", fmt.Errorf("--cluster %q: want local or kind", st.Cluster)
	}
	if err != nil {
		return nil, st, "", err
	}
	if err := saveState(dir, st); err != nil {
		return nil, st, "", err
	}
	return env, st, v, nil
}

// diagnosed writes the scenario's conditions, events and component logs
// next to the demo's state and says where they are.
func diagnosed(s *scenario.Scenario, dir string, err error) error {
	diag := filepath.Join(dir, "diagnostics.txt")
	f, ferr := os.Create(diag)
	if ferr != nil {
		return err
	}
	defer f.Close()
	s.Diagnose(f)
	return fmt.Errorf("%w\n(conditions, events and component logs: %s)", err, diag)
}

// deploy builds and pushes the images at version v, installs the catalog
// chart and waits until OLM runs the operator from the catalog. On a real
// node it returns a line describing the operator's pod.
func deploy(ctx context.Context, s *scenario.Scenario, env *scenario.Env, v string) (string, error) {
	step("building and pushing the operator, bundle and catalog images at %s (the build of record; cached after the first run)", v)
	images, err := env.Builder.BuildAndPush(ctx, v)
	if err != nil {
		return "", err
	}
	fmt.Printf("    operator %s\n    bundle   %s\n    catalog  %s\n", images.Operator, images.Bundle, images.Catalog)

	step("installing the catalog chart (InferenceStack CRD, ClusterCatalog by digest, ClusterExtension on %s)", inferencestack.Channel(inferencestack.Stable, s.Major))
	if err := s.InstallCatalog(ctx, images.Catalog); err != nil {
		return "", err
	}
	step("waiting for OLM to install the operator from the catalog")
	if err := s.WaitInstalled(ctx, v, images.Operator); err != nil {
		return "", err
	}
	if env.RealNode == "" {
		return "", nil
	}
	pods, err := s.OperatorPods(ctx)
	if err != nil || len(pods) == 0 {
		return "", fmt.Errorf("the operator pod: %v", err)
	}
	p := pods[0]
	operatorPod := fmt.Sprintf("operator pod %s/%s: Ready on the real node %s, image %s (containerd, pulled by digest)", p.Namespace, p.Name, p.Spec.NodeName, p.Status.ContainerStatuses[0].ImageID)
	fmt.Println("    " + operatorPod)
	return operatorPod, nil
}

// applyExamples applies the example stacks and waits until the ones for
// this major are deployed and their pods placed.
func applyExamples(ctx context.Context, s *scenario.Scenario) error {
	step("applying example InferenceStacks")
	examples := []struct{ doc, note string }{
		{samples.Example, "the documented example: a reader on the RTX 3060"},
		{samples.H100, "a 4-GPU tensor-parallel reader on the H100 node"},
		{samples.AbsentGPU, "asks for a GPU no node has: stays Pending and says why"},
		{samples.OtherMajor, "labelled for another major: nobody touches it"},
	}
	for _, e := range examples {
		u, err := s.Apply(ctx, e.doc)
		if err != nil {
			return err
		}
		fmt.Printf("    %-20s operatorVersion=%s  %s\n", u.GetName(), u.GetLabels()["operatorVersion"], e.note)
	}
	step("waiting for the v0 stacks to be deployed and their pods scheduled")
	for _, n := range []string{"my-inference-stack", "big-models", "no-such-gpu"} {
		if err := s.WaitDeployed(ctx, "default", n); err != nil {
			return err
		}
		if _, err := s.WaitPlaced(ctx, "default", n, 2); err != nil {
			return err
		}
	}
	s.Mark("GPU pod Running")
	step("waiting for the stacks to say whether they serve")
	for _, want := range []struct{ name, status, reason string }{
		{"my-inference-stack", "True", "Available"},
		{"big-models", "True", "Available"},
		{"no-such-gpu", "False", "InsufficientGPU"},
	} {
		if _, err := s.WaitReady(ctx, "default", want.name, want.status, want.reason); err != nil {
			return err
		}
	}
	return nil
}

// report prints which pod landed on which node, the extension's and the
// catalog's status, and that the other major's stack was left alone.
func report(ctx context.Context, s *scenario.Scenario, operatorPod string) error {
	pls, err := s.Placements(ctx, "default", "")
	if err != nil {
		return err
	}
	stacks, err := s.Stacks(ctx, "default")
	if err != nil {
		return err
	}
	fmt.Println()
	scenario.PrintStacks(os.Stdout, stacks)
	fmt.Println()
	scenario.PrintPlacements(os.Stdout, pls)
	ce, err := s.Dyn.Resource(scenario.GVRClusterExtension).Get(ctx, inferencestack.ExtensionName(s.Major), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading the ClusterExtension: %w", err)
	}
	cc, err := s.Dyn.Resource(scenario.GVRClusterCatalog).Get(ctx, inferencestack.CatalogName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading the ClusterCatalog: %w", err)
	}
	bundle, _, _ := unstructured.NestedString(ce.Object, "status", "install", "bundle", "name")
	bver, _, _ := unstructured.NestedString(ce.Object, "status", "install", "bundle", "version")
	resolved, _, _ := unstructured.NestedString(cc.Object, "status", "resolvedSource", "image", "ref")
	installed, _, _ := scenario.Condition(ce, "Installed")
	fmt.Printf("\nClusterExtension %s: Installed=%s, version %s (%s), channel %s\n", ce.GetName(), installed, bver, bundle, inferencestack.Channel(inferencestack.Stable, s.Major))
	fmt.Printf("ClusterCatalog %s serves %s\n", cc.GetName(), resolved)
	if operatorPod != "" {
		fmt.Println(operatorPod)
	}
	if d := s.Since("helm install", "GPU pod Running"); d > 0 {
		fmt.Printf("ClusterExtension created → GPU pods Running: %s\n", d.Round(10*time.Millisecond))
	}
	if err := s.Untouched(ctx, "default", "for-another-major"); err != nil {
		fmt.Printf("warning: %v\n", err)
	} else {
		fmt.Println("for-another-major (operatorVersion=v1): untouched (no finalizer, no status, no pods)")
	}
	return nil
}

// printUsage says how to reach the environment and how to stop it.
func printUsage(dir string, st state, env *scenario.Env, took time.Duration) {
	kubectl := "kubectl"
	if st.Cluster == "local" {
		if c, err := localcluster.Attach(filepath.Join(dir, "cluster"), io.Discard); err == nil {
			kubectl = c.Binaries().Kubectl
		}
	}
	fmt.Printf(`
Done in %s. The environment is up. Try:
  export KUBECONFIG=%s
  %s get clustercatalogs,clusterextensions
  %s get inferencestacks,deployments,pods -o wide
`, took.Round(time.Second), env.Kubeconfig, kubectl, kubectl)
	switch {
	case env.RealNode != "":
		major, _ := inferencestack.MajorOf(inferencestack.Version())
		fmt.Printf("  %s logs -n %s deploy/%s    # the operator, on the real node\n", kubectl, inferencestack.Namespace(major), inferencestack.InstanceName(major))
		fmt.Printf("  %s logs -n olmv1-system deploy/operator-controller-controller-manager\n", kubectl)
	case st.Cluster == "local":
		fmt.Printf("OLM's and the operator's logs: %s\n", filepath.Join(dir, "olm"))
	}
	fmt.Println("Stop everything: make down")
}

// upLocal attaches to (or starts) the local cluster and the serve process
// that keeps OLM, the registry and the operator running after `up` exits.
func upLocal(ctx context.Context, dir, root, version string) (*scenario.Env, error) {
	if err := scenario.CheckLocal("v1"); err != nil {
		return nil, err
	}
	b := &scenario.Builder{Root: root, Dir: filepath.Join(dir, "images"), Log: indent(os.Stdout)}
	if _, err := os.Stat(filepath.Join(dir, "images", "out-"+version)); err != nil {
		// First run: compile the operator while the cluster's and OLM's
		// binaries build.
		go func() { _ = b.Warm(ctx, version) }()
	}
	clusterDir := filepath.Join(dir, "cluster")
	step("local cluster (real etcd, kube-apiserver, controller-manager, scheduler; a real node where this machine can run one; KWOK nodes: RTX 3060, 8×H100, control plane)")
	c, err := localcluster.Attach(clusterDir, os.Stderr)
	if err != nil {
		if c, err = localcluster.Start(ctx, localcluster.Options{Dir: clusterDir, Log: indent(os.Stdout), RealNode: localcluster.RealNodeAuto}); err != nil {
			return nil, err
		}
	} else {
		fmt.Println("    reusing the running cluster in", clusterDir)
	}
	if c.HasRealNode() {
		fmt.Printf("    real node %s: kubelet, kube-proxy and containerd on this machine, in a network namespace of their own\n", localcluster.RealNodeName)
	} else {
		fmt.Printf("    no real node (%s): the operator runs as a host process\n", c.RealNodeSkipped())
	}

	where := "as host processes"
	if c.HasRealNode() {
		where = "as pods on the real node"
	}
	step("OLM %s (catalogd, operator-controller %s), TLS registry on %s", olmlocal.Version, where, c.NodeAddress())
	sv, err := readServe(dir)
	if err == nil && sv.alive() {
		fmt.Printf("    reusing them (pid %d), registry https://%s\n", sv.PID, sv.Registry)
	} else {
		if sv, err = startServe(ctx, dir); err != nil {
			return nil, err
		}
	}
	b.Registry, b.RegistryCAFile = sv.Registry+"/tytn", sv.CAFile
	env := &scenario.Env{
		Provider:   "local",
		Kubeconfig: c.Kubeconfig(),
		RESTConfig: c.RESTConfig(),
		Builder:    b,
		GPUNodes:   map[string]string{localcluster.ProductRTX3060: "gpu-rtx3060", localcluster.ProductH100: "gpu-h100"},
		Alive: func() error {
			if !sv.alive() {
				return fmt.Errorf("the demo's OLM process (pid %d) exited; log %s:\n%s", sv.PID, serveLog(dir), tail(serveLog(dir), 30))
			}
			return nil
		},
		Dump: func(w io.Writer) {
			fmt.Fprintf(w, "==== %s ====\n%s\n", serveLog(dir), tail(serveLog(dir), 200))
			c.DumpLogs(w, 30)
		},
	}
	scenario.RealNodeEnv(env, c)
	return env, nil
}

func existingEnv(dir, root string, st state) (*scenario.Env, error) {
	step("existing cluster from %s; images go to %s", st.Kubeconfig, st.Registry)
	cfg, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", st.Kubeconfig, err)
	}
	return &scenario.Env{
		Provider: "existing", Kubeconfig: st.Kubeconfig, RESTConfig: cfg,
		Builder:  &scenario.Builder{Root: root, Dir: filepath.Join(dir, "images"), Registry: st.Registry, Log: indent(os.Stdout)},
		GPUNodes: map[string]string{},
	}, nil
}

// serveState is written by `demo serve` once OLM is ready.
type serveState struct {
	PID       int
	StartTime string
	Registry  string
	CAFile    string
}

func serveFile(dir string) string { return filepath.Join(dir, "serve.json") }
func serveLog(dir string) string  { return filepath.Join(dir, "serve.log") }

func readServe(dir string) (*serveState, error) {
	data, err := os.ReadFile(serveFile(dir))
	if err != nil {
		return nil, fmt.Errorf("reading the serve state: %w", err)
	}
	sv := &serveState{}
	return sv, json.Unmarshal(data, sv)
}

func (sv *serveState) alive() bool {
	return sv != nil && sv.PID > 0 && procStart(sv.PID) == sv.StartTime
}

// procStart is field 22 of /proc/<pid>/stat (start time since boot), ""
// if the process is gone: with the pid it identifies a process.
func procStart(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" {
		return ""
	}
	return f[19]
}

// startServe starts `demo serve` in its own session and waits until it
// reports OLM ready.
func startServe(ctx context.Context, dir string) (*serveState, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the demo's executable: %w", err)
	}
	_ = os.Remove(serveFile(dir))
	logf, err := os.OpenFile(serveLog(dir), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the serve log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(exe, "serve", "--dir", dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session: it outlives `up` and Ctrl-C there.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the serve process: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(10 * time.Minute) // includes building OLM the first time
	for {
		if sv, err := readServe(dir); err == nil && sv.PID == cmd.Process.Pid {
			fmt.Printf("    ready (pid %d), registry https://%s; logs in %s\n", sv.PID, sv.Registry, serveLog(dir))
			return sv, nil
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("starting OLM failed (%w); %s:\n%s", err, serveLog(dir), tail(serveLog(dir), 40))
		case <-deadline:
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("OLM not ready after 10 minutes; %s:\n%s", serveLog(dir), tail(serveLog(dir), 40))
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// serve runs OLM, the registry and the operator Deployments' processes for
// the local cluster in dir until SIGTERM.
func serve(ctx context.Context, dir string) error {
	c, err := localcluster.Attach(filepath.Join(dir, "cluster"), os.Stdout)
	if err != nil {
		return err
	}
	o, err := olmlocal.Start(ctx, c.RESTConfig(), scenario.OLMOptions(c, filepath.Join(dir, "olm"), os.Stdout))
	if err != nil {
		return err
	}
	sup := &olmlocal.Supervisor{}
	if !c.HasRealNode() {
		// Every Deployment OLM installs from a bundle: KWOK only pretends
		// to run its pods.
		sup = o.Supervise(ctx, "olm.operatorframework.io/owner-kind=ClusterExtension")
	}
	sv := serveState{PID: os.Getpid(), StartTime: procStart(os.Getpid()), Registry: o.Registry.Addr, CAFile: o.CAFile}
	data, _ := json.Marshal(sv)
	if err := os.WriteFile(serveFile(dir)+".tmp", data, 0o644); err != nil {
		return fmt.Errorf("writing the serve state: %w", err)
	}
	if err := os.Rename(serveFile(dir)+".tmp", serveFile(dir)); err != nil {
		return fmt.Errorf("writing the serve state: %w", err)
	}
	fmt.Println("serving; SIGTERM stops OLM, the registry and the operator processes")
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Println("stopping")
			for _, r := range sup.Runners() {
				r.Stop()
			}
			_ = os.Remove(serveFile(dir))
			return o.Stop(context.Background())
		case <-tick.C:
			if err := o.Alive(); err != nil {
				fmt.Println(err)
			}
		}
	}
}

func down(ctx context.Context, dir string) error {
	st, err := loadState(dir)
	if err != nil {
		st = &state{Cluster: "local"}
	}
	switch st.Cluster {
	case "kind":
		step("deleting kind cluster %s", st.KindName)
		if err := scenario.DeleteKind(ctx, st.KindName); err != nil {
			return err
		}
	case "existing":
		step("removing the demo from %s in the documented order (stacks, then the catalog chart; the CRD stays)", st.Kubeconfig)
		cfg, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
		if err != nil {
			return err
		}
		s, err := scenario.New(&scenario.Env{Kubeconfig: st.Kubeconfig, RESTConfig: cfg}, indent(os.Stdout))
		if err != nil {
			return err
		}
		if err := s.Teardown(ctx); err != nil {
			return err
		}
	default:
		if sv, err := readServe(dir); err == nil && sv.alive() {
			step("stopping OLM, the registry and the operator (pid %d)", sv.PID)
			_ = syscall.Kill(sv.PID, syscall.SIGTERM)
			deadline := time.Now().Add(30 * time.Second)
			for sv.alive() && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			if sv.alive() {
				_ = syscall.Kill(sv.PID, syscall.SIGKILL)
			}
		}
		_ = os.Remove(serveFile(dir))
		// The demo before OLM ran the operator directly.
		if data, err := os.ReadFile(filepath.Join(dir, "operator.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && syscall.Kill(pid, syscall.SIGTERM) == nil {
				step("stopped the operator of an older demo (pid %d)", pid)
			}
			_ = os.Remove(filepath.Join(dir, "operator.pid"))
		}
		c, err := localcluster.Attach(filepath.Join(dir, "cluster"), os.Stderr)
		if err != nil && c == nil {
			step("no cluster running in %s", dir)
		} else {
			step("stopping the local cluster")
			if err := c.Stop(ctx); err != nil {
				return err
			}
			if left := c.RealNodeLeftovers(); len(left) > 0 {
				return fmt.Errorf("the real node left behind: %s", strings.Join(left, "; "))
			}
		}
	}
	return os.Remove(filepath.Join(dir, "demo.json"))
}

func loadState(dir string) (*state, error) {
	data, err := os.ReadFile(filepath.Join(dir, "demo.json"))
	if err != nil {
		return nil, fmt.Errorf("reading the demo state: %w", err)
	}
	st := &state{}
	return st, json.Unmarshal(data, st)
}

func saveState(dir string, st state) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the demo state: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "demo.json"), data, 0o644)
}

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// indent prefixes every line written with four spaces.
func indent(w io.Writer) io.Writer { return &indenter{w: w, bol: true} }

type indenter struct {
	w   io.Writer
	bol bool
}

func (i *indenter) Write(p []byte) (int, error) {
	for _, b := range p {
		if i.bol {
			if _, err := i.w.Write([]byte("    ")); err != nil {
				return 0, err
			}
		}
		if _, err := i.w.Write([]byte{b}); err != nil {
			return 0, err
		}
		i.bol = b == '\n'
	}
	return len(p), nil
}
