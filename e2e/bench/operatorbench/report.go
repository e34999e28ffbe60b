package operatorbench

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
)

// Operator names an operator under test.
type Operator string

const (
	// Stock is helm-operator-plugins' `helm-operator run` with default
	// flags, over the same chart and CRD.
	Stock Operator = "stock"
	// Ours is this repository's operator with default flags.
	Ours Operator = "ours"
)

// Pass is one operator's run through a stacks workload on a fresh cluster:
// a burst of own stacks (with foreign stacks already in the cluster, for
// the memory workload), then settling, then an idle window.
type Pass struct {
	Operator Operator `json:"operator"`
	Rep      int      `json:"rep"`
	Own      int      `json:"ownStacks"`
	Foreign  int      `json:"foreignStacks"`
	// CreateSeconds is how long the harness took to create the own stacks.
	CreateSeconds float64 `json:"createSeconds"`
	// AllDeployedSeconds runs from the first create to the last stack
	// seen Deployed=True; P50 and P90 are of each stack's create →
	// Deployed=True.
	AllDeployedSeconds float64 `json:"allDeployedSeconds"`
	// AllReadySeconds runs from the first create to every stack saying
	// Ready=True (this operator only; zero if that did not happen).
	AllReadySeconds float64 `json:"allReadySeconds,omitempty"`
	P50Seconds      float64 `json:"p50Seconds"`
	P90Seconds      float64 `json:"p90Seconds"`
	// RequestsPerStack (WritesPerStack of them writes) and CPUSeconds run
	// from the first create to all Deployed; the Settled variants to the
	// end of settling.
	RequestsPerStack        float64 `json:"requestsPerStack"`
	WritesPerStack          float64 `json:"writesPerStack"`
	RequestsPerStackSettled float64 `json:"requestsPerStackSettled"`
	CPUSeconds              float64 `json:"cpuSeconds"`
	CPUSecondsSettled       float64 `json:"cpuSecondsSettled"`
	// ClusterCPUSeconds is the CPU the cluster's processes (etcd, API
	// server, controller-manager, scheduler, KWOK) used from the first
	// create to all Deployed: the API server serving the operator, and the
	// controller-manager's follow-up of what it created, on the same cores.
	ClusterCPUSeconds float64 `json:"clusterCpuSeconds"`
	// ClusterCPUByProcess splits ClusterCPUSeconds by the cluster's
	// processes (kube-apiserver, etcd, kube-controller-manager,
	// kube-scheduler, kwok-controller).
	ClusterCPUByProcess map[string]float64 `json:"clusterCpuByProcess,omitempty"`
	// ReconcilesPerStack runs from the first create to the end of
	// settling: the burst's own reconciles and every follow-up they cause.
	ReconcilesPerStack float64 `json:"reconcilesPerStack"`
	// Settled says whether the operator went quiet (no reconcile for the
	// quiet period) before the settle deadline; SettleSeconds is how long
	// after all Deployed settling ended.
	Settled       bool    `json:"settled"`
	SettleSeconds float64 `json:"settleSeconds"`
	// The idle window after settling: its length, the operator's API
	// requests per minute (all stacks, own and foreign) and its CPU.
	IdleSeconds           float64 `json:"idleSeconds"`
	IdleRequestsPerMinute float64 `json:"idleRequestsPerMinute"`
	IdleCPUPercent        float64 `json:"idleCpuPercentOfACore"`
	// LoadAtStart is /proc/loadavg's 1, 5 and 15 minute averages when the
	// pass began.
	LoadAtStart string `json:"loadAtStart"`
	// RSSBytes is the resident set at the end of the idle window;
	// PeakRSSBytes the most the process ever held (VmHWM).
	RSSBytes     int64 `json:"rssBytes"`
	PeakRSSBytes int64 `json:"peakRssBytes"`
	// ReadyStacks are the stacks whose Ready condition is True at the end
	// of the idle window; NotReady counts the others by reason and message.
	ReadyStacks int            `json:"readyStacks"`
	NotReady    map[string]int `json:"notReady,omitempty"`
	// ClusterSettleSeconds is how long the cluster took to settle before
	// the burst (see settleCluster).
	ClusterSettleSeconds float64 `json:"clusterSettleSeconds"`
	// Restart is the operator's restart after the idle window (the burst
	// only).
	Restart *Restart `json:"restart,omitempty"`
}

// IdleRequestsPerStackPerMinute spreads the idle requests over the own
// stacks.
func (r Pass) IdleRequestsPerStackPerMinute() float64 {
	if r.Own == 0 {
		return 0
	}
	return r.IdleRequestsPerMinute / float64(r.Own)
}

// Floor is one repetition of the client-go write floor: the objects the
// stacks' releases consist of, created directly.
type Floor struct {
	Rep int `json:"rep"`
	// After says it ran after the repetition's bursts (Options.FloorAfter).
	After   bool    `json:"after,omitempty"`
	Stacks  int     `json:"stacks"`
	Objects int     `json:"objects"`
	Seconds float64 `json:"seconds"`
	// ClusterCPUSeconds is the CPU the cluster's processes used from the
	// first create to the last create answered.
	ClusterCPUSeconds float64 `json:"clusterCpuSeconds"`
	// ClusterCPUByProcess splits it by the cluster's processes.
	ClusterCPUByProcess map[string]float64 `json:"clusterCpuByProcess,omitempty"`
	// ClusterSettleSeconds is how long the cluster took to settle before
	// the creates (see settleCluster).
	ClusterSettleSeconds float64 `json:"clusterSettleSeconds"`
}

