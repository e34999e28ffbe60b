package operatorbench

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// An excerpt of a controller-runtime metrics endpoint, with the counters
// of two controllers and a label value that holds a brace and a quote.
const exposition = `# HELP rest_client_requests_total Number of HTTP requests, partitioned by status code, method, and host.
# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="127.0.0.1:33445",method="GET"} 120
rest_client_requests_total{code="201",host="127.0.0.1:33445",method="POST"} 35
rest_client_requests_total{code="409",host="odd{\"host}",method="PUT"} 2
# HELP controller_runtime_reconcile_total Total number of reconciliations per controller
# TYPE controller_runtime_reconcile_total counter
controller_runtime_reconcile_total{controller="inferencestack-controller",result="success"} 7
controller_runtime_reconcile_total{controller="inferencestack-controller",result="requeue_after"} 3
controller_runtime_reconcile_total{controller="inferencestack-handoff",result="success"} 50
# HELP controller_runtime_active_workers Number of currently used workers per controller
# TYPE controller_runtime_active_workers gauge
controller_runtime_active_workers{controller="inferencestack-controller"} 2
controller_runtime_active_workers{controller="inferencestack-handoff"} 1
`

func TestParseCounters(t *testing.T) {
	got, err := parseCounters(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	if want := (counters{Requests: 157, Writes: 37, Reconciles: 10, ActiveWorkers: 2}); got != want {
		t.Errorf("counters %+v, want %+v", got, want)
	}
	// Reads this operator's cache answered are counted by client-go but
	// never reached the API server.
	got, err = parseCounters(strings.NewReader("# TYPE rest_client_requests_total counter\nrest_client_requests_total{code=\"404\",method=\"GET\"} 7\nrest_client_requests_total{code=\"201\",method=\"POST\"} 7\n" +
		"# TYPE inference_stack_cache_answered_reads_total counter\ninference_stack_cache_answered_reads_total 7\n"))
	if err != nil || got != (counters{Requests: 7, Writes: 7}) {
		t.Errorf("counters %+v, %v", got, err)
	}
	// Before the controller starts, there are no reconcile metrics yet.
	got, err = parseCounters(strings.NewReader("# TYPE rest_client_requests_total counter\nrest_client_requests_total{code=\"200\"} 4\n"))
	if err != nil || got != (counters{Requests: 4}) {
		t.Errorf("counters %+v, %v", got, err)
	}
	if _, err := parseCounters(strings.NewReader("# TYPE go_goroutines gauge\ngo_goroutines 12\n")); err == nil {
		t.Error("an endpoint without client metrics gave counters")
	}
	if _, err := parseCounters(strings.NewReader("rest_client_requests_total{code= 4\n")); err == nil {
		t.Error("malformed metrics parsed")
	}
}

func TestMachineParsing(t *testing.T) {
	if got := memTotal("MemTotal:       24684096 kB\nMemFree:        12749000 kB\n"); got != 24684096*1024 {
		t.Errorf("memTotal = %d", got)
	}
	if got := cpuModel("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n"); got != "Intel(R) Xeon(R) Processor" {
		t.Errorf("cpuModel = %q", got)
	}
	if memTotal("") != 0 || cpuModel("") != "" {
		t.Error("values from nothing")
	}
}

// TestStockInputs checks what the stock operator is given: the chart as
// the operator embeds it, and a watches.yaml for the CRD's kind that
// selects this source's major.
func TestStockInputs(t *testing.T) {
	dir := t.TempDir()
	chart := filepath.Join(dir, "inference-stack")
	if err := writeChart(chart); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"Chart.yaml", "values.yaml", "values.schema.json", "templates/_helpers.tpl", "templates/gateway-deployment.yaml"} {
		if _, err := os.Stat(filepath.Join(chart, f)); err != nil {
			t.Errorf("chart file: %v", err)
		}
	}
	path := filepath.Join(dir, "watches.yaml")
	if err := writeStockWatches(path, chart, "v0"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ws []struct {
		Group, Version, Kind, Chart string
		Selector                    struct {
			MatchLabels map[string]string `json:"matchLabels"`
		}
	}
	if err := yaml.UnmarshalStrict(data, &ws); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if len(ws) != 1 || ws[0].Group != "models.takeoff.co" || ws[0].Version != "v1alpha1" || ws[0].Kind != "InferenceStack" ||
		ws[0].Chart != chart || ws[0].Selector.MatchLabels["operatorVersion"] != "v0" {
		t.Errorf("watches.yaml:\n%s", data)
	}
}

// TestRenderRelease checks the write floor's objects: a stack's release
// of the embedded chart, in the stack's namespace, named after it.
func TestRenderRelease(t *testing.T) {
	b := &bench{o: Options{StacksPerNamespace: 1}}
	refs := b.stackRefs("stack", 2)
	objs, err := renderReleases(refs, stackSpec())
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		if !slices.ContainsFunc(refs, func(r types.NamespacedName) bool {
			return o.GetNamespace() == r.Namespace && strings.HasPrefix(o.GetName(), r.Name)
		}) {
			t.Errorf("%s %s/%s is not in its stack's namespace", o.GetKind(), o.GetNamespace(), o.GetName())
		}
	}
	// A gateway and one reader: a Deployment, ConfigMap and Service each,
	// and the ServiceAccount.
	want := map[string]int{"Deployment": 4, "ConfigMap": 4, "Service": 4, "ServiceAccount": 2}
	if len(kinds) != len(want) {
		t.Errorf("kinds %v, want %v", kinds, want)
	}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("%d %s, want %d (all: %v)", kinds[k], k, n, kinds)
		}
	}
}

