package operatorbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/crds"
	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/operatorproc"
	"github.com/titanml/inference-stack-operator/e2e/harness/poll"
)

// clusterUnderTest is a fresh cluster with the CRD installed, and the
// harness's clients for it.
type clusterUnderTest struct {
	*localcluster.Cluster
	dyn     dynamic.Interface
	objects *creator // of the releases' kinds
	stacks  stackKind
}

// startCluster starts a fresh cluster and installs the CRD, so that the
// write floor and the operators' passes start from the same state; stop
// stops it and waits for its processes, even after ctx is cancelled.
func (b *bench) startCluster(ctx context.Context) (c *clusterUnderTest, stop func(), err error) {
	largest := slices.Max(append([]int{b.o.Own}, b.o.Sizes...))
	lc, err := localcluster.Start(ctx, localcluster.Options{Name: "bench", Nodes: benchNodes(largest), Log: b.log})
	if err != nil {
		return nil, nil, err
	}
	stop = func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if err := lc.Stop(ctx); err != nil {
			b.logf("stopping the cluster: %v", err)
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	c = &clusterUnderTest{Cluster: lc}
	cfg := harnessClient(lc.RESTConfig())
	if err := crds.Install(ctx, cfg); err != nil {
		return nil, nil, err
	}
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, nil, fmt.Errorf("creating a dynamic client: %w", err)
	}
	// Where the operator runs, as OLM makes it: it keeps its release-record
	// key there.
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": inferencestack.Namespace(b.own)}}}
	if _, err := c.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return nil, nil, fmt.Errorf("creating the operator's namespace: %w", err)
	}
	if c.stacks, err = stackType(); err != nil {
		return nil, nil, err
	}
	release, err := renderRelease("warm-up", namespace, stackSpec())
	if err != nil {
		return nil, nil, err
	}
	if c.objects, err = newCreator(cfg, release); err != nil {
		return nil, nil, err
	}
	return c, stop, nil
}

// benchNodes are the default simulated nodes with room on the CPU node for
// every pod of the largest workload, of stacks stacks (two pods per stack;
// a reader requests a CPU and 2Gi), and at least 2,500: with pods left
// Pending, the scheduler's retries and the operator's look at why would add
// load that depends on the cluster's size rather than on the operator, and
// the stacks would never be Ready.
func benchNodes(stacks int) []localcluster.Node {
	nodes := localcluster.DefaultNodes()
	room := max(2500, 2*stacks+100)
	for i := range nodes {
		if nodes[i].Name == localcluster.DefaultCPUNode {
			nodes[i].Pods, nodes[i].CPU, nodes[i].Memory = room, strconv.Itoa(room), "8Ti"
		}
	}
	return nodes
}

// floor creates objs, the rendered releases of the burst's stacks, on a
// fresh cluster, from the same settled and warmed-up state as an
// operator's burst; after says it runs after the repetition's bursts.
func (b *bench) floor(ctx context.Context, rep, stacks int, objs []*unstructured.Unstructured, after bool) (f Floor, err error) {
	name, when := fmt.Sprintf("floor-%d-%d", stacks, rep+1), ""
	if after {
		name, when = name+"-after", " (again, after the operators)"
	}
	b.logf("repetition %d/%d, write floor%s: %d objects with client-go", rep+1, b.o.repsAt(stacks), when, len(objs))
	c, stop, err := b.startCluster(ctx)
	if err != nil {
		return Floor{}, err
	}
	defer stop()
	var names []string
	for _, o := range objs {
		names = append(names, o.GetNamespace())
	}
	if err := c.createNamespaces(ctx, names); err != nil {
		return Floor{}, err
	}
	settle, err := b.readyToTime(ctx, c)
	if err != nil {
		return Floor{}, err
	}
	window := startCPUWindow(c.Cluster)
	profiled := b.profile(ctx, name, nil, c)
	defer func() {
		if perr := profiled(); err == nil {
			err = perr
		}
	}()
	took, err := writeFloor(ctx, c.objects, objs)
	if err != nil {
		return Floor{}, fmt.Errorf("write floor: %w", err)
	}
	byProcess, cpu := window.end(c.Cluster)
	b.logf("write floor: %d objects in %s; the cluster used %.1f s of CPU (%s)", len(objs), took.Round(time.Millisecond), cpu, formatByProcess(byProcess))
	return Floor{Rep: rep, After: after, Stacks: stacks, Objects: len(objs), Seconds: took.Seconds(), ClusterCPUSeconds: cpu, ClusterCPUByProcess: byProcess, ClusterSettleSeconds: settle}, nil
}