// Machine describes where the benchmark ran.
type Machine struct {
	CPUs        int    `json:"cpus"`
	CPUModel    string `json:"cpuModel,omitempty"`
	MemoryBytes int64  `json:"memoryBytes"`
	// LoadBefore and LoadAfter are /proc/loadavg's 1, 5 and 15 minute
	// averages: the machine is shared, and load from others slows both
	// operators (compare ratios, never absolute times across runs).
	LoadBefore string `json:"loadBefore"`
	LoadAfter  string `json:"loadAfter"`
}

// firstReps is how often the burst ran at the first size.
func (c Config) firstReps() int {
	if c.FirstReps > 0 {
		return c.FirstReps
	}
	return c.Reps
}

// Config is what was run.
type Config struct {
	// Stacks is the main table's burst size, the first of Sizes.
	Stacks int   `json:"stacks"`
	Sizes  []int `json:"sizes"`
	// StacksPerNamespace is Options.StacksPerNamespace: 0 when every
	// stack is in one namespace.
	StacksPerNamespace int `json:"stacksPerNamespace,omitempty"`
	// FloorAfter is Options.FloorAfter.
	FloorAfter bool `json:"floorAfter,omitempty"`
	Reps       int  `json:"reps"`
	// FirstReps is how often the burst ran at the first size (Reps in a
	// report from before it could differ).
	FirstReps int `json:"firstReps,omitempty"`
	// RestartReps is how many of the burst's repetitions restarted the
	// operators, at most (at each size, no more than ran there).
	RestartReps  int     `json:"restartReps"`
	Own          int     `json:"memoryOwnStacks"`
	Foreign      int     `json:"memoryForeignStacks"`
	MemoryReps   int     `json:"memoryReps"`
	IdleSeconds  float64 `json:"idleSeconds"`
	QuietSeconds float64 `json:"quietSeconds"`
	// StockVersion is the helm-operator-plugins release of the stock
	// operator.
	StockVersion string `json:"stockVersion"`
}

// Report is a whole benchmark run.
type Report struct {
	Date    time.Time `json:"date"`
	Commit  string    `json:"commit"`
	Machine Machine   `json:"machine"`
	Config  Config    `json:"config"`
	// Seconds is the wall time of the whole run, builds included.
	Seconds float64 `json:"seconds"`
	Burst   []Pass  `json:"burst"`
	Floor   []Floor `json:"floor"`
	Memory  []Pass  `json:"memory"`
}

// Goal is one of the product's goals for a figure, and whether this run
// met it.
type Goal struct {
	Text string `json:"goal"`
	Met  bool   `json:"met"`
}

// Row is one line of the table: a figure for each side, the ratios of
// ours to the others, and the goals that apply.
type Row struct {
	Figure  string `json:"figure"`
	Stock   string `json:"stock"`
	Ours    string `json:"ours"`
	Floor   string `json:"floor,omitempty"`
	VsStock string `json:"oursVsStock,omitempty"`
	VsFloor string `json:"oursVsFloor,omitempty"`
	Goals   []Goal `json:"goals,omitempty"`
}

// The goals (the fleet-scale work's and the old system's replacement
// targets).
const (
	goalBurstVsStock = 0.25 // at most a quarter of the stock time
	// The burst within this many times the write floor: closer for a
	// small burst, whose cluster follow-up mostly runs after the floor's
	// creates and the operator's burst alike.
	goalBurstVsFloorSmall = 2.5 // up to goalSmallBurst stacks
	goalBurstVsFloor      = 3.0 // larger bursts
	goalSmallBurst        = 200
	goalBurstRequests     = 12.0 // API requests per stack, create → all Deployed
	goalRestartRequests   = 1.0  // API requests per stack, restart → quiet
	goalReconciles        = 1.0  // per stack in the burst
	goalIdleRequests      = 1.0  // per stack per minute
	goalIdleCPUPercent    = 5.0  // of a core, for the burst's stacks
	goalMemoryVsStock     = 0.6  // RSS with own + foreign stacks
)

