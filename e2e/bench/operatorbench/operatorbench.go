// Package operatorbench measures this project's operator side by side with the
// stock helm-operator it replaces (helm-operator-plugins' `helm-operator
// run`, default flags, over the same chart and CRD), and against the
// client-go write floor for the same objects, each on a fresh local
// cluster (e2e/harness/localcluster), the operators running as processes
// (e2e/harness/operatorproc):
//
//   - burst: N stacks created at once → all Deployed=True (wall time, each
//     stack's create → Deployed p50/p90, API requests per stack from the
//     operators' own client metrics, operator CPU from /proc, reconciles per
//     stack until the operator settles);
//   - idle: a window after settling (API requests per stack per minute, CPU
//     as % of a core), then memory (VmRSS, and the peak VmHWM);
//   - restart: after the idle window, SIGTERM and a start of the same
//     operator on the same cluster, until it is quiet (time, API requests
//     and reconciles per stack, CPU);
//   - memory: the same with M own stacks and M' stacks labelled for another
//     major, whose operator is not running.
//
// The floor and every burst start from the same state: a fresh cluster
// with the CRD installed, settled (its processes idle) and warmed up (one
// dry-run create of each kind). With several sizes the burst runs at each
// and the report adds how each figure grows with the size.
//
// It reports numbers and never asserts them: Run returns a Report, whose
// table gives the ratios (ours / stock, ours / floor) and marks the
// product's goals met or not.
package operatorbench

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	inferencestackchart "github.com/titanml/inference-stack-operator/charts/inference-stack"
	"github.com/titanml/inference-stack-operator/crds"
	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/operatorproc"
)

// Options configure Run; zero fields take the defaults of DefaultOptions.
type Options struct {
	// Stacks is the burst's size; Reps how often the burst runs for each
	// operator and the floor.
	Stacks, Reps int
	// FirstReps, if positive, is how often the burst runs at the first
	// size (the main table's) instead of Reps: short passes move most with
	// the machine's speed, and a curve can repeat them and not its long
	// ones.
	FirstReps int
	// Sizes, if set, are several burst sizes: the burst (with the floor
	// and the restart) runs at each, and the report adds how each figure
	// grows with the size. The main table is of the first size.
	Sizes []int
	// StockMaxStacks, if positive, runs the stock operator's burst only at
	// sizes up to it (it takes minutes per thousand stacks).
	StockMaxStacks int
	// StacksPerNamespace, if positive, spreads the stacks (and the write
	// floor's objects) over namespaces of that many stacks each, as a
	// fleet's tenants are; 0 puts every stack in one namespace. The
	// controller-manager's endpoint controllers match each Service against
	// every pod and EndpointSlice of its namespace, so one namespace of N
	// stacks costs the cluster O(N²), whoever creates them.
	StacksPerNamespace int
	// FloorAfter runs the write floor of each repetition a second time,
	// after the operators' bursts, so the floor they are compared with is
	// measured on both sides of them: the machine is shared and its speed
	// drifts (the same 7,000 creates took 42 and 58 s three hours apart),
	// while the ratio assumes one machine. A size's floor is the median of
	// its runs.
	FloorAfter bool
	// RestartReps is in how many of the burst's repetitions each operator
	// is restarted after its idle window.
	RestartReps int
	// Own and Foreign are the memory workload's stacks of the operators'
	// major and of another major; MemoryReps how often it runs for each
	// operator (Own < 0 skips it).
	Own, Foreign, MemoryReps int
	// Idle is the window after settling in which nothing changes.
	Idle time.Duration
	// Quiet is how long an operator must go without a reconcile to count
	// as settled after the burst.
	Quiet time.Duration
	// DeployTimeout bounds the wait for every stack of a burst to be
	// Deployed.
	DeployTimeout time.Duration
	// Profile, if positive, is how much of each burst and write floor is
	// profiled: the first Profile of this operator's CPU and of the API
	// server's, written to ProfileDir as <pass>.cpu.pprof and
	// <pass>.apiserver.cpu.pprof (for `go tool pprof`).
	Profile    time.Duration
	ProfileDir string
	// Log receives progress (default: discarded).
	Log io.Writer
}

