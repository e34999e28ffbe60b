package operatorbench

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/operatorproc"
)

// A fresh cluster is busy for seconds after it answers: the
// controller-manager's first syncs, the API server's bootstrap and the
// CRD's OpenAPI publication. Every timed phase (the write floor's creates,
// an operator's burst) starts only once the cluster's own processes have
// used less than clusterIdleCPU for clusterQuiet, so that all of them start
// from the same settled state; clusterSettleDeadline bounds the wait.
const (
	clusterIdleCPU        = 0.1 // of a core
	clusterQuiet          = 2 * time.Second
	clusterSettleDeadline = time.Minute
)

// settleCluster waits until the cluster's processes are quiet and returns
// how long that took; ok is false if the deadline came first.
func settleCluster(ctx context.Context, c *localcluster.Cluster) (took time.Duration, ok bool, err error) {
	const every = 500 * time.Millisecond
	begin := time.Now()
	quietSince, last := begin, clusterCPU(c)
	for {
		select {
		case <-ctx.Done():
			return time.Since(begin), false, ctx.Err()
		case <-time.After(every):
		}
		now, cpu := time.Now(), clusterCPU(c)
		if cpu-last > time.Duration(clusterIdleCPU*float64(every)) {
			quietSince = now
		}
		last = cpu
		switch {
		case now.Sub(quietSince) >= clusterQuiet:
			return now.Sub(begin), true, nil
		case now.Sub(begin) >= clusterSettleDeadline:
			return now.Sub(begin), false, nil
		}
	}
}

// clusterCPU is the CPU time (user + system) the cluster's processes have
// used so far.
func clusterCPU(c *localcluster.Cluster) time.Duration {
	var total time.Duration
	for _, cpu := range processCPU(c) {
		total += cpu
	}
	return total
}

// processCPU is the CPU time each of the cluster's processes (by its
// component name) has used so far.
func processCPU(c *localcluster.Cluster) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, p := range c.Processes() {
		if u, err := operatorproc.ReadUsage(p.PID); err == nil {
			out[p.Name] += u.CPU
		}
	}
	return out
}

// cpuWindow is the cluster's CPU over a timed phase, by process: the API
// server serving the writes, etcd storing them, and the controller-manager,
// scheduler and KWOK starting the Deployments' pods.
type cpuWindow map[string]time.Duration

func startCPUWindow(c *localcluster.Cluster) cpuWindow { return processCPU(c) }

// end returns the CPU each process used since the window started, in
// seconds, and their sum.
func (w cpuWindow) end(c *localcluster.Cluster) (byProcess map[string]float64, total float64) {
	byProcess = map[string]float64{}
	for name, cpu := range processCPU(c) {
		d := (cpu - w[name]).Seconds()
		byProcess[name] = d
		total += d
	}
	return byProcess, total
}

// formatByProcess lists the processes' CPU, largest first.
func formatByProcess(byProcess map[string]float64) string {
	names := slices.Collect(maps.Keys(byProcess))
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(byProcess[b], byProcess[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.1f s", n, byProcess[n])
	}
	return strings.Join(parts, ", ")
}

// warmUp sends, as dry runs, one create of every kind a timed phase will
// create: a stack, and the objects of one release. Whatever the API
// server sets up on the first write of a kind (admission, storage,
// conversion) is then not part of the timed phase, and a dry run leaves
// nothing behind for the controller-manager to act on.
func warmUp(ctx context.Context, dyn dynamic.Interface, objects *creator, stacks stackKind, major string) error {
	if err := createStack(ctx, dyn, stacks, types.NamespacedName{Namespace: namespace, Name: "warm-up"}, major, metav1.DryRunAll); err != nil {
		return err
	}
	release, err := renderRelease("warm-up", namespace, stackSpec())
	if err != nil {
		return err
	}
	return objects.create(ctx, release, metav1.DryRunAll)
}

// readyToTime settles the cluster and warms it up before a timed phase,
// logging how long the cluster took to settle, which it returns.
func (b *bench) readyToTime(ctx context.Context, c *clusterUnderTest) (float64, error) {
	took, ok, err := settleCluster(ctx, c.Cluster)
	if err != nil {
		return 0, err
	}
	if ok {
		b.logf("cluster settled in %.1f s", took.Seconds())
	} else {
		b.logf("cluster not settled after %s; starting anyway", clusterSettleDeadline)
	}
	if err := warmUp(ctx, c.dyn, c.objects, c.stacks, b.own); err != nil {
		return 0, fmt.Errorf("warming up: %w", err)
	}
	return took.Seconds(), nil
}