// Rows computes the table: medians over repetitions, then ratios and goals
// from the medians.
func (r *Report) Rows() []Row {
	// The main table is of the first size; Growth shows the others.
	bursts, floors := r.atSize(r.Config.Stacks)
	stock, ours := byOperator(bursts, Stock), byOperator(bursts, Ours)
	mstock, mours := byOperator(r.Memory, Stock), byOperator(r.Memory, Ours)
	floor := make([]float64, len(floors))
	objectsPerStack := 0.0
	for i, f := range floors {
		floor[i] = f.Seconds
		if f.Stacks > 0 {
			objectsPerStack = float64(f.Objects) / float64(f.Stacks)
		}
	}
	var rows []Row

	// The burst.
	st, ou, fl := medianOf(stock, Pass.allDeployed), medianOf(ours, Pass.allDeployed), median(floor)
	burst := Row{
		Figure:  fmt.Sprintf("%d stacks created at once → all Deployed (median of %d)", r.Config.Stacks, r.Config.firstReps()),
		Stock:   withValues(st, stock, Pass.allDeployed, formatSeconds),
		Ours:    withValues(ou, ours, Pass.allDeployed, formatSeconds),
		Floor:   withValues(fl, floors, func(f Floor) float64 { return f.Seconds }, formatSeconds),
		VsStock: ratio(ou, st),
		VsFloor: ratio(ou, fl),
	}
	if st > 0 {
		burst.Goals = append(burst.Goals, Goal{fmt.Sprintf("≤ %.2g× stock", goalBurstVsStock), ou/st <= goalBurstVsStock})
	}
	limit := burstVsFloorGoal(r.Config.Stacks)
	floorGoal := func(x float64) Goal { return Goal{fmt.Sprintf("≤ %.2g× floor", limit), x <= limit} }
	paired := pairedVsFloor(ours, floors)
	if fl > 0 && paired == nil {
		burst.Goals = append(burst.Goals, floorGoal(ou/fl))
	}
	rows = append(rows, burst)
	if paired != nil {
		// The machine's speed drifts between repetitions; a burst set
		// against the floor runs of its own repetition measures the
		// operator, not the drift, so the goal is judged on it.
		p := median(paired)
		rows = append(rows, Row{
			Figure:  fmt.Sprintf("… each repetition's burst over its own floor runs (paired; median of %d)", len(paired)),
			Stock:   "—",
			Ours:    withValues(p, paired, func(x float64) float64 { return x }, formatRatio),
			VsFloor: formatRatio(p),
			Goals:   []Goal{floorGoal(p)},
		})
	}
	rows = append(rows,
		// The stock operator has no Ready condition.
		Row{Figure: fmt.Sprintf("%d stacks created at once → all Ready", r.Config.Stacks), Stock: "—",
			Ours: orDash(ours, allReady(ours, r.Config.Stacks))})
	rows = append(rows,
		compare("one stack's create → Deployed, p50", stock, ours, func(r Pass) float64 { return r.P50Seconds }, formatSeconds),
		compare("one stack's create → Deployed, p90", stock, ours, func(r Pass) float64 { return r.P90Seconds }, formatSeconds))
	// The floor makes one request per object, every one a write.
	requests := compare("operator API requests per stack, create → all Deployed", stock, ours, func(r Pass) float64 { return r.RequestsPerStack }, formatCount)
	writes := compare("… of which writes (POST, PUT, PATCH, DELETE)", stock, ours, func(r Pass) float64 { return r.WritesPerStack }, formatCount)
	if objectsPerStack > 0 {
		requests.Floor, writes.Floor = formatCount(objectsPerStack), formatCount(objectsPerStack)+" (creates)"
		requests.VsFloor = ratio(medianOf(ours, func(r Pass) float64 { return r.RequestsPerStack }), objectsPerStack)
		writes.VsFloor = ratio(medianOf(ours, func(r Pass) float64 { return r.WritesPerStack }), objectsPerStack)
	}
	requests.Goals = atMost(ours, func(r Pass) float64 { return r.RequestsPerStack }, goalBurstRequests, "≤ %g")
	rows = append(rows, requests, writes,
		compare("operator CPU, create → all Deployed", stock, ours, func(r Pass) float64 { return r.CPUSeconds }, formatSeconds))
	rows = append(rows, clusterRows(stock, ours, floors)...)
	reconciles := compare("reconciles per stack, create → settled", stock, ours, func(r Pass) float64 { return r.ReconcilesPerStack }, formatReconciles)
	reconciles.Goals = atMost(ours, func(r Pass) float64 { return r.ReconcilesPerStack }, goalReconciles, "≤ %g per stack")
	rows = append(rows, reconciles,
		compare("operator API requests per stack, create → settled", stock, ours, func(r Pass) float64 { return r.RequestsPerStackSettled }, formatCount))

	// Idle.
	idle := time.Duration(r.Config.IdleSeconds * float64(time.Second)).Round(time.Second)
	idleRequests := compare(fmt.Sprintf("API requests per stack per minute, idle (%s after settling)", idle), stock, ours, Pass.IdleRequestsPerStackPerMinute, formatCount)
	idleRequests.Goals = atMost(ours, Pass.IdleRequestsPerStackPerMinute, goalIdleRequests, "≤ %g")
	idleCPU := compare(fmt.Sprintf("CPU when idle, %% of a core, %d stacks", r.Config.Stacks), stock, ours, func(r Pass) float64 { return r.IdleCPUPercent }, formatPercent)
	idleCPU.Goals = atMost(ours, func(r Pass) float64 { return r.IdleCPUPercent }, goalIdleCPUPercent, "≤ %g%%")
	rows = append(rows, idleRequests, idleCPU)
	rows = append(rows, restartRows(r.Config.QuietSeconds, stock, ours)...)

	// Memory.
	rss := memoryRow(fmt.Sprintf("RSS settled (peak), %d own stacks", r.Config.Stacks), stock, ours)
	if s, o := rssMedian(stock), rssMedian(ours); s > 0 && o > 0 {
		rss.Goals = []Goal{{"< stock", o < s}}
	}
	rows = append(rows, rss)
	if len(mstock) > 0 || len(mours) > 0 {
		foreign := fmt.Sprintf("%d own + %d foreign stacks", r.Config.Own, r.Config.Foreign)
		rows = append(rows, compare(fmt.Sprintf("%d own stacks → all Deployed, %d foreign present (median of %d)", r.Config.Own, r.Config.Foreign, r.Config.MemoryReps),
			mstock, mours, Pass.allDeployed, formatSeconds))
		mem := memoryRow("RSS settled (peak), "+foreign, mstock, mours)
		if s, o := rssMedian(mstock), rssMedian(mours); s > 0 && o > 0 {
			mem.Goals = []Goal{{fmt.Sprintf("≤ %.2g× stock", goalMemoryVsStock), float64(o)/float64(s) <= goalMemoryVsStock}}
		}
		rows = append(rows, mem,
			compare("API requests per minute when idle, all "+foreign, mstock, mours, func(r Pass) float64 { return r.IdleRequestsPerMinute }, formatCount))
	}
	return rows
}

