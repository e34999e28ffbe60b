package localcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/titanml/inference-stack-operator/e2e/harness/poll"
)

// DefaultName is the cluster name used when Options.Name is empty. The
// kubeconfig context is "kwok-<name>".
const DefaultName = "inference-stack"

// Options configure Start. The zero value is a full cluster with
// DefaultNodes in a fresh temporary directory.
type Options struct {
	// Name of the cluster (kwokctl's --name). Default DefaultName.
	Name string
	// Dir is the work directory holding the kubeconfig, kwokctl's state,
	// certificates, etcd data and component logs. Default: a new temporary
	// directory, removed by Stop. A given Dir is kept (only the cluster's
	// state inside it is removed by Stop), so `up`/`down` can use it.
	Dir string
	// Nodes to create. nil means DefaultNodes(); use an empty non-nil slice
	// for no nodes.
	Nodes []Node
	// Log receives progress messages (binary builds, start, stop). Default
	// io.Discard.
	Log io.Writer
	// WithoutScheduler starts no kube-scheduler: pods stay unbound, e.g. to
	// test objects without scheduling side effects.
	WithoutScheduler bool
	// WithoutControllerManager starts no kube-controller-manager: no
	// Deployment creates ReplicaSets or Pods, no namespace finalization, no
	// default ServiceAccounts.
	WithoutControllerManager bool
	// StartTimeout bounds starting the components and waiting for
	// readiness (building binaries is bounded only by ctx). Default 2m.
	StartTimeout time.Duration
	// RealNode adds a real node (RealNodeName): a kubelet, kube-proxy and
	// containerd on this machine, in a network namespace of their own, so
	// that pods scheduled there really run. With a real node the control
	// plane listens on the host end of the node's veth pair
	// (Cluster.NodeAddress) instead of 127.0.0.1, and the default nodes
	// leave out the simulated CPU node: the real node is the cluster's CPU
	// node. See CheckRealNode for what it needs.
	RealNode RealNodeMode
}

// Cluster is a running local cluster. Its methods are safe to call from one
// goroutine at a time.
type Cluster struct {
	st  state
	cfg *rest.Config
	log io.Writer
}

// state is what `down` needs to find and stop a cluster started by another
// process; it is saved as <Dir>/localcluster.json.
type state struct {
	Name       string
	Dir        string
	OwnDir     bool // Dir was created by Start and is removed by Stop
	Kubeconfig string
	Binaries   Binaries
	Processes  []Process
	// Owner is the process that called Start. A temporary cluster whose
	// owner died without stopping it (e.g. a test binary killed on
	// timeout) is cleaned up by the next Start on the machine.
	Owner Process
	// RealNode is the real node, if the cluster has one.
	RealNode *realNode `json:",omitempty"`
	// RealNodeSkipped says why RealNodeAuto gave no real node.
	RealNodeSkipped string `json:",omitempty"`
}

const stateFile = "localcluster.json"

func (c *Cluster) kwokDir() string    { return filepath.Join(c.st.Dir, "kwok") }
func (c *Cluster) clusterDir() string { return filepath.Join(c.kwokDir(), "clusters", c.st.Name) }

// Name returns the cluster name.
func (c *Cluster) Name() string { return c.st.Name }

// Dir returns the work directory.
func (c *Cluster) Dir() string { return c.st.Dir }

// Kubeconfig returns the path of an admin kubeconfig for the cluster
// (client certificate auth; the API server is https://127.0.0.1:<port>).
func (c *Cluster) Kubeconfig() string { return c.st.Kubeconfig }

// RESTConfig returns a copy of the admin client configuration. It has
// client-go's default rate limits (QPS 5, burst 10); raise them for load.
func (c *Cluster) RESTConfig() *rest.Config {
	if c.cfg == nil {
		return nil // attached to a cluster without a kubeconfig
	}
	return rest.CopyConfig(c.cfg)
}

// Binaries returns the paths of the binaries the cluster runs (kubectl
// included, handy for tests that shell out).
func (c *Cluster) Binaries() Binaries { return c.st.Binaries }