// sample is one reading of an operator: its metrics and /proc.
type sample struct {
	at time.Time
	counters
	operatorproc.Usage
}

// operatorUnderTest is a started operator process, its metrics URL and,
// if it is profiled, its pprof URL.
type operatorUnderTest struct {
	*operatorproc.Process
	metrics, pprof string
}

func (o operatorUnderTest) sample(ctx context.Context) (sample, error) {
	s := sample{at: time.Now()}
	var err error
	if s.counters, err = scrape(ctx, o.metrics); err != nil {
		return s, err
	}
	if s.Usage, err = o.Usage(); err != nil {
		return s, err
	}
	return s, nil
}

// startOperator starts op against the cluster's kubeconfig with its
// default flags, but for the metrics endpoint on a loopback port (plain
// HTTP, as the stock operator serves by default) and no health probes
// (their default ports would collide with other processes on the
// machine); it waits until the stack controller's workers run.
func (b *bench) startOperator(ctx context.Context, op Operator, name, kubeconfig string) (operatorUnderTest, error) {
	port, err := freePort()
	if err != nil {
		return operatorUnderTest{}, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	spec := operatorproc.Spec{Name: name, Log: filepath.Join(b.dir, name+".log")}
	switch op {
	case Stock:
		// `helm-operator run` has no --kubeconfig flag; controller-runtime
		// reads KUBECONFIG.
		spec.Binary = b.stock
		spec.Args = []string{"run", "--watches-file=" + b.watches, "--metrics-bind-address=" + addr, "--health-probe-bind-address=0"}
		spec.Env = []string{"KUBECONFIG=" + kubeconfig}
	case Ours:
		spec.Binary = b.ours
		spec.Args = []string{"--kubeconfig=" + kubeconfig, "--metrics-bind-address=" + addr, "--metrics-secure=false", "--health-probe-bind-address=0"}
	default:
		return operatorUnderTest{}, fmt.Errorf("unknown operator %q", op)
	}
	var pprof string
	if op == Ours && b.o.Profile > 0 {
		port, err := freePort()
		if err != nil {
			return operatorUnderTest{}, err
		}
		at := fmt.Sprintf("127.0.0.1:%d", port)
		spec.Args = append(spec.Args, "--pprof-bind-address="+at)
		pprof = "http://" + at + "/debug/pprof"
	}
	o := operatorUnderTest{Process: operatorproc.New(spec), metrics: "http://" + addr + "/metrics", pprof: pprof}
	if err := b.start(ctx, o); err != nil {
		return operatorUnderTest{}, err
	}
	return o, nil
}

// start starts (or starts again) o's process and waits until the stack
// controller's workers run and its metrics answer.
func (b *bench) start(ctx context.Context, o operatorUnderTest) error {
	// Workers start once the stack controller's cache has synced; both
	// operators log it through controller-runtime. A restart appends to
	// the same log, so only a line more than before counts.
	starts := o.workerStarts()
	if err := o.Start(); err != nil {
		return err
	}
	err := b.waitFor(ctx, o, "the stack controller's workers", 2*time.Minute, func() (bool, string) {
		if o.workerStarts() <= starts {
			return false, "not started"
		}
		_, err := scrape(ctx, o.metrics)
		return err == nil, fmt.Sprint(err)
	})
	if err != nil {
		o.Kill(syscall.SIGKILL)
		o.WriteTail(b.log, 60)
		return err
	}
	return nil
}

// workerStarts counts the lines of o's log that say the stack
// controller's workers started: one per start of the process.
func (o operatorUnderTest) workerStarts() int {
	data, _ := os.ReadFile(o.LogPath())
	n := 0
	for line := range bytes.Lines(data) {
		if bytes.Contains(line, []byte("Starting workers")) && bytes.Contains(line, []byte(stackController)) {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds, the deadline passes or the operator
// exits; on failure the error carries cond's last explanation.
func (b *bench) waitFor(ctx context.Context, o operatorUnderTest, what string, timeout time.Duration, cond func() (bool, string)) error {
	exited := func() error {
		if !o.Running() {
			return fmt.Errorf("%s exited", o.Name())
		}
		return nil
	}
	if err := poll.Until(ctx, timeout, what, poll.Check(cond), poll.Every(200*time.Millisecond), poll.While(exited)); err != nil {
		return fmt.Errorf("%s: %w", o.Name(), err)
	}
	return nil
}

// stacks runs one operator through a stacks workload on a fresh cluster:
// foreign stacks first (before the operator starts), then own stacks all
// at once, until every own stack is Deployed; then settling, the idle
// window and the memory readings.
func (b *bench) stacks(ctx context.Context, op Operator, rep, own, foreign int) (Pass, error) {
	what := fmt.Sprintf("%d stacks", own)
	reps := b.o.repsAt(own)
	if foreign > 0 {
		what = fmt.Sprintf("%d own + %d foreign stacks", own, foreign)
		reps = b.o.MemoryReps
	}
	name := fmt.Sprintf("%s-%d-%d", op, own, rep+1)
	load := loadAverage()
	b.logf("repetition %d/%d, %s: %s (load average %s)", rep+1, reps, operatorNames[op], what, load)
	c, stop, err := b.startCluster(ctx)
	if err != nil {
		return Pass{}, err
	}
	defer stop()
	// Cancelled before the cluster stops, so the harness's informer does
	// not outlive it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	refs := b.stackRefs("foreign", foreign)
	if err := c.createNamespaces(ctx, append(namespacesOf(refs), namespacesOf(b.stackRefs("stack", own))...)); err != nil {
		return Pass{}, err
	}
	if foreign > 0 {
		if _, err := createStacks(ctx, c.dyn, c.stacks, refs, b.foreign); err != nil {
			return Pass{}, err
		}
	}
	o, err := b.startOperator(ctx, op, name, c.Kubeconfig())
	if err != nil {
		return Pass{}, err
	}
	defer o.Kill(syscall.SIGKILL) // the figures are taken; nothing to finish
	pass, err := b.measure(ctx, o, c, own, op == Ours)
	if err == nil && foreign == 0 && rep < b.o.RestartReps {
		pass.Restart, err = b.restart(ctx, o, own)
	}
	if err != nil {
		o.WriteTail(b.log, 60)
		c.DumpLogs(b.log, 20)
		return Pass{}, fmt.Errorf("%s, %s: %w", operatorNames[op], what, err)
	}
	pass.Operator, pass.Rep, pass.Foreign, pass.LoadAtStart = op, rep, foreign, load
	if r := pass.Restart; r != nil {
		b.logf("%s, %s: restarted, quiet after %.1f s: %.1f requests (%.1f writes) and %.2f reconciles per stack, %.1f s CPU",
			operatorNames[op], what, r.QuietSeconds, r.RequestsPerStack, r.WritesPerStack, r.ReconcilesPerStack, r.CPUSeconds)
	}
	b.logf("%s, %s: all Deployed in %.1f s (p50 %.1f s, p90 %.1f s), %.1f requests and %.2f reconciles per stack, %.1f s CPU; "+
		"idle %.2f requests per stack per minute, %.1f%% of a core; RSS %s (peak %s)",
		operatorNames[op], what, pass.AllDeployedSeconds, pass.P50Seconds, pass.P90Seconds, pass.RequestsPerStack, pass.ReconcilesPerStack, pass.CPUSeconds,
		pass.IdleRequestsPerStackPerMinute(), pass.IdleCPUPercent, formatMiB(pass.RSSBytes), formatMiB(pass.PeakRSSBytes))
	if op == Ours {
		b.logf("%s, %s: %d stacks Ready after the idle window", operatorNames[op], what, pass.ReadyStacks)
		for _, r := range sortedReasons(pass.NotReady) {
			b.logf("  not Ready (%d): %s", pass.NotReady[r], r)
		}
	}
	return pass, nil
}

// sortedReasons orders reasons by count, most first.
func sortedReasons(m map[string]int) []string {
	out := slices.Collect(maps.Keys(m))
	slices.SortFunc(out, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	return out
}

// measure takes a pass's figures: the burst of own stacks, settling, then
// the idle window. An operator that says Ready (saysReady) has settled only
// once every stack says Ready: until then it is still reporting the burst.
func (b *bench) measure(ctx context.Context, o operatorUnderTest, c *clusterUnderTest, own int, saysReady bool) (Pass, error) {
	dyn, stacks := c.dyn, c.stacks
	pass, before, deployed, err := b.burst(ctx, o, c, own)
	if err != nil {
		return Pass{}, err
	}
	from := deployed
	if saysReady {
		for {
			n, _, err := readyStacks(ctx, dyn, stacks)
			if err != nil {
				return Pass{}, err
			}
			now := time.Now()
			if n == own {
				pass.AllReadySeconds = now.Sub(before.at).Seconds()
				break
			}
			if now.Sub(deployed.at) >= readyDeadline(own) {
				b.logf("%d of %d stacks Ready %s after all Deployed; settling anyway", n, own, readyDeadline(own))
				break
			}
			select {
			case <-ctx.Done():
				return Pass{}, ctx.Err()
			case <-time.After(time.Second): // a poll of the harness's own reads
			}
		}
		if from, err = o.sample(ctx); err != nil {
			return Pass{}, err
		}
	}
	settled, _, ok, err := b.settle(ctx, o, from, settleDeadline)
	if err != nil {
		return Pass{}, err
	}
	pass.Settled, pass.SettleSeconds = ok, settled.at.Sub(deployed.at).Seconds()
	pass.RequestsPerStackSettled = (settled.Requests - before.Requests) / float64(own)
	pass.CPUSecondsSettled = (settled.CPU - before.CPU).Seconds()
	pass.ReconcilesPerStack = (settled.Reconciles - before.Reconciles) / float64(own)
	if !ok {
		b.logf("not settled %s after all Deployed: counting reconciles until then", settleDeadline)
	}

	b.logf("settled; idle window of %s", b.o.Idle)
	select {
	case <-ctx.Done():
		return Pass{}, ctx.Err()
	case <-time.After(b.o.Idle): // a measurement window, not a synchronisation
	}
	end, err := o.sample(ctx)
	if err != nil {
		return Pass{}, err
	}
	window := end.at.Sub(settled.at)
	pass.IdleSeconds = window.Seconds()
	pass.IdleRequestsPerMinute = (end.Requests - settled.Requests) / window.Minutes()
	pass.IdleCPUPercent = 100 * (end.CPU - settled.CPU).Seconds() / window.Seconds()
	pass.RSSBytes, pass.PeakRSSBytes = end.RSS, end.PeakRSS
	if pass.ReadyStacks, pass.NotReady, err = readyStacks(ctx, dyn, stacks); err != nil {
		return Pass{}, err
	}
	return pass, nil
}

// readyStacks counts the stacks whose Ready condition is True (only this
// operator writes one) and tallies the reasons of the others.
func readyStacks(ctx context.Context, dyn dynamic.Interface, stacks stackKind) (int, map[string]int, error) {
	list, err := dyn.Resource(stacks.GroupVersionResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, nil, fmt.Errorf("listing the stacks: %w", err)
	}
	ready, others := 0, map[string]int{}
	for _, u := range list.Items {
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		reason := "no Ready condition"
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
				if m["status"] == "True" {
					reason = ""
				} else {
					reason = fmt.Sprintf("%v: %v", m["reason"], m["message"])
				}
			}
		}
		if reason == "" {
			ready++
		} else {
			others[reason]++
		}
	}
	return ready, others, nil
}

// burst creates the own stacks at once and waits until each is Deployed;
// it returns the burst's figures and the operator's readings before the
// first create and once all were Deployed.
func (b *bench) burst(ctx context.Context, o operatorUnderTest, c *clusterUnderTest, own int) (pass Pass, before, deployed sample, err error) {
	names := b.stackRefs("stack", own)
	seen, err := watchDeployed(ctx, c.dyn, c.stacks.GroupVersionResource)
	if err != nil {
		return
	}
	// The operator has started and synced; the burst starts from the
	// same settled, warmed-up cluster as the write floor.
	settle, err := b.readyToTime(ctx, c)
	if err != nil {
		return
	}
	if before, err = o.sample(ctx); err != nil {
		return
	}
	window := startCPUWindow(c.Cluster)
	profiled := b.profile(ctx, o.Name(), &o, c)
	defer func() {
		if perr := profiled(); err == nil {
			err = perr
		}
	}()
	created, err := createStacks(ctx, c.dyn, c.stacks, names, b.own)
	if err != nil {
		return
	}
	first := slices.MinFunc(slices.Collect(maps.Values(created)), time.Time.Compare)
	pass = Pass{Own: own, CreateSeconds: time.Since(first).Seconds(), ClusterSettleSeconds: settle}
	b.logf("%d stacks created in %.1f s", own, pass.CreateSeconds)

	lastLog := time.Now()
	err = b.waitFor(ctx, o, "every stack Deployed", b.o.DeployTimeout, func() (bool, string) {
		n := seen.count(names)
		if time.Since(lastLog) >= 15*time.Second {
			b.logf("%d of %d Deployed after %s", n, own, time.Since(first).Round(time.Second))
			lastLog = time.Now()
		}
		return n == own, fmt.Sprintf("%d of %d Deployed", n, own)
	})
	if err != nil {
		return
	}
	if deployed, err = o.sample(ctx); err != nil {
		return
	}
	pass.ClusterCPUByProcess, pass.ClusterCPUSeconds = window.end(c.Cluster)
	b.logf("the cluster used %.1f s of CPU until all Deployed (%s)", pass.ClusterCPUSeconds, formatByProcess(pass.ClusterCPUByProcess))
	var latencies []time.Duration
	last := first
	for _, n := range names {
		at := seen.at(n)
		latencies = append(latencies, at.Sub(created[n]))
		if at.After(last) {
			last = at
		}
	}
	pass.AllDeployedSeconds = last.Sub(first).Seconds()
	pass.P50Seconds, pass.P90Seconds = percentile(latencies, 50).Seconds(), percentile(latencies, 90).Seconds()
	pass.RequestsPerStack = (deployed.Requests - before.Requests) / float64(own)
	pass.WritesPerStack = (deployed.Writes - before.Writes) / float64(own)
	pass.CPUSeconds = (deployed.CPU - before.CPU).Seconds()
	return pass, before, deployed, nil
}

// settle waits until the operator has gone Quiet without finishing a
// reconcile, with no reconcile in flight and without an API write (the
// status writes that follow a release, such as this operator's Ready, are
// the burst's, not the idle window's), or until deadline after from; ok
// says which, and active is when the operator was last seen at work (from
// if never).
func (b *bench) settle(ctx context.Context, o operatorUnderTest, from sample, deadline time.Duration) (last sample, active time.Time, ok bool, err error) {
	last, active = from, from.at
	for {
		select {
		case <-ctx.Done():
			return last, active, false, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		s, err := o.sample(ctx)
		if err != nil {
			return last, active, false, err
		}
		if s.Reconciles != last.Reconciles || s.ActiveWorkers > 0 || s.Writes != last.Writes {
			active = s.at
		}
		last = s
		switch {
		case s.at.Sub(active) >= b.o.Quiet:
			return s, active, true, nil
		case s.at.Sub(from.at) >= deadline:
			return s, active, false, nil
		}
	}
}

// stackKind is the InferenceStack resource and kind, from the CRD.
type stackKind struct {
	schema.GroupVersionResource
	Kind string
}

func stackType() (stackKind, error) {
	crd, err := crds.InferenceStack()
	if err != nil {
		return stackKind{}, err
	}
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: crd.Spec.Versions[0].Name, Resource: crd.Spec.Names.Plural}
	return stackKind{gvr, crd.Spec.Names.Kind}, nil
}

// createStacks creates the named stacks labelled for major, floorWorkers
// at a time, and returns when each create was sent.
func createStacks(ctx context.Context, dyn dynamic.Interface, stacks stackKind, names []types.NamespacedName, major string) (map[types.NamespacedName]time.Time, error) {
	var mu sync.Mutex
	sent := map[types.NamespacedName]time.Time{}
	err := inParallel(ctx, len(names), func(ctx context.Context, i int) error {
		mu.Lock()
		sent[names[i]] = time.Now()
		mu.Unlock()
		return createStack(ctx, dyn, stacks, names[i], major)
	})
	return sent, err
}

// createStack creates one stack labelled for major, with the workload's
// spec.
func createStack(ctx context.Context, dyn dynamic.Interface, stacks stackKind, ref types.NamespacedName, major string, dryRun ...string) error {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": stackSpec()}}
	u.SetAPIVersion(stacks.GroupVersion().String())
	u.SetKind(stacks.Kind)
	u.SetName(ref.Name)
	u.SetNamespace(ref.Namespace)
	u.SetLabels(map[string]string{majorLabel: major})
	if _, err := dyn.Resource(stacks.GroupVersionResource).Namespace(ref.Namespace).Create(ctx, u, metav1.CreateOptions{DryRun: dryRun}); err != nil {
		return fmt.Errorf("creating stack %s: %w", ref, err)
	}
	return nil
}

// deployedWatch records when the harness first saw each stack
// Deployed=True, through an informer (a watch that re-lists if it breaks).
type deployedWatch struct {
	mu    sync.Mutex
	first map[types.NamespacedName]time.Time
}

func watchDeployed(ctx context.Context, dyn dynamic.Interface, stacks schema.GroupVersionResource) (*deployedWatch, error) {
	w := &deployedWatch{first: map[types.NamespacedName]time.Time{}}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	inf := factory.ForResource(stacks).Informer()
	record := func(obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || !deployed(u) {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		ref := types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}
		if _, ok := w.first[ref]; !ok {
			w.first[ref] = now
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
	}); err != nil {
		return nil, fmt.Errorf("watching stacks: %w", err)
	}
	factory.Start(ctx.Done())
	synced := factory.WaitForCacheSync(ctx.Done())
	if !synced[stacks] {
		return nil, errors.New("watching stacks: the informer never synced")
	}
	return w, nil
}

func (w *deployedWatch) count(names []types.NamespacedName) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, name := range names {
		if _, ok := w.first[name]; ok {
			n++
		}
	}
	return n
}

func (w *deployedWatch) at(name types.NamespacedName) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first[name]
}

// deployed reports whether the stack's Deployed condition is True.
func deployed(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Deployed" {
			return m["status"] == "True"
		}
	}
	return false
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