func (r Pass) allDeployed() float64 { return r.AllDeployedSeconds }

// busy is the cores the cluster and the operator kept busy from the first
// create to all Deployed.
func (r Pass) busy() float64 {
	if r.AllDeployedSeconds <= 0 {
		return 0
	}
	return (r.ClusterCPUSeconds + r.CPUSeconds) / r.AllDeployedSeconds
}

// clusterRows say what the burst cost the cluster's processes, against
// the write floor, and how busy the machine's cores were: a burst that
// keeps every core busy is bound by the CPU the cluster and the operator
// share, not by the operator's waits. Reports from before the cluster's
// CPU was measured have none.
func clusterRows(stock, ours []Pass, floors []Floor) []Row {
	if !slices.ContainsFunc(ours, func(p Pass) bool { return p.ClusterCPUSeconds > 0 }) {
		return nil
	}
	clusterCPU := func(p Pass) float64 { return p.ClusterCPUSeconds }
	floorCPU := func(f Floor) float64 { return f.ClusterCPUSeconds }
	floorBusy := func(f Floor) float64 {
		if f.Seconds <= 0 {
			return 0
		}
		return f.ClusterCPUSeconds / f.Seconds
	}
	cpu := compare("cluster CPU (etcd, API server, controller-manager, scheduler, KWOK), create → all Deployed", stock, ours, clusterCPU, formatSeconds)
	busy := compare("cores busy, create → all Deployed (cluster and operator CPU over the wall time)", stock, ours, Pass.busy, formatCores)
	if len(floors) > 0 {
		cpu.Floor, cpu.VsFloor = formatSeconds(medianOf(floors, floorCPU)), ratio(medianOf(ours, clusterCPU), medianOf(floors, floorCPU))
		busy.Floor = formatCores(medianOf(floors, floorBusy)) + " (cluster only)"
	}
	busy.VsStock = ""
	return []Row{cpu, busy}
}

// atSize are the burst passes and floors of one burst size. A report
// without sizes (of an older run) has every pass at Config.Stacks.
func (r *Report) atSize(stacks int) ([]Pass, []Floor) {
	if len(r.Config.Sizes) <= 1 {
		return r.Burst, r.Floor
	}
	passes := slices.DeleteFunc(slices.Clone(r.Burst), func(p Pass) bool { return p.Own != stacks })
	floors := slices.DeleteFunc(slices.Clone(r.Floor), func(f Floor) bool { return f.Stacks != stacks })
	return passes, floors
}

// Growth is one figure of one side at each burst size.
type Growth struct {
	Figure string `json:"figure"`
	Side   string `json:"side"`
	// Values are the medians at each of Config.Sizes, in order ("—" where
	// that side did not run).
	Values []string `json:"values"`
	// Growth is the value at the largest size over the value at the
	// smallest: 1× for a per-stack figure that does not grow.
	Growth string `json:"growth"`
}