// Start builds the binaries if needed (about 6 minutes the first time on a
// machine), starts etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and the KWOK controller as background processes listening
// on 127.0.0.1 only, creates the simulated nodes and waits until the API
// server is ready, every node is Ready and schedulable, and the default
// ServiceAccount exists. On error nothing is left running.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	defaultNodes := opts.Nodes == nil
	if defaultNodes {
		opts.Nodes = DefaultNodes()
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	skipped, err := resolveRealNode(&opts)
	if err != nil {
		return nil, err
	}
	withNode := opts.RealNode == RealNodeRequired
	if defaultNodes && withNode {
		opts.Nodes = slices.DeleteFunc(DefaultNodes(), func(n Node) bool { return n.Name == DefaultCPUNode })
	}
	bins, err := EnsureBinaries(ctx, opts.Log)
	if err != nil {
		return nil, err
	}
	if withNode {
		if bins.Kubelet, bins.KubeProxy, err = EnsureNodeBinaries(ctx, opts.Log); err != nil {
			return nil, err
		}
	}

	reapLeakedClusters(ctx, opts.Log)
	st := state{Name: opts.Name, Binaries: *bins, Owner: self(), RealNodeSkipped: skipped}
	if err := prepareWorkDir(ctx, &st, opts); err != nil {
		return nil, err
	}
	st.Kubeconfig = filepath.Join(st.Dir, "kubeconfig")
	return startRetrying(ctx, st, opts)
}

// resolveRealNode settles opts.RealNode to RealNodeOff or RealNodeRequired:
// RealNodeAuto becomes RealNodeOff, with the reason returned, where the
// machine cannot run a real node.
func resolveRealNode(opts *Options) (string, error) {
	skipped := ""
	switch opts.RealNode {
	case RealNodeOff:
	case RealNodeAuto, RealNodeRequired:
		err := CheckRealNode()
		switch {
		case err == nil:
			opts.RealNode = RealNodeRequired
		case opts.RealNode == RealNodeAuto && errors.Is(err, ErrRealNodeUnsupported):
			skipped = err.Error()
			opts.RealNode = RealNodeOff
			fmt.Fprintf(opts.Log, "no real node: %s; pods on the cluster are simulated only\n", skipped)
		default:
			return "", err
		}
	default:
		return "", fmt.Errorf("unknown RealNode mode %q", opts.RealNode)
	}
	return skipped, nil
}

// prepareWorkDir sets st.Dir: a new temporary directory, or opts.Dir
// (created) after cleaning up a dead cluster left in it; it fails if a
// cluster still runs there.
func prepareWorkDir(ctx context.Context, st *state, opts Options) (err error) {
	if opts.Dir == "" {
		st.Dir, err = os.MkdirTemp("", "localcluster-")
		if err != nil {
			return fmt.Errorf("creating work dir: %w", err)
		}
		st.OwnDir = true
		return nil
	}
	if st.Dir, err = filepath.Abs(opts.Dir); err != nil {
		return fmt.Errorf("work dir %s: %w", opts.Dir, err)
	}
	if err := os.MkdirAll(st.Dir, 0o755); err != nil {
		return fmt.Errorf("creating work dir: %w", err)
	}
	prev, err := Attach(st.Dir, opts.Log)
	switch {
	case err == nil:
		return fmt.Errorf("a cluster is already running in %s; stop it first", st.Dir)
	case errors.Is(err, ErrNotRunning):
		// Leftovers of a cluster that died or was killed (possibly
		// with some components still up): kwokctl would otherwise
		// "continue" it with its old ports.
		fmt.Fprintf(opts.Log, "cleaning up a dead cluster in %s (%v)\n", st.Dir, err)
		if err := prev.stop(ctx, false); err != nil {
			return fmt.Errorf("cleaning up the previous cluster in %s: %w", st.Dir, err)
		}
	}
	return nil
}