// DefaultOptions are the benchmark of record: 200 stacks three times, and
// 500 own + 500 foreign stacks once, each with a 3-minute idle window.
func DefaultOptions() Options {
	return Options{Stacks: 200, Reps: 3, RestartReps: 1, Own: 500, Foreign: 500, MemoryReps: 1,
		Idle: 3 * time.Minute, Quiet: 5 * time.Second, DeployTimeout: 20 * time.Minute}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	orDefault(&o.Stacks, d.Stacks)
	orDefault(&o.Reps, d.Reps)
	orDefault(&o.RestartReps, d.RestartReps)
	if len(o.Sizes) == 0 {
		o.Sizes = []int{o.Stacks}
	}
	o.Stacks = o.Sizes[0]
	orDefault(&o.Own, d.Own)
	orDefault(&o.Foreign, d.Foreign)
	orDefault(&o.MemoryReps, d.MemoryReps)
	orDefault(&o.Idle, d.Idle)
	orDefault(&o.Quiet, d.Quiet)
	orDefault(&o.DeployTimeout, d.DeployTimeout)
	orDefault(&o.Log, io.Discard)
	return o
}

// repsAt is how often the burst runs at size.
func (o Options) repsAt(size int) int {
	if o.FirstReps > 0 && size == o.Sizes[0] {
		return o.FirstReps
	}
	return o.Reps
}

// orDefault sets *v to d if it is the zero value.
func orDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// namespace holds every stack and object of the workloads, unless
// Options.StacksPerNamespace spreads them.
const namespace = "default"

// settleDeadline bounds settling after all stacks are Deployed: the stock
// operator requeues every stack a minute after its last reconcile, so it
// may never go quiet.
const settleDeadline = 30 * time.Second

// readyDeadline bounds the wait for every one of stacks stacks to say
// Ready after all are Deployed. Readiness follows the Deployments, whose
// pods the local cluster's controller-manager creates at its own client
// rate (20 requests per second, about 13 of them per stack for the
// ReplicaSets, pods, EndpointSlices and their status): 200 stacks take it
// a minute or two, 2,000 about 20 (1,250 were Ready 10 minutes after a
// 2,000-stack burst). The restart is measured after this wait, over
// settled stacks, so that it measures the restart rather than pods still
// starting.
func readyDeadline(stacks int) time.Duration {
	return max(3*time.Minute, time.Duration(stacks)*650*time.Millisecond)
}

// bench is one run's prepared state.
type bench struct {
	o   Options
	log *stampWriter
	dir string // builds, the stock operator's chart and watches, logs
	// stock and ours are the operator binaries; watches the stock
	// operator's watches.yaml.
	stock, ours, watches string
	own, foreign         string // majors
}