// Growth computes how each figure grows with the burst's size, for a run
// of several sizes: per stack where the figure is a total, so that a
// constant cost per stack reads the same at every size.
func (r *Report) Growth() []Growth {
	sizes := r.Config.Sizes
	if len(sizes) < 2 {
		return nil
	}
	var out []Growth
	row := func(figure, side string, at func(size int) []float64, format func(float64) string) {
		g := Growth{Figure: figure, Side: side, Growth: "—"}
		var first, last float64
		for i, size := range sizes {
			xs := at(size)
			if len(xs) == 0 {
				g.Values = append(g.Values, "—")
				continue
			}
			m := median(xs)
			g.Values = append(g.Values, format(m))
			switch i {
			case 0:
				first = m
			case len(sizes) - 1:
				last = m
			}
		}
		if first > 0 && last > 0 {
			g.Growth = ratio(last, first)
		}
		out = append(out, g)
	}
	ms := func(s float64) string { return fmt.Sprintf("%.0f ms", s) }
	// floorRow and passRow add a row of the floor's, or of op's, figure f
	// (false where a run does not have it).
	floorRow := func(figure string, f func(Floor) (float64, bool)) {
		row(figure, "write floor (creates)", func(size int) []float64 {
			_, floors := r.atSize(size)
			return present(floors, f)
		}, ms)
	}
	passRow := func(figure string, op Operator, f func(Pass) (float64, bool), format func(float64) string) {
		row(figure, operatorNames[op], func(size int) []float64 {
			passes, _ := r.atSize(size)
			return present(byOperator(passes, op), f)
		}, format)
	}
	floorPerStack := func(f func(Floor) float64) func(Floor) (float64, bool) {
		return func(fl Floor) (float64, bool) { return 1000 * f(fl) / float64(max(fl.Stacks, 1)), true }
	}
	floorRow("create → all Deployed, per stack", floorPerStack(func(f Floor) float64 { return f.Seconds }))
	floorRow("cluster CPU per stack, create → all Deployed", floorPerStack(func(f Floor) float64 { return f.ClusterCPUSeconds }))
	type figure struct {
		name   string
		f      func(Pass) (float64, bool)
		format func(float64) string
	}
	perStack := func(f func(Pass) float64) func(Pass) (float64, bool) {
		return func(p Pass) (float64, bool) { return f(p) / float64(max(p.Own, 1)), true }
	}
	// restart reads a restart figure; total divides it by the stacks.
	restart := func(f func(*Restart) float64, total bool) func(Pass) (float64, bool) {
		return func(p Pass) (float64, bool) {
			if p.Restart == nil {
				return 0, false
			}
			if total {
				return f(p.Restart) / float64(max(p.Own, 1)), true
			}
			return f(p.Restart), true
		}
	}
	plain := func(f func(Pass) float64) func(Pass) (float64, bool) {
		return func(p Pass) (float64, bool) { return f(p), true }
	}
	figures := []figure{
		{"create → all Deployed, per stack", perStack(func(p Pass) float64 { return 1000 * p.AllDeployedSeconds }), ms},
		{"create → Deployed, p90", plain(func(p Pass) float64 { return p.P90Seconds }), formatSeconds},
		{"API requests per stack, create → all Deployed", plain(func(p Pass) float64 { return p.RequestsPerStack }), formatCount},
		{"writes per stack, create → all Deployed", plain(func(p Pass) float64 { return p.WritesPerStack }), formatCount},
		{"CPU per stack, create → all Deployed", perStack(func(p Pass) float64 { return 1000 * p.CPUSeconds }), ms},
		{"cluster CPU per stack, create → all Deployed", perStack(func(p Pass) float64 { return 1000 * p.ClusterCPUSeconds }), ms},
		{"reconciles per stack, create → settled", plain(func(p Pass) float64 { return p.ReconcilesPerStack }), formatReconciles},
		{"idle API requests per stack per minute", plain(Pass.IdleRequestsPerStackPerMinute), formatCount},
		{"idle CPU, % of a core", plain(func(p Pass) float64 { return p.IdleCPUPercent }), formatPercent},
		{"RSS settled", plain(func(p Pass) float64 { return float64(p.RSSBytes) }), func(b float64) string { return formatMiB(int64(b)) }},
		{"restart → quiet, per stack", restart(func(rs *Restart) float64 { return 1000 * rs.QuietSeconds }, true), ms},
		{"API requests per stack, restart → quiet", restart(func(rs *Restart) float64 { return rs.RequestsPerStack }, false), formatCount},
		{"reconciles per stack, restart → quiet", restart(func(rs *Restart) float64 { return rs.ReconcilesPerStack }, false), formatCount},
		{"CPU per stack, restart → quiet", restart(func(rs *Restart) float64 { return 1000 * rs.CPUSeconds }, true), ms},
	}
	for _, fig := range figures {
		for _, op := range []Operator{Stock, Ours} {
			passRow(fig.name, op, fig.f, fig.format)
		}
	}
	row("create → all Deployed, × its own floor runs (paired)", operatorNames[Ours], func(size int) []float64 {
		passes, floors := r.atSize(size)
		return pairedVsFloor(byOperator(passes, Ours), floors)
	}, formatRatio)
	// Where the cluster's CPU went, the floor's beside ours: what grows
	// with N in ours and not in the floor's is work the floor's window
	// does not hold.
	for _, name := range r.clusterProcesses() {
		figure := "cluster CPU per stack: " + name
		floorRow(figure, func(f Floor) (float64, bool) {
			return 1000 * f.ClusterCPUByProcess[name] / float64(max(f.Stacks, 1)), f.ClusterCPUByProcess != nil
		})
		passRow(figure, Ours, func(p Pass) (float64, bool) {
			return 1000 * p.ClusterCPUByProcess[name] / float64(max(p.Own, 1)), p.ClusterCPUByProcess != nil
		}, ms)
	}
	return out
}