// startRetrying starts the cluster described by st, again with fresh
// ports after a port conflict; on error it stops what started and removes
// a temporary work directory.
//
// Ports are chosen by the kernel just before kwokctl starts the
// components, so a test package racing us may grab one in between; the
// loser sees "address already in use" and tries again with fresh ports.
// (kwokctl's own port picker scans down from 32767 in every process, so
// parallel clusters would collide on every attempt.)
func startRetrying(ctx context.Context, st state, opts Options) (*Cluster, error) {
	const attempts = 3
	for attempt := 1; ; attempt++ {
		c := &Cluster{st: st, log: opts.Log}
		err := c.start(ctx, opts)
		if err == nil {
			return c, nil
		}
		logs := c.tailLogs(20)
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		stopErr := c.stop(stopCtx, false)
		cancel()
		if stopErr != nil {
			err = fmt.Errorf("%w (and cleaning up: %v)", err, stopErr)
		}
		if stopErr == nil && attempt < attempts && ctx.Err() == nil && strings.Contains(logs+err.Error(), "address already in use") {
			fmt.Fprintf(opts.Log, "port conflict while starting the cluster, retrying with new ports (attempt %d of %d)\n", attempt+1, attempts)
			continue
		}
		if st.OwnDir && stopErr == nil {
			_ = os.RemoveAll(st.Dir)
		}
		return nil, fmt.Errorf("starting local cluster in %s: %w\ncomponent logs:\n%s", st.Dir, err, logs)
	}
}

func (c *Cluster) start(ctx context.Context, opts Options) error {
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	begin := time.Now()
	fmt.Fprintf(c.log, "starting local cluster %q in %s…\n", c.st.Name, c.st.Dir)

	if opts.RealNode == RealNodeRequired {
		// The node's network comes first: the control plane listens on
		// the host end of its veth pair.
		n, release, err := newRealNode(ctx, filepath.Join(c.st.Dir, "node"))
		if err != nil {
			return err
		}
		c.st.RealNode = n
		// Saved before anything is created, so that a failed or
		// interrupted start is cleaned up by Stop or `down`.
		if err := c.save(); err != nil {
			release()
			return err
		}
		err = n.setupNetwork(ctx)
		release()
		if err != nil {
			return err
		}
		if err := n.createCgroups(); err != nil {
			return err
		}
	}
	cfgPath := filepath.Join(c.st.Dir, "kwokctl.yaml")
	cfg, err := c.kwokctlConfig(opts)
	if err != nil {
		return err
	}
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return fmt.Errorf("writing kwokctl config: %w", err)
	}
	// The state is saved before anything runs so that `down` can clean up
	// after a start that was interrupted.
	if err := c.save(); err != nil {
		return err
	}
	if n := c.st.RealNode; n != nil {
		if err := n.forwardAPIServer(ctx); err != nil {
			return err
		}
	}
	// Orphaned components are reparented to us and reaped by Stop,
	// instead of lingering as zombies where PID 1 does not reap.
	becomeSubreaper()
	if err := c.create(ctx, cfgPath); err != nil {
		return err
	}
	created := time.Since(begin)
	if err := c.trackProcesses(); err != nil {
		return err
	}
	if err := c.save(); err != nil {
		return err
	}
	c.cfg, err = clientcmd.BuildConfigFromFlags("", c.st.Kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig %s: %w", c.st.Kubeconfig, err)
	}
	if n := c.st.RealNode; n != nil {
		if err := n.start(ctx, c, net.JoinHostPort(n.HostIP, strconv.Itoa(n.APIServerPort))); err != nil {
			return fmt.Errorf("starting the real node: %w", err)
		}
	}
	phases, err := c.waitReady(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.log, "local cluster ready in %s (kwokctl create %s, then %s): export KUBECONFIG=%s\n",
		time.Since(begin).Round(10*time.Millisecond), created.Round(10*time.Millisecond), strings.Join(phases, ", "), c.st.Kubeconfig)
	return nil
}