// TestStackRefs: every stack in one namespace by default; spread over
// namespaces of StacksPerNamespace stacks each otherwise.
func TestStackRefs(t *testing.T) {
	one := (&bench{}).stackRefs("stack", 3)
	if want := []types.NamespacedName{{Namespace: "default", Name: "stack-000"}, {Namespace: "default", Name: "stack-001"}, {Namespace: "default", Name: "stack-002"}}; !slices.Equal(one, want) {
		t.Errorf("one namespace: %v, want %v", one, want)
	}
	spread := (&bench{o: Options{StacksPerNamespace: 10}}).stackRefs("stack", 25)
	counts := map[string]int{}
	for _, r := range spread {
		counts[r.Namespace]++
	}
	if want := map[string]int{"stack-ns-000": 10, "stack-ns-001": 10, "stack-ns-002": 5}; !maps.Equal(counts, want) {
		t.Errorf("spread: %v, want %v", counts, want)
	}
	if spread[24] != (types.NamespacedName{Namespace: "stack-ns-002", Name: "stack-024"}) {
		t.Errorf("the last stack is %v", spread[24])
	}
}

func TestInParallel(t *testing.T) {
	var calls atomic.Int64
	if err := inParallel(t.Context(), 100, func(context.Context, int) error { calls.Add(1); return nil }); err != nil || calls.Load() != 100 {
		t.Errorf("%d calls, %v", calls.Load(), err)
	}
	// After the first error, no call starts once the context is
	// cancelled, but for those a worker had already taken (at most one
	// each). How many calls come before the cancel depends on the
	// scheduler: the worker with the error may be descheduled while the
	// others run every other call.
	boom := errors.New("boom")
	var late atomic.Int64
	err := inParallel(t.Context(), 10000, func(ctx context.Context, i int) error {
		if ctx.Err() != nil {
			late.Add(1)
		}
		if i == 5 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || late.Load() > floorWorkers {
		t.Errorf("%d calls started after the cancel, %v: want the first error and at most %d", late.Load(), err, floorWorkers)
	}
}

func TestOptionsDefaults(t *testing.T) {
	o := Options{Stacks: 5, Own: -1, Idle: time.Second}.withDefaults()
	d := DefaultOptions()
	if o.Stacks != 5 || o.Own != -1 || o.Idle != time.Second || o.Reps != d.Reps || o.Quiet != d.Quiet || o.DeployTimeout != d.DeployTimeout || o.Log == nil {
		t.Errorf("options %+v", o)
	}
}