// clusterProcesses names the cluster's processes whose CPU the report
// holds, sorted; none for reports from before it was split.
func (r *Report) clusterProcesses() []string {
	seen := map[string]bool{}
	for _, f := range r.Floor {
		for n := range f.ClusterCPUByProcess {
			seen[n] = true
		}
	}
	for _, p := range r.Burst {
		for n := range p.ClusterCPUByProcess {
			seen[n] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// restartRows are the restart's figures, for the passes that restarted
// their operator.
func restartRows(quietSeconds float64, stock, ours []Pass) []Row {
	restarted := func(passes []Pass) []Pass {
		return slices.DeleteFunc(slices.Clone(passes), func(p Pass) bool { return p.Restart == nil })
	}
	stock, ours = restarted(stock), restarted(ours)
	if len(stock) == 0 && len(ours) == 0 {
		return nil
	}
	quiet := time.Duration(quietSeconds * float64(time.Second))
	figure := func(f func(*Restart) float64) func(Pass) float64 {
		return func(p Pass) float64 { return f(p.Restart) }
	}
	requests := compare("operator API requests per stack, restart → quiet", stock, ours, figure(func(r *Restart) float64 { return r.RequestsPerStack }), formatCount)
	requests.Goals = atMost(ours, figure(func(r *Restart) float64 { return r.RequestsPerStack }), goalRestartRequests, "≤ %g")
	return []Row{
		compare(fmt.Sprintf("restart after settling (SIGTERM, start again) → quiet (%s without a reconcile or write)", quiet), stock, ours,
			figure(func(r *Restart) float64 { return r.QuietSeconds }), formatSeconds),
		requests,
		compare("… of which writes", stock, ours, figure(func(r *Restart) float64 { return r.WritesPerStack }), formatCount),
		compare("reconciles per stack, restart → quiet", stock, ours, figure(func(r *Restart) float64 { return r.ReconcilesPerStack }), formatCount),
		compare("operator CPU, restart → quiet", stock, ours, figure(func(r *Restart) float64 { return r.CPUSeconds }), formatSeconds),
	}
}

func byOperator(runs []Pass, op Operator) []Pass {
	return slices.DeleteFunc(slices.Clone(runs), func(r Pass) bool { return r.Operator != op })
}

func values[T any](items []T, f func(T) float64) []float64 {
	out := make([]float64, len(items))
	for i, it := range items {
		out[i] = f(it)
	}
	return out
}

// present returns f of each of xs that has the figure.
func present[T any](xs []T, f func(T) (float64, bool)) []float64 {
	var out []float64
	for _, x := range xs {
		if v, ok := f(x); ok {
			out = append(out, v)
		}
	}
	return out
}

func medianOf[T any](items []T, f func(T) float64) float64 { return median(values(items, f)) }

// compare is a row of one figure of both operators and their ratio.
func compare(figure string, stock, ours []Pass, f func(Pass) float64, format func(float64) string) Row {
	s, o := medianOf(stock, f), medianOf(ours, f)
	return Row{Figure: figure, Stock: orDash(stock, format(s)), Ours: orDash(ours, format(o)), VsStock: ratio(o, s)}
}

// pairedVsFloor sets each of ours' bursts against the mean of the floor
// runs of its own repetition (one before it, and one after with
// FloorAfter): nil unless every burst has a floor run.
func pairedVsFloor(ours []Pass, floors []Floor) []float64 {
	var out []float64
	for _, p := range ours {
		var sum float64
		n := 0
		for _, f := range floors {
			if f.Rep == p.Rep && f.Seconds > 0 {
				sum += f.Seconds
				n++
			}
		}
		if n == 0 {
			return nil
		}
		out = append(out, p.allDeployed()/(sum/float64(n)))
	}
	return out
}

// burstVsFloorGoal is the most a burst of stacks may take, in times the
// write floor.
func burstVsFloorGoal(stacks int) float64 {
	if stacks <= goalSmallBurst {
		return goalBurstVsFloorSmall
	}
	return goalBurstVsFloor
}

// atMost is the goal that ours' median of f is at most limit.
func atMost(ours []Pass, f func(Pass) float64, limit float64, text string) []Goal {
	if len(ours) == 0 {
		return nil
	}
	return []Goal{{fmt.Sprintf(text, limit), medianOf(ours, f) <= limit}}
}

func rssMedian(runs []Pass) int64 {
	return int64(medianOf(runs, func(r Pass) float64 { return float64(r.RSSBytes) }))
}

func memoryRow(figure string, stock, ours []Pass) Row {
	peak := func(runs []Pass) int64 {
		return int64(medianOf(runs, func(r Pass) float64 { return float64(r.PeakRSSBytes) }))
	}
	format := func(runs []Pass) string {
		if len(runs) == 0 {
			return "—"
		}
		return fmt.Sprintf("%s (peak %s)", formatMiB(rssMedian(runs)), formatMiB(peak(runs)))
	}
	return Row{Figure: figure, Stock: format(stock), Ours: format(ours),
		VsStock: ratio(float64(rssMedian(ours)), float64(rssMedian(stock)))}
}

// withValues formats the median and, with more than one repetition, every
// value in the order they were measured.
func withValues[T any](m float64, items []T, f func(T) float64, format func(float64) string) string {
	if len(items) == 0 {
		return "—"
	}
	if len(items) == 1 {
		return format(m)
	}
	all := make([]string, len(items))
	for i, it := range items {
		all[i] = strings.TrimSuffix(strings.TrimSuffix(format(f(it)), " s"), "×")
	}
	return fmt.Sprintf("%s (%s)", format(m), strings.Join(all, ", "))
}

func orDash[T any](items []T, s string) string {
	if len(items) == 0 {
		return "—"
	}
	return s
}

// median of xs; the mean of the middle two for an even count; 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// percentile is the nearest-rank percentile p (0-100) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.SortFunc(s, cmp.Compare)
	rank := int(p/100*float64(len(s))+0.999999) - 1 // ceil(p/100·n), 1-based
	return s[min(max(rank, 0), len(s)-1)]
}

func ratio(ours, other float64) string {
	if other <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", ours/other)
}

func formatRatio(x float64) string   { return fmt.Sprintf("%.2f×", x) }
func formatSeconds(s float64) string { return fmt.Sprintf("%.1f s", s) }
func formatCount(n float64) string   { return fmt.Sprintf("%.1f", n) }
func formatCores(n float64) string   { return fmt.Sprintf("%.2f", n) }

// formatReconciles keeps the second decimal, which tells 1.01 reconciles
// per stack (a goal of at most 1 not met) from 1.00.
func formatReconciles(n float64) string { return fmt.Sprintf("%.2f", n) }

// allReady is the median time to all Ready of passes, or says that some
// pass did not get there within the wait.
func allReady(passes []Pass, stacks int) string {
	for _, p := range passes {
		if p.AllReadySeconds == 0 {
			return fmt.Sprintf("not within %s of all Deployed", readyDeadline(stacks))
		}
	}
	return formatSeconds(medianOf(passes, func(p Pass) float64 { return p.AllReadySeconds }))
}
func formatPercent(p float64) string { return fmt.Sprintf("%.1f%%", p) }
func formatMiB(b int64) string       { return fmt.Sprintf("%d MiB", (b+(1<<19))>>20) }

func formatGiB(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

// Markdown renders the report: what ran where, then the one table, then
// how each figure was measured.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Operator benchmark, %s\n\n", r.Date.UTC().Format("2006-01-02 15:04 UTC"))
	cpu := ""
	if r.Machine.CPUModel != "" {
		cpu = " (" + r.Machine.CPUModel + ")"
	}
	fmt.Fprintf(&b, "Commit %s; %d CPUs%s, %s of memory; load average (1, 5, 15 min) %s before the run, %s after%s; "+
		"the run took %s. The stock operator is helm-operator-plugins %s's `helm-operator run`.\n\n",
		r.Commit, r.Machine.CPUs, cpu, formatGiB(r.Machine.MemoryBytes), r.Machine.LoadBefore, r.Machine.LoadAfter, r.loadRange(),
		(time.Duration(r.Seconds) * time.Second).Round(time.Minute), r.Config.StockVersion)
	b.WriteString("| figure | stock helm-operator | this operator | client-go write floor | ours / stock | ours / floor | goal | met |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, row := range r.Rows() {
		var goals, met []string
		for _, g := range row.Goals {
			goals = append(goals, g.Text)
			met = append(met, map[bool]string{true: "met", false: "**not met**"}[g.Met])
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", row.Figure, row.Stock, row.Ours,
			cmp.Or(row.Floor, "—"), cmp.Or(row.VsStock, "—"), cmp.Or(row.VsFloor, "—"),
			cmp.Or(strings.Join(goals, "; "), "—"), cmp.Or(strings.Join(met, "; "), "—"))
	}
	if growth := r.Growth(); len(growth) > 0 {
		fmt.Fprintf(&b, "\nHow each figure grows with the burst's size (medians; largest / smallest size):\n\n| figure | side |")
		for _, n := range r.Config.Sizes {
			fmt.Fprintf(&b, " %d stacks |", n)
		}
		b.WriteString(" growth |\n|" + strings.Repeat(" --- |", len(r.Config.Sizes)+3) + "\n")
		for _, g := range growth {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", g.Figure, g.Side, strings.Join(g.Values, " | "), g.Growth)
		}
	}
	perStack := 0
	if len(r.Floor) > 0 && r.Floor[0].Stacks > 0 {
		perStack = r.Floor[0].Objects / r.Floor[0].Stacks
	}
	fmt.Fprintf(&b, `
How it was measured:
- Each operator runs as a process with default flags against a fresh local cluster per repetition (etcd,
  kube-apiserver, kube-controller-manager and kube-scheduler %s; KWOK nodes). The operators alternate: each
  repetition starts with the one that went second before. The stock operator watches the same chart (as this operator
  embeds it) and CRD, with a watches.yaml selecting the same major; this operator serves plain-HTTP metrics on
  loopback for the scrape.
- Every timed phase (the write floor's creates, an operator's burst) starts on a fresh cluster with the CRD
  installed, once the cluster's own processes have used under %.0f%% of a core for %s (at most %s; with the
  operator started and its workers running, for a burst) and after one dry-run create of a stack and of each object
  of a release, so the floor and the operators start from the same settled, warmed-up state.
- Times run from the first create to the harness seeing `+"`Deployed=True`"+` through a watch.
- API requests are each operator's own client-go counter `+"`%s`"+` (every client in the process: its
  own, Helm's, discovery, events), less the reads this operator's cache answered without a request; reconciles
  are `+"`%s`"+` of the stack controller; CPU (user +
  system) and memory (VmRSS; the peak is VmHWM) come from /proc.
- Settled: %s without a reconcile finishing or running and without an API write, at most %s after all Deployed%s. The idle window
  follows; memory is read at its end.
- Restart: after the idle window the operator gets SIGTERM and is started again on the same cluster; its figures
  run from the new process's start until it is quiet as above, at most %s after the start%s.
- %s The write floor creates the objects of the same stacks' releases (%d per stack, rendered from the embedded chart)
  with client-go, QPS 1000 and %d requests in flight, timed from the first create sent to the last answered; the
  controller-manager's follow-up (ReplicaSets and Pods of the Deployments) runs meanwhile, as it does in a burst.%s
- Cluster CPU is that of the cluster's processes over the same window (first create to all Deployed, or to the
  floor's last create answered), from /proc; cores busy adds the operator's CPU and divides by the wall time: near
  the machine's CPU count, a burst waits on the CPU the cluster and the operator share, not on the operator's requests.
- Figures are medians of the repetitions; ratios are of the medians, except the paired one: each repetition's burst
  over the mean of its own floor runs, the median of those; the goal against the floor is judged on it where every
  repetition has a floor run.
`, localcluster.KubernetesVersion, 100*clusterIdleCPU, clusterQuiet, clusterSettleDeadline, requestsMetric, reconcilesMetric,
		time.Duration(r.Config.QuietSeconds*float64(time.Second)), settleDeadline, r.unsettled(), restartDeadline, r.notQuiet(), r.layout(), perStack, floorWorkers, r.floorRuns())
	return b.String()
}

// floorRuns says when the write floor ran, if not only before the bursts.
func (r *Report) floorRuns() string {
	if !r.Config.FloorAfter {
		return ""
	}
	return `
  It runs before and again after each repetition's bursts, on the same shared machine whose speed drifts; a size's
  floor is the median of its runs.`
}

// layout says where the stacks were.
func (r *Report) layout() string {
	if n := r.Config.StacksPerNamespace; n > 0 {
		return fmt.Sprintf("The stacks are spread over namespaces of %d each, as a fleet's tenants are.", n)
	}
	return "Every stack is in one namespace."
}

// loadRange is the span of the 1-minute load average at the start of each
// pass, the measure of how much else the machine was doing.
func (r *Report) loadRange() string {
	var loads []float64
	for _, p := range append(slices.Clone(r.Burst), r.Memory...) {
		f := strings.Fields(p.LoadAtStart)
		if len(f) == 0 {
			continue
		}
		if l, err := strconv.ParseFloat(f[0], 64); err == nil {
			loads = append(loads, l)
		}
	}
	if len(loads) == 0 {
		return ""
	}
	return fmt.Sprintf(", 1-minute load average %.1f–%.1f at the start of the operators' passes", slices.Min(loads), slices.Max(loads))
}

// unsettled says which passes reached the settle deadline.
func (r *Report) unsettled() string {
	var parts []string
	for _, op := range []Operator{Stock, Ours} {
		passes := append(byOperator(r.Burst, op), byOperator(r.Memory, op)...)
		n := len(slices.DeleteFunc(slices.Clone(passes), func(p Pass) bool { return p.Settled }))
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d of %d", operatorNames[op], n, len(passes)))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (passes that reached that limit: " + strings.Join(parts, ", ") + ")"
}

// notQuiet says which restarts reached restartDeadline.
func (r *Report) notQuiet() string {
	var parts []string
	for _, op := range []Operator{Stock, Ours} {
		n, all := 0, 0
		for _, p := range byOperator(r.Burst, op) {
			if p.Restart != nil {
				all++
				if !p.Restart.Quiet {
					n++
				}
			}
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d of %d", operatorNames[op], n, all))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (restarts that reached that limit: " + strings.Join(parts, ", ") + ")"
}

// operatorNames are the operators as the report names them.
var operatorNames = map[Operator]string{Stock: "the stock operator", Ours: "this operator"}

// JSON is the report with its table, indented.
func (r *Report) JSON() ([]byte, error) {
	return json.MarshalIndent(struct {
		*Report
		Table  []Row    `json:"table"`
		Growth []Growth `json:"growth,omitempty"`
	}{r, r.Rows(), r.Growth()}, "", "  ")
}

// Write writes the report as Markdown and JSON into dir, named after its
// date, and returns their paths.
func (r *Report) Write(dir string) (markdown, jsonPath string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("writing the report: %w", err)
	}
	base := filepath.Join(dir, "bench-"+r.Date.UTC().Format("2006-01-02T1504Z"))
	js, err := r.JSON()
	if err != nil {
		return "", "", fmt.Errorf("encoding the report: %w", err)
	}
	markdown, jsonPath = base+".md", base+".json"
	if err := os.WriteFile(markdown, []byte(r.Markdown()), 0o644); err != nil {
		return "", "", fmt.Errorf("writing the report: %w", err)
	}
	if err := os.WriteFile(jsonPath, append(js, '\n'), 0o644); err != nil {
		return "", "", fmt.Errorf("writing the report: %w", err)
	}
	return markdown, jsonPath, nil
}