// create runs `kwokctl create cluster`, failing fast if a component it
// started exits: kwokctl itself would wait two minutes for an API server
// that died (e.g. of a port conflict) and then only warn.
func (c *Cluster) create(ctx context.Context, cfgPath string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd, out := c.kwokctlCmd(ctx, "create", "cluster", "--config", cfgPath, "--kubeconfig", c.st.Kubeconfig)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("kwokctl create cluster: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("kwokctl create cluster: %w\n%s", err, out)
			}
			return nil
		case <-tick.C:
			if dead := exitedComponents(c.clusterDir()); len(dead) > 0 {
				cancel()
				<-done
				return fmt.Errorf("%s exited while starting\n%s", strings.Join(dead, ", "), out)
			}
		}
	}
}

// checkAlive fails if a tracked component has exited, so that readiness
// waits end at once instead of at their deadline.
func (c *Cluster) checkAlive() error {
	var dead []string
	for _, p := range c.st.Processes {
		if !p.alive() {
			dead = append(dead, p.Name)
		}
	}
	if len(dead) > 0 {
		return fmt.Errorf("%s exited", strings.Join(dead, ", "))
	}
	return nil
}

// kwokctlConfig renders the KwokctlConfiguration. JSON is valid YAML, which
// is what kwokctl reads, and needs no YAML dependency here. Field names are
// those of sigs.k8s.io/kwok/pkg/apis/config/v1alpha1 at KwokVersion.
func (c *Cluster) kwokctlConfig(opts Options) ([]byte, error) {
	ports, err := FreePorts(6)
	if err != nil {
		return nil, err
	}
	b := c.st.Binaries
	options := map[string]any{
		// Components run as host processes; nothing is pulled.
		"runtime": "binary",
		// Without this every component listens on 0.0.0.0. (kwokctl's
		// components reach each other at 127.0.0.1 whatever this says; a
		// real node reaches the API server through a forward from the host
		// end of its veth pair, see realNode.forwardAPIServer.)
		"bindAddress": "127.0.0.1",
		"kubeVersion": KubernetesVersion,
		"etcdVersion": strings.TrimPrefix(EtcdVersion, "v"),
		// Local paths: kwokctl symlinks them into its work dir instead of
		// downloading.
		"kubeApiserverBinary":         b.KubeApiserver,
		"kubeControllerManagerBinary": b.KubeControllerManager,
		"kubeSchedulerBinary":         b.KubeScheduler,
		"kubectlBinary":               b.Kubectl,
		"kwokControllerBinary":        b.Kwok,
		"etcdBinary":                  b.Etcd,
		"etcdPort":                    ports[0],
		"etcdPeerPort":                ports[1],
		"kubeApiserverPort":           ports[2],
		"kwokControllerPort":          ports[3],
		"kubeControllerManagerPort":   ports[4],
		"kubeSchedulerPort":           ports[5],
		"quietPull":                   true,
		"cacheDir":                    filepath.Join(c.kwokDir(), "cache"),
	}
	var disable []string
	if opts.WithoutScheduler {
		disable = append(disable, "kube-scheduler")
	}
	if opts.WithoutControllerManager {
		disable = append(disable, "kube-controller-manager")
	}
	if len(disable) > 0 {
		options["disable"] = disable
	}
	arg := func(k, v string, override bool) map[string]any {
		return map[string]any{"key": k, "value": v, "override": override}
	}
	patches := []any{
		// KWOK manages exactly the nodes it simulates (kwokctl's binary
		// runtime would otherwise take every node, and mark a real node's
		// pods Running with made-up IPs).
		map[string]any{"name": "kwok-controller", "extraArgs": []any{
			arg("manage-all-nodes", "false", true),
			arg("manage-nodes-with-annotation-selector", KwokNodeAnnotation+"=fake", false),
		}},
	}
	// kube-apiserver's default Service range (a /24) holds 254 Services:
	// fewer than the two per stack of a 200-stack burst.
	apiserverArgs := []any{arg("service-cluster-ip-range", ServiceCIDR, false)}
	if n := c.st.RealNode; n != nil {
		pki := filepath.Join(c.clusterDir(), "pki")
		n.APIServerPort = ports[2]
		options["kubeApiserverCertSANs"] = []string{n.HostIP, kubernetesServiceIP}
		apiserverArgs = append(apiserverArgs,
			// The `kubernetes` Service's endpoint: where pods reach the API
			// server (forwarded to its loopback listener).
			arg("advertise-address", n.HostIP, false),
			// logs, exec and port-forward: the API server authenticates to
			// the kubelet with a certificate of the cluster CA (the
			// kubelet authorises it with a SubjectAccessReview), and checks
			// the kubelet's serving certificate against the same CA.
			arg("kubelet-client-certificate", filepath.Join(pki, "admin.crt"), false),
			arg("kubelet-client-key", filepath.Join(pki, "admin.key"), false),
			arg("kubelet-certificate-authority", filepath.Join(pki, "ca.crt"), false),
			arg("kubelet-preferred-address-types", "InternalIP", false),
			// Webhooks and aggregated APIs served by pods are called at the
			// pod's address (the host routes the pod range to the node):
			// there is no cluster DNS and the host has no Service rules.
			arg("enable-aggregator-routing", "true", false),
		)
	}
	patches = append(patches, map[string]any{"name": "kube-apiserver", "extraArgs": apiserverArgs})
	return json.MarshalIndent(map[string]any{
		"apiVersion":        "config.kwok.x-k8s.io/v1alpha1",
		"kind":              "KwokctlConfiguration",
		"options":           options,
		"componentsPatches": patches,
	}, "", "  ")
}