// Run runs the benchmark and returns its report. It builds what it needs
// first: the local cluster's binaries and the stock operator (cached by
// version, minutes the first time on a machine) and this operator.
func Run(ctx context.Context, o Options) (*Report, error) {
	o = o.withDefaults()
	begin := time.Now()
	commit, err := SourceCommit(ctx)
	if err != nil {
		return nil, err
	}
	r := &Report{Date: begin, Machine: readMachine(), Commit: commit, Config: Config{
		Stacks: o.Stacks, Sizes: o.Sizes, StacksPerNamespace: o.StacksPerNamespace, FloorAfter: o.FloorAfter, Reps: o.Reps, FirstReps: o.repsAt(o.Sizes[0]), RestartReps: min(o.RestartReps, max(o.Reps, o.repsAt(o.Sizes[0]))), Own: max(o.Own, 0), Foreign: o.Foreign, MemoryReps: o.MemoryReps,
		IdleSeconds: o.Idle.Seconds(), QuietSeconds: o.Quiet.Seconds(), StockVersion: operatorproc.StockVersion,
	}}
	if o.Own < 0 {
		r.Config.MemoryReps = 0
	}
	b := &bench{o: o, log: &stampWriter{w: o.Log}}
	b.logf("benchmark: %s stacks × %d repetitions (%d at the first size), then %d own + %d foreign stacks × %d, idle windows of %s; commit %s, %d CPUs, load average %s",
		formatSizes(o.Sizes), o.Reps, r.Config.FirstReps, r.Config.Own, o.Foreign, r.Config.MemoryReps, o.Idle, r.Commit, r.Machine.CPUs, r.Machine.LoadBefore)
	if b.dir, err = os.MkdirTemp("", "operator-bench-"); err != nil {
		return nil, fmt.Errorf("creating the work directory: %w", err)
	}
	failed := true
	defer func() {
		if failed {
			b.logf("operator logs and builds kept in %s", b.dir)
			return
		}
		os.RemoveAll(b.dir)
	}()
	if err := b.prepare(ctx); err != nil {
		return nil, err
	}

	for _, size := range o.Sizes {
		floorObjects, err := renderReleases(b.stackRefs("stack", size), stackSpec())
		if err != nil {
			return nil, err
		}
		for rep := range o.repsAt(size) {
			f, err := b.floor(ctx, rep, size, floorObjects, false)
			if err != nil {
				return nil, err
			}
			r.Floor = append(r.Floor, f)
			for _, op := range alternate(rep) {
				if op == Stock && o.StockMaxStacks > 0 && size > o.StockMaxStacks {
					continue
				}
				pass, err := b.stacks(ctx, op, rep, size, 0)
				if err != nil {
					return nil, err
				}
				r.Burst = append(r.Burst, pass)
			}
			if o.FloorAfter {
				f, err := b.floor(ctx, rep, size, floorObjects, true)
				if err != nil {
					return nil, err
				}
				r.Floor = append(r.Floor, f)
			}
		}
	}
	for rep := range r.Config.MemoryReps {
		for _, op := range alternate(rep) {
			pass, err := b.stacks(ctx, op, rep, o.Own, o.Foreign)
			if err != nil {
				return nil, err
			}
			r.Memory = append(r.Memory, pass)
		}
	}
	r.Machine.LoadAfter = loadAverage()
	r.Seconds = time.Since(begin).Seconds()
	b.logf("benchmark done in %s", time.Since(begin).Round(time.Second))
	failed = false
	return r, nil
}

// formatSizes lists sizes as "200" or "200, 1000, 2000".
func formatSizes(sizes []int) string {
	parts := make([]string, len(sizes))
	for i, n := range sizes {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ", ")
}

// alternate is the order of the operators in repetition rep: which goes
// first alternates, so drift in the machine's load over the run (other
// work, thermal) does not favour one side.
func alternate(rep int) []Operator {
	if rep%2 == 0 {
		return []Operator{Stock, Ours}
	}
	return []Operator{Ours, Stock}
}

// prepare builds the binaries and writes the stock operator's chart and
// watches.
func (b *bench) prepare(ctx context.Context) error {
	b.logf("building: the local cluster, the stock helm-operator %s (both cached after the first run) and this operator", operatorproc.StockVersion)
	bins, err := EnsureBinaries(ctx, b.dir, b.log)
	if err != nil {
		return err
	}
	b.stock, b.ours, b.own = bins.Stock, bins.Ours, bins.Major
	// The next major: the stacks a v(N+1) operator would reconcile.
	n, err := strconv.Atoi(strings.TrimPrefix(b.own, "v"))
	if err != nil {
		return fmt.Errorf("the source major %q: %w", b.own, err)
	}
	b.foreign = "v" + strconv.Itoa(n+1)
	chart := filepath.Join(b.dir, "inference-stack")
	if err := writeChart(chart); err != nil {
		return err
	}
	b.watches = filepath.Join(b.dir, "watches.yaml")
	return writeStockWatches(b.watches, chart, b.own)
}

// Binaries are the programs a run starts besides the local cluster's: the
// stock helm-operator, and this operator of the source tree's major.
type Binaries struct {
	Stock, Ours string
	// Major is the source tree's major, the one Ours reconciles.
	Major string
}