// FreePorts asks the kernel for n distinct free loopback ports. The
// listeners stay open until all are chosen so the ports differ.
func FreePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// kwokctl runs kwokctl against this cluster's own work dir.
func (c *Cluster) kwokctl(ctx context.Context, args ...string) (string, error) {
	cmd, out := c.kwokctlCmd(ctx, args...)
	err := cmd.Run()
	return out.String(), err
}

func (c *Cluster) kwokctlCmd(ctx context.Context, args ...string) (*exec.Cmd, *bytes.Buffer) {
	cmd := exec.CommandContext(ctx, c.st.Binaries.Kwokctl, append([]string{"--name", c.st.Name}, args...)...)
	cmd.Dir = c.st.Dir
	var env []string
	for _, e := range os.Environ() {
		// KWOK_* variables override kwokctl's configuration (runtime,
		// binaries, ports…); only ours may apply.
		if !strings.HasPrefix(e, "KWOK_") {
			env = append(env, e)
		}
	}
	cmd.Env = append(env,
		"KWOK_WORKDIR="+c.kwokDir(),
		// kwokctl prefers a kubectl found in PATH over kubectlBinary.
		"PATH="+filepath.Dir(c.st.Binaries.Kubectl)+string(os.PathListSeparator)+os.Getenv("PATH"),
	)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// On cancellation let kwokctl stop gracefully: it then kills and waits
	// for the kubectl it may be running, which would otherwise be orphaned
	// to us (see becomeSubreaper) as a zombie. SIGKILL follows after
	// WaitDelay, which also bounds the wait for our output pipes.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 10 * time.Second
	return cmd, out
}

// trackProcesses records the components' PIDs and start times from
// kwokctl's pid files, so Stop can wait for exactly these processes.
func (c *Cluster) trackProcesses() error {
	procs, err := readPIDFiles(c.clusterDir(), c.st.Binaries.all())
	if err != nil {
		return fmt.Errorf("reading component pids: %w", err)
	}
	for _, p := range procs {
		if !slices.ContainsFunc(c.st.Processes, func(q Process) bool { return q.PID == p.PID && q.StartTime == p.StartTime }) {
			c.st.Processes = append(c.st.Processes, p)
		}
	}
	return nil
}

func (c *Cluster) save() error {
	data, err := json.MarshalIndent(c.st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(c.st.Dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("saving cluster state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(c.st.Dir, stateFile)); err != nil {
		return fmt.Errorf("saving cluster state: %w", err)
	}
	return nil
}

// ErrNotRunning is returned (wrapped) by Attach for a cluster whose
// components are not all running.
var ErrNotRunning = errors.New("local cluster is not running")

// Attach returns the cluster whose state is saved in dir (by Start with
// Options.Dir = dir, possibly in another process). If there is none the
// error wraps os.ErrNotExist. If some or all of its components have exited
// the error wraps ErrNotRunning and the returned Cluster is still usable for
// Stop, to clean up.
func Attach(dir string, log io.Writer) (*Cluster, error) {
	if log == nil {
		log = io.Discard
	}
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("no local cluster in %s: %w", dir, err)
	}
	c := &Cluster{log: log}
	if err := json.Unmarshal(data, &c.st); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", filepath.Join(dir, stateFile), err)
	}
	if cfg, err := clientcmd.BuildConfigFromFlags("", c.st.Kubeconfig); err == nil {
		c.cfg = cfg
	}
	var dead []string
	for _, p := range c.st.Processes {
		if !p.alive() {
			dead = append(dead, p.Name)
		}
	}
	if len(c.st.Processes) == 0 || len(dead) > 0 || c.cfg == nil {
		return c, fmt.Errorf("%w in %s (exited: %v)", ErrNotRunning, dir, dead)
	}
	return c, nil
}

// reapLeakedClusters stops temporary clusters (Options.Dir unset) whose
// owner process is gone: nothing else would ever stop them.
func reapLeakedClusters(ctx context.Context, log io.Writer) {
	states, _ := filepath.Glob(filepath.Join(os.TempDir(), "localcluster-*", stateFile))
	for _, f := range states {
		c, _ := Attach(filepath.Dir(f), log)
		if c == nil || !c.st.OwnDir || c.st.Owner.PID == 0 || c.st.Owner.alive() {
			continue
		}
		fmt.Fprintf(log, "stopping a local cluster leaked by exited process %d in %s\n", c.st.Owner.PID, c.st.Dir)
		if err := c.Stop(ctx); err != nil {
			fmt.Fprintf(log, "  failed: %v\n", err)
		}
	}
}

func (c *Cluster) running() bool {
	return slices.ContainsFunc(c.st.Processes, Process.alive)
}

// waitReady polls until the API server is ready, the nodes exist and are
// Ready without not-ready taints, and (with a controller-manager) the
// default ServiceAccount exists, so that a test can create Pods at once.
// It returns when each step finished, for the progress message.
func (c *Cluster) waitReady(ctx context.Context, opts Options) (phases []string, err error) {
	begin := time.Now()
	mark := func(what string) {
		phases = append(phases, fmt.Sprintf("%s +%s", what, time.Since(begin).Round(10*time.Millisecond)))
	}
	cs, err := kubernetes.NewForConfig(c.cfg)
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	names, err := c.createNodes(ctx, cs, opts.Nodes)
	if err != nil {
		return nil, err
	}
	mark("nodes created")
	if err := c.waitAPIReady(ctx, cs); err != nil {
		return nil, err
	}
	mark("readyz")
	if err := c.waitNodesReady(ctx, cs, names, !opts.WithoutControllerManager); err != nil {
		return nil, err
	}
	mark("nodes Ready")
	if c.st.RealNode != nil {
		// Pods reach the API server through the `kubernetes` Service: the
		// node is usable once kube-proxy has programmed it and a call from
		// the node's namespace is answered.
		if err := c.WaitService(ctx, ServiceCheck{Namespace: metav1.NamespaceDefault, Name: "kubernetes"}, time.Until(deadlineOf(ctx))); err != nil {
			return nil, err
		}
		mark("kubernetes Service answers on the real node")
	}
	if opts.WithoutControllerManager {
		return phases, nil
	}
	if err := c.waitDefaultServiceAccount(ctx, cs); err != nil {
		return nil, err
	}
	mark("default ServiceAccount")
	return phases, nil
}