// EnsureBinaries returns a run's binaries after making sure of the local
// cluster's: the cluster's and the stock operator's are built from their
// wrapper modules and cached (minutes the first time on a machine), this
// operator is built into dir. Under Bazel each is a runfile the test's
// BUILD file passes (see e2e/BUILD.bazel) and nothing is built.
func EnsureBinaries(ctx context.Context, dir string, log io.Writer) (Binaries, error) {
	var b Binaries
	if _, err := localcluster.EnsureBinaries(ctx, log); err != nil {
		return b, err
	}
	var err error
	if b.Stock, err = operatorproc.EnsureStock(ctx, log); err != nil {
		return b, err
	}
	if b.Major, err = operatorproc.SourceMajor(); err != nil {
		return b, err
	}
	builds := &operatorproc.Builds{Dir: dir}
	if b.Ours, err = builds.Binary(ctx, b.Major); err != nil {
		return b, err
	}
	return b, nil
}

// writeChart writes the chart as the operator embeds it (the files of
// charts/inference-stack that make the chart, without the Go and Bazel
// files beside them), so the stock operator loads the very same chart
// from disk.
func writeChart(dir string) error {
	return fs.WalkDir(inferencestackchart.Files, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(inferencestackchart.Files, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("writing the chart: %w", err)
		}
		return os.WriteFile(dst, data, 0o644)
	})
}

// majorLabel is the label that assigns a stack to an operator major.
const majorLabel = "operatorVersion"

// writeStockWatches writes the stock operator's watches.yaml: the CRD's
// kind, the chart at chartDir, and the same major selector as this
// operator's. Reconcile period and concurrency are left to the stock
// operator's defaults (its flags; `helm-operator run` ignores them in
// watches.yaml).
func writeStockWatches(path, chartDir, major string) error {
	crd, err := crds.InferenceStack()
	if err != nil {
		return err
	}
	w := []map[string]any{{
		"group":    crd.Spec.Group,
		"version":  crd.Spec.Versions[0].Name,
		"kind":     crd.Spec.Names.Kind,
		"chart":    chartDir,
		"selector": map[string]any{"matchLabels": map[string]string{majorLabel: major}},
	}}
	data, err := yaml.Marshal(w)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("writing the stock watches: %w", err)
	}
	return nil
}

// stackSpec is every stack's spec: one application with the chart's
// defaults: a gateway and one reader, seven objects per release (a
// Deployment, ConfigMap and Service each, and their ServiceAccount).
func stackSpec() map[string]any {
	return map[string]any{"applications": map[string]any{"a": map[string]any{}}}
}

// stackRefs names n stacks: <prefix>-000 and on, in namespace, or in
// namespaces <prefix>-ns-000 and on of Options.StacksPerNamespace stacks
// each.
func (b *bench) stackRefs(prefix string, n int) []types.NamespacedName {
	out := make([]types.NamespacedName, n)
	for i := range out {
		out[i] = types.NamespacedName{Namespace: namespace, Name: fmt.Sprintf("%s-%03d", prefix, i)}
		if per := b.o.StacksPerNamespace; per > 0 {
			out[i].Namespace = fmt.Sprintf("%s-ns-%03d", prefix, i/per)
		}
	}
	return out
}

// createNamespaces creates the namespaces that do not exist yet, before
// anything is timed.
func (c *clusterUnderTest) createNamespaces(ctx context.Context, names []string) error {
	seen := map[string]bool{namespace: true}
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		ns := &unstructured.Unstructured{}
		ns.SetAPIVersion("v1")
		ns.SetKind("Namespace")
		ns.SetName(name)
		if _, err := c.dyn.Resource(corev1.SchemeGroupVersion.WithResource("namespaces")).Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", name, err)
		}
	}
	return nil
}

func namespacesOf(refs []types.NamespacedName) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.Namespace
	}
	return out
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, format+"\n", args...)
}

// stampWriter prefixes every line with the time of day, for a progress log
// of a run that takes most of an hour.
type stampWriter struct {
	mu      sync.Mutex
	w       io.Writer
	midLine bool
}

func (s *stampWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []byte
	for _, line := range strings.SplitAfter(string(p), "\n") {
		if line == "" {
			continue
		}
		if !s.midLine {
			out = append(out, time.Now().Format("15:04:05 ")...)
		}
		out = append(out, line...)
		s.midLine = !strings.HasSuffix(line, "\n")
	}
	if _, err := s.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