// createNodes creates the simulated nodes as soon as the API server
// accepts them, before /readyz passes, so that KWOK and the node lifecycle
// controller work on them while the remaining post-start hooks finish. It
// returns the names of all the cluster's nodes, the real one included.
func (c *Cluster) createNodes(ctx context.Context, cs kubernetes.Interface, nodes []Node) ([]string, error) {
	var names []string
	if c.st.RealNode != nil {
		// The kubelet registers it.
		names = append(names, c.st.RealNode.Name)
	}
	for _, n := range nodes {
		obj, err := n.object()
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name, err)
		}
		err = poll.Until(ctx, 0, "creating node "+n.Name, func(ctx context.Context) (bool, string, error) {
			if err := c.checkAlive(); err != nil {
				return false, "", err
			}
			_, err := cs.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
			if err == nil || apierrors.IsAlreadyExists(err) {
				return true, "", nil
			}
			return false, err.Error(), nil
		})
		if err != nil {
			return nil, err
		}
		names = append(names, n.Name)
	}
	return names, nil
}

// waitAPIReady polls the API server's /readyz.
func (c *Cluster) waitAPIReady(ctx context.Context, cs kubernetes.Interface) error {
	return poll.Until(ctx, 0, "API server /readyz", func(ctx context.Context) (bool, string, error) {
		if err := c.checkAlive(); err != nil {
			return false, "", err
		}
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, body), nil
		}
		return true, "", nil
	})
}

// waitNodesReady polls until every named node can take pods (see
// notReady).
func (c *Cluster) waitNodesReady(ctx context.Context, cs kubernetes.Interface, names []string, expectLifecycleController bool) error {
	return poll.Until(ctx, 0, "nodes Ready", func(ctx context.Context) (bool, string, error) {
		if err := c.checkAlive(); err != nil {
			return false, "", err
		}
		for _, name := range names {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			if why := notReady(n, expectLifecycleController); why != "" {
				return false, name + ": " + why, nil
			}
		}
		return true, "", nil
	})
}

// waitDefaultServiceAccount polls until the controller-manager has created
// the default namespace's ServiceAccount, which Pods there need.
func (c *Cluster) waitDefaultServiceAccount(ctx context.Context, cs kubernetes.Interface) error {
	return poll.Until(ctx, 0, "default ServiceAccount", func(ctx context.Context) (bool, string, error) {
		if err := c.checkAlive(); err != nil {
			return false, "", err
		}
		_, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, err.Error(), nil
		}
		return err == nil, "", err
	})
}

// notReady says why a node cannot take pods yet, or "" if it can. The
// node lifecycle controller taints new nodes not-ready until it has seen
// them Ready; the scheduler would reject pods meanwhile.
func notReady(n *corev1.Node, expectLifecycleController bool) string {
	ready := false
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		return "condition Ready is not True"
	}
	if expectLifecycleController {
		for _, t := range n.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
				return "taint " + t.Key
			}
		}
	}
	return ""
}

// deadlineOf is ctx's deadline, or a minute from now if it has none.
func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(time.Minute)
}

// Processes returns the running components with their current RSS.
func (c *Cluster) Processes() []Process {
	var out []Process
	for _, p := range c.st.Processes {
		if !p.alive() {
			continue
		}
		if rss, err := p.rss(); err == nil {
			p.RSSBytes = rss
		}
		out = append(out, p)
	}
	return out
}

// LogFiles maps each component (e.g. "kube-apiserver") to its log file.
// The files are removed by Stop.
func (c *Cluster) LogFiles() map[string]string {
	files, _ := filepath.Glob(filepath.Join(c.clusterDir(), "logs", "*.log"))
	m := map[string]string{}
	for _, f := range files {
		m[strings.TrimSuffix(filepath.Base(f), ".log")] = f
	}
	if n := c.st.RealNode; n != nil {
		for name, f := range n.nodeLogFiles() {
			m[name] = f
		}
	}
	return m
}

// DumpLogs writes the last lines (0 = all) of every component log to w, for
// a failing test to show what the control plane saw. Call it before Stop.
func (c *Cluster) DumpLogs(w io.Writer, lines int) {
	io.WriteString(w, c.tailLogs(lines))
}

func (c *Cluster) tailLogs(lines int) string {
	var b strings.Builder
	files := c.LogFiles()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		data, err := os.ReadFile(files[n])
		if err != nil {
			continue
		}
		ls := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if lines > 0 && len(ls) > lines {
			ls = ls[len(ls)-lines:]
		}
		fmt.Fprintf(&b, "==== %s (last %d lines of %s) ====\n%s\n", n, len(ls), files[n], strings.Join(ls, "\n"))
	}
	return b.String()
}

// Stop deletes the cluster and returns once every component process has
// exited (`kwokctl delete cluster` signals them but does not wait).
// Processes still running after 30s (or when ctx ends) are killed. Stop
// removes the work dir if Start created it, else only the cluster's files
// in it. Stopping a stopped cluster is a no-op.
func (c *Cluster) Stop(ctx context.Context) error {
	return c.stop(ctx, c.st.OwnDir)
}

func (c *Cluster) stop(ctx context.Context, removeDir bool) error {
	// kwokctl deletes the pid files, so collect them first; a component
	// started after Start returned (none today) would be caught here too.
	reapExitedChildren(c.clusterDir())
	_ = c.trackProcesses()
	var errs []error
	// The real node first: its kubelet would otherwise keep restarting
	// containers, and its teardown needs nothing from the control plane.
	if err := c.stopRealNode(ctx); err != nil {
		errs = append(errs, fmt.Errorf("stopping the real node: %w", err))
	}
	if _, err := os.Stat(c.clusterDir()); err == nil {
		// Not fatal: the processes are killed below if need be, and the
		// files removed; only a failure of those matters.
		if out, err := c.kwokctl(ctx, "delete", "cluster", "--kubeconfig", c.st.Kubeconfig); err != nil {
			fmt.Fprintf(c.log, "kwokctl delete cluster: %v\n%s", err, out)
		}
	}

	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := poll.Until(waitCtx, 0, "components to exit", func(context.Context) (bool, string, error) {
		c.reap()
		return !c.running(), c.describeRunning(), nil
	})
	cancel()
	if err != nil {
		fmt.Fprintf(c.log, "%v; killing them\n", err)
		for _, p := range c.st.Processes {
			if err := p.kill(syscall.SIGKILL); err != nil {
				errs = append(errs, err)
			}
		}
		killCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := poll.Until(killCtx, 0, "killed components to exit", func(context.Context) (bool, string, error) {
			c.reap()
			return !c.running(), c.describeRunning(), nil
		}); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}

	if removeDir {
		if err := os.RemoveAll(c.st.Dir); err != nil {
			return fmt.Errorf("removing work dir: %w", err)
		}
		return nil
	}
	for _, f := range []string{stateFile, "kwokctl.yaml", "kubeconfig"} {
		if err := os.Remove(filepath.Join(c.st.Dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("cleaning work dir: %w", err)
		}
	}
	if err := os.RemoveAll(c.kwokDir()); err != nil {
		return fmt.Errorf("cleaning work dir: %w", err)
	}
	if n := c.st.RealNode; n != nil {
		if err := os.RemoveAll(n.Dir); err != nil {
			return fmt.Errorf("cleaning work dir: %w", err)
		}
	}
	return nil
}

// reap collects the exit status of components that are our children (see
// becomeSubreaper), so that they leave no zombie behind.
func (c *Cluster) reap() {
	for _, p := range c.st.Processes {
		if state, start, err := procStat(p.PID); err == nil && start == p.StartTime && state == 'Z' {
			reapChild(p.PID)
		}
	}
}

func (c *Cluster) describeRunning() string {
	var s []string
	for _, p := range c.st.Processes {
		if p.alive() {
			s = append(s, fmt.Sprintf("%s (pid %d)", p.Name, p.PID))
		}
	}
	return "still running: " + strings.Join(s, ", ")
}
