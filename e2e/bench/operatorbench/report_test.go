package operatorbench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// sampleReport holds the figures of the first side-by-side measurement
// (stock 49.6 s, ours 21.1 s, floor 3.9 s for 200 stacks), so the table's
// ratios and goals are those of a known case.
func sampleReport() *Report {
	burst := func(op Operator, rep int, all, p50, idleReq float64, rss int64) Pass {
		return Pass{Operator: op, Rep: rep, Own: 200, AllDeployedSeconds: all, P50Seconds: p50, P90Seconds: p50 * 2,
			RequestsPerStack: 27, WritesPerStack: 9, CPUSeconds: 12, ReconcilesPerStack: 4, IdleSeconds: 180,
			IdleRequestsPerMinute: idleReq * 200, IdleCPUPercent: 0.1, RSSBytes: rss << 20, PeakRSSBytes: (rss + 40) << 20,
			Settled: op == Ours, LoadAtStart: fmt.Sprintf("%d.50 3.00 3.00", 2+rep)}
	}
	return &Report{
		Date:    time.Date(2026, 11, 25, 14, 3, 0, 0, time.UTC),
		Commit:  "0123456789ab",
		Machine: Machine{CPUs: 2, MemoryBytes: 24 << 30, LoadBefore: "1.49 3.67 6.63", LoadAfter: "2.00 2.00 2.00"},
		Config:  Config{Stacks: 200, Reps: 3, Own: 500, Foreign: 500, MemoryReps: 1, IdleSeconds: 180, QuietSeconds: 5, StockVersion: "v0.9.1"},
		Seconds: 3000,
		Burst: []Pass{
			burst(Stock, 0, 49.5, 26.8, 17, 115), burst(Ours, 0, 17.6, 11, 0, 149),
			burst(Ours, 1, 21.1, 11, 0, 149), burst(Stock, 1, 49.6, 26.8, 17, 115),
			burst(Stock, 2, 53.3, 26.8, 17, 115), burst(Ours, 2, 27.9, 11, 0, 149),
		},
		Floor: []Floor{{Rep: 0, Stacks: 200, Objects: 1200, Seconds: 3.9}, {Rep: 1, Stacks: 200, Objects: 1200, Seconds: 4.1}, {Rep: 2, Stacks: 200, Objects: 1200, Seconds: 3.7}},
		Memory: []Pass{
			{Operator: Stock, Own: 500, Foreign: 500, AllDeployedSeconds: 120.5, RSSBytes: 149 << 20, PeakRSSBytes: 175 << 20, IdleRequestsPerMinute: 6711},
			{Operator: Ours, Own: 500, Foreign: 500, AllDeployedSeconds: 40.8, RSSBytes: 241 << 20, PeakRSSBytes: 343 << 20, IdleRequestsPerMinute: 1},
		},
	}
}

func rowByPrefix(t *testing.T, rows []Row, prefix string) Row {
	t.Helper()
	for _, r := range rows {
		if strings.HasPrefix(r.Figure, prefix) {
			return r
		}
	}
	t.Fatalf("no row %q", prefix)
	return Row{}
}

func TestRowsRatiosAndGoals(t *testing.T) {
	rows := sampleReport().Rows()
	burst := rowByPrefix(t, rows, "200 stacks created at once")
	want := Row{
		Figure: "200 stacks created at once → all Deployed (median of 3)",
		Stock:  "49.6 s (49.5, 49.6, 53.3)", Ours: "21.1 s (17.6, 21.1, 27.9)", Floor: "3.9 s (3.9, 4.1, 3.7)",
		VsStock: "0.43×", VsFloor: "5.41×",
		Goals: []Goal{{"≤ 0.25× stock", false}},
	}
	if got, _ := json.Marshal(burst); string(got) != string(must(json.Marshal(want))) {
		t.Errorf("burst row\n got %s\nwant %s", got, must(json.Marshal(want)))
	}
	// Paired: 17.6/3.9, 21.1/4.1, 27.9/3.7.
	want = Row{
		Figure: "… each repetition's burst over its own floor runs (paired; median of 3)",
		Stock:  "—", Ours: "5.15× (4.51, 5.15, 7.54)", VsFloor: "5.15×",
		Goals: []Goal{{"≤ 2.5× floor", false}},
	}
	if got := rowByPrefix(t, rows, "… each repetition's burst"); string(must(json.Marshal(got))) != string(must(json.Marshal(want))) {
		t.Errorf("paired row\n got %s\nwant %s", must(json.Marshal(got)), must(json.Marshal(want)))
	}
	for prefix, want := range map[string][]Goal{
		"reconciles per stack": {{"≤ 1 per stack", false}},
		"operator API requests per stack, create → all Deployed": {{"≤ 12", false}},
		"API requests per stack per minute":                      {{"≤ 1", true}},
		"CPU when idle":                                          {{"≤ 5%", true}},
		"RSS settled (peak), 200 own":                            {{"< stock", false}},
		"RSS settled (peak), 500 own":                            {{"≤ 0.6× stock", false}},
	} {
		got := rowByPrefix(t, rows, prefix).Goals
		if string(must(json.Marshal(got))) != string(must(json.Marshal(want))) {
			t.Errorf("%s: goals %+v, want %+v", prefix, got, want)
		}
	}
	if r := rowByPrefix(t, rows, "RSS settled (peak), 500 own"); r.Stock != "149 MiB (peak 175 MiB)" || r.Ours != "241 MiB (peak 343 MiB)" || r.VsStock != "1.62×" {
		t.Errorf("memory row %+v", r)
	}
	if r := rowByPrefix(t, rows, "operator API requests per stack"); r.Floor != "6.0" || r.VsFloor != "4.50×" {
		t.Errorf("requests row %+v", r)
	}
	if r := rowByPrefix(t, rows, "… of which writes"); r.Floor != "6.0 (creates)" || r.VsFloor != "1.50×" || r.Ours != "9.0" {
		t.Errorf("writes row %+v", r)
	}
	if r := rowByPrefix(t, rows, "API requests per stack per minute"); r.Stock != "17.0" || r.Ours != "0.0" {
		t.Errorf("idle row %+v", r)
	}
}

// TestBurstGoalBySize: a burst beyond 200 stacks may take 3× the floor,
// a smaller one 2.5×.
func TestBurstGoalBySize(t *testing.T) {
	r := sampleReport()
	for i := range r.Burst {
		r.Burst[i].Own, r.Burst[i].AllDeployedSeconds = 1000, 11.5
	}
	for i := range r.Floor {
		r.Floor[i].Stacks = 1000
	}
	r.Config.Stacks, r.Config.Sizes = 1000, []int{1000}
	got := rowByPrefix(t, r.Rows(), "… each repetition's burst").Goals
	if want := (Goal{"≤ 3× floor", true}); len(got) != 1 || got[0] != want {
		t.Errorf("goals of a 1000-stack burst at 2.9× the floor: %+v, want %+v", got, want)
	}
	r.Floor = r.Floor[:1] // no floor run of repetitions 1 and 2: the goal is on the medians
	got = rowByPrefix(t, r.Rows(), "1000 stacks created at once").Goals
	if want := (Goal{"≤ 3× floor", true}); len(got) != 2 || got[1] != want {
		t.Errorf("goals of a 1000-stack burst at 2.9× the floor, unpaired: %+v, want %+v after the stock one", got, want)
	}
}

func TestRowsGoalsMet(t *testing.T) {
	r := sampleReport()
	for i := range r.Burst {
		if r.Burst[i].Operator == Ours {
			r.Burst[i].AllDeployedSeconds, r.Burst[i].ReconcilesPerStack, r.Burst[i].RSSBytes = 9, 1, 100<<20
			r.Burst[i].RequestsPerStack = 12
		}
	}
	r.Memory[1].RSSBytes = 80 << 20
	for _, row := range r.Rows() {
		for _, g := range row.Goals {
			if !g.Met {
				t.Errorf("%s: %s not met", row.Figure, g.Text)
			}
		}
	}
}

// TestRowsWithoutMemory: a run that skipped the memory workload has no
// memory rows and no goals for them, and no ratio divides by zero.
func TestRowsWithoutMemory(t *testing.T) {
	r := sampleReport()
	r.Memory = nil
	r.Config.MemoryReps = 0
	for _, row := range r.Rows() {
		if strings.Contains(row.Figure, "foreign") {
			t.Errorf("memory row without a memory workload: %s", row.Figure)
		}
	}
	r.Burst = byOperator(r.Burst, Ours)
	burst, paired := r.Rows()[0], r.Rows()[1]
	if burst.Stock != "—" || burst.VsStock != "—" || len(burst.Goals) != 0 || len(paired.Goals) != 1 || paired.Goals[0].Text != "≤ 2.5× floor" {
		t.Errorf("burst rows without the stock operator: %+v, %+v", burst, paired)
	}
}

// TestRestartRows: the restart's figures are rows of their own, with the
// ratios of the medians, only when passes restarted their operator, and a
// restart that never went quiet is named under the table.
func TestRestartRows(t *testing.T) {
	r := sampleReport()
	for _, row := range r.Rows() {
		if strings.Contains(row.Figure, "restart") {
			t.Errorf("restart row without restarts: %s", row.Figure)
		}
	}
	for i, p := range r.Burst {
		rs := &Restart{QuietSeconds: 40 + float64(p.Rep), Quiet: true, RequestsPerStack: 10, WritesPerStack: 2, ReconcilesPerStack: 1, CPUSeconds: 20}
		if p.Operator == Ours {
			rs = &Restart{QuietSeconds: 4, Quiet: p.Rep != 1, RequestsPerStack: 0.5, ReconcilesPerStack: 0, CPUSeconds: 1}
		}
		r.Burst[i].Restart = rs
	}
	rows := r.Rows()
	for prefix, want := range map[string][2]string{
		"restart after settling (SIGTERM, start again) → quiet (5s without": {"41.0 s", "0.10×"},
		"operator API requests per stack, restart → quiet":                  {"10.0", "0.05×"},
		"reconciles per stack, restart → quiet":                             {"1.0", "0.00×"},
		"operator CPU, restart → quiet":                                     {"20.0 s", "0.05×"},
	} {
		if row := rowByPrefix(t, rows, prefix); row.Stock != want[0] || row.VsStock != want[1] {
			t.Errorf("%s: %+v, want stock %s, ratio %s", prefix, row, want[0], want[1])
		}
	}
	if g := rowByPrefix(t, rows, "operator API requests per stack, restart → quiet").Goals; len(g) != 1 || g[0] != (Goal{"≤ 1", true}) {
		t.Errorf("restart requests' goal %+v, want ≤ 1 met", g)
	}
	if md := r.Markdown(); !strings.Contains(md, "(restarts that reached that limit: this operator 1 of 3)") {
		t.Errorf("markdown does not name the restart that never went quiet:\n%s", md)
	}
}

func TestMarkdown(t *testing.T) {
	md := sampleReport().Markdown()
	for _, want := range []string{
		"## Operator benchmark, 2026-11-25 14:03 UTC\n",
		"Commit 0123456789ab; 2 CPUs, 24.0 GiB of memory; load average (1, 5, 15 min) 1.49 3.67 6.63 before the run, 2.00 2.00 2.00 after, " +
			"1-minute load average 2.5–4.5 at the start of the operators' passes; the run took 50m0s.",
		"at most 30s after all Deployed (passes that reached that limit: the stock operator 4 of 4, this operator 1 of 4).",
		"| figure | stock helm-operator | this operator | client-go write floor | ours / stock | ours / floor | goal | met |\n",
		"| 200 stacks created at once → all Deployed (median of 3) | 49.6 s (49.5, 49.6, 53.3) | 21.1 s (17.6, 21.1, 27.9) | 3.9 s (3.9, 4.1, 3.7) | 0.43× | 5.41× | ≤ 0.25× stock | **not met** |\n",
		"| … each repetition's burst over its own floor runs (paired; median of 3) | — | 5.15× (4.51, 5.15, 7.54) | — | — | 5.15× | ≤ 2.5× floor | **not met** |\n",
		"| CPU when idle, % of a core, 200 stacks | 0.1% | 0.1% | — | 1.00× | — | ≤ 5% | met |\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if n := strings.Count(md, "\n| ---"); n != 1 {
		t.Errorf("%d tables, want one", n)
	}
}

func TestJSONCarriesTable(t *testing.T) {
	js, err := sampleReport().JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Commit string `json:"commit"`
		Burst  []Pass `json:"burst"`
		Table  []Row  `json:"table"`
	}
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if back.Commit != "0123456789ab" || len(back.Burst) != 6 || len(back.Table) != len(sampleReport().Rows()) {
		t.Errorf("round trip: %+v", back)
	}
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	md, js, err := sampleReport().Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(md, "/bench-2026-11-25T1403Z.md") || !strings.HasSuffix(js, "/bench-2026-11-25T1403Z.json") {
		t.Errorf("paths %s, %s", md, js)
	}
}

func TestMedianAndPercentile(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %g, want %g", c.in, got, c.want)
		}
	}
	var ds []time.Duration
	for i := 10; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Second)
	}
	if p50, p90, p100 := percentile(ds, 50), percentile(ds, 90), percentile(ds, 100); p50 != 5*time.Second || p90 != 9*time.Second || p100 != 10*time.Second {
		t.Errorf("p50 %s p90 %s p100 %s", p50, p90, p100)
	}
	if percentile(nil, 50) != 0 {
		t.Error("percentile of nothing")
	}
}

func TestStampWriter(t *testing.T) {
	var out bytes.Buffer
	w := &stampWriter{w: &out}
	w.Write([]byte("one\ntwo "))
	w.Write([]byte("halves\n"))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[0], " one") || !strings.HasSuffix(lines[1], " two halves") || len(lines[1]) != len("15:04:05 two halves") {
		t.Errorf("stamped %q", out.String())
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestGrowth: a run of several sizes keeps its main table at the first
// size and adds how each figure grows, per stack where it is a total.
func TestGrowth(t *testing.T) {
	r := sampleReport()
	if r.Growth() != nil {
		t.Error("growth of a single size")
	}
	r.Config.Sizes = []int{200, 1000}
	big := func(op Operator, all, cpu float64) Pass {
		return Pass{Operator: op, Own: 1000, AllDeployedSeconds: all, CPUSeconds: cpu, RequestsPerStack: 27, RSSBytes: 200 << 20,
			Restart: &Restart{QuietSeconds: 100, RequestsPerStack: 3, CPUSeconds: 10}}
	}
	r.Burst = append(r.Burst, big(Ours, 210, 120)) // the stock operator did not run at 1000
	r.Floor = append(r.Floor, Floor{Stacks: 1000, Objects: 6000, Seconds: 39})
	if got := rowByPrefix(t, r.Rows(), "200 stacks created at once"); got.Ours != "21.1 s (17.6, 21.1, 27.9)" || got.Floor != "3.9 s (3.9, 4.1, 3.7)" {
		t.Errorf("main table mixes sizes: %+v", got)
	}
	find := func(figure, side string) Growth {
		for _, g := range r.Growth() {
			if g.Figure == figure && g.Side == side {
				return g
			}
		}
		t.Fatalf("no growth row %s, %s", figure, side)
		return Growth{}
	}
	for _, c := range []struct {
		figure, side string
		want         Growth
	}{
		{"create → all Deployed, per stack", "write floor (creates)", Growth{Values: []string{"20 ms", "39 ms"}, Growth: "2.00×"}},
		{"create → all Deployed, per stack", "this operator", Growth{Values: []string{"106 ms", "210 ms"}, Growth: "1.99×"}},
		{"create → all Deployed, per stack", "the stock operator", Growth{Values: []string{"248 ms", "—"}, Growth: "—"}},
		{"CPU per stack, create → all Deployed", "this operator", Growth{Values: []string{"60 ms", "120 ms"}, Growth: "2.00×"}},
		{"create → all Deployed, × its own floor runs (paired)", "this operator", Growth{Values: []string{"5.15×", "5.38×"}, Growth: "1.05×"}},
		{"API requests per stack, restart → quiet", "this operator", Growth{Values: []string{"—", "3.0"}, Growth: "—"}},
		{"CPU per stack, restart → quiet", "this operator", Growth{Values: []string{"—", "10 ms"}, Growth: "—"}},
	} {
		g := find(c.figure, c.side)
		if strings.Join(g.Values, ", ") != strings.Join(c.want.Values, ", ") || g.Growth != c.want.Growth {
			t.Errorf("%s, %s: %v %s, want %v %s", c.figure, c.side, g.Values, g.Growth, c.want.Values, c.want.Growth)
		}
	}
	if md := r.Markdown(); !strings.Contains(md, "| figure | side | 200 stacks | 1000 stacks | growth |\n| --- | --- | --- | --- | --- |\n") {
		t.Errorf("markdown lacks the growth table:\n%s", md)
	}
	for _, g := range r.Growth() {
		if strings.HasPrefix(g.Figure, "cluster CPU per stack: ") {
			t.Errorf("a report without the cluster's CPU by process has a row for it: %+v", g)
		}
	}
}

// TestGrowthByProcess: the cluster's CPU per stack, process by process,
// the floor's beside ours, at each size.
func TestGrowthByProcess(t *testing.T) {
	r := &Report{Config: Config{Sizes: []int{200, 2000}}}
	for _, size := range []int{200, 2000} {
		n := float64(size)
		r.Floor = append(r.Floor, Floor{Stacks: size, ClusterCPUByProcess: map[string]float64{"kube-apiserver": 0.06 * n, "kube-controller-manager": 0.01 * n}})
		r.Burst = append(r.Burst, Pass{Operator: Ours, Own: size, ClusterCPUByProcess: map[string]float64{"kube-apiserver": 0.1 * n, "kube-controller-manager": 0.01 * n * n / 200}})
	}
	var got []string
	for _, g := range r.Growth() {
		if strings.HasPrefix(g.Figure, "cluster CPU per stack: ") {
			got = append(got, fmt.Sprintf("%s | %s | %s | %s", g.Figure, g.Side, strings.Join(g.Values, ", "), g.Growth))
		}
	}
	want := []string{
		"cluster CPU per stack: kube-apiserver | write floor (creates) | 60 ms, 60 ms | 1.00×",
		"cluster CPU per stack: kube-apiserver | this operator | 100 ms, 100 ms | 1.00×",
		"cluster CPU per stack: kube-controller-manager | write floor (creates) | 10 ms, 10 ms | 1.00×",
		"cluster CPU per stack: kube-controller-manager | this operator | 10 ms, 100 ms | 10.00×",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A pass whose stacks were not all Ready within the wait has no time to
// all Ready: the row says so rather than showing a time of zero.
func TestAllReady(t *testing.T) {
	if got, want := allReady([]Pass{{AllReadySeconds: 30}, {AllReadySeconds: 10}, {AllReadySeconds: 20}}, 200), formatSeconds(20); got != want {
		t.Errorf("all Ready = %q, want %q", got, want)
	}
	if got, want := allReady([]Pass{{AllReadySeconds: 30}, {}}, 2000), "not within 21m40s of all Deployed"; got != want {
		t.Errorf("all Ready = %q, want %q", got, want)
	}
}

// TestClusterRows: the cluster's CPU in the burst is set against the
// floor's, and the cores busy add the operator's CPU to the cluster's; a
// report from before the cluster's CPU was measured has neither row.
func TestClusterRows(t *testing.T) {
	r := sampleReport()
	for _, row := range r.Rows() {
		if strings.HasPrefix(row.Figure, "cluster CPU") || strings.HasPrefix(row.Figure, "cores busy") {
			t.Errorf("a report without the cluster's CPU has the row %q", row.Figure)
		}
	}
	for i := range r.Burst {
		r.Burst[i].ClusterCPUSeconds = r.Burst[i].AllDeployedSeconds // a core's worth, plus the operator's 12 s
	}
	for i := range r.Floor {
		r.Floor[i].ClusterCPUSeconds = 6 * float64(i+1) // 6, 12, 18 s over 3.9, 4.1, 3.7 s
	}
	rows := r.Rows()
	if got := rowByPrefix(t, rows, "cluster CPU"); got.Ours != "21.1 s" || got.Stock != "49.6 s" || got.Floor != "12.0 s" || got.VsFloor != "1.76×" {
		t.Errorf("cluster CPU row %+v", got)
	}
	// Ours: (17.6+12)/17.6, (21.1+12)/21.1, (27.9+12)/27.9 → median 1.57;
	// the floor: 6/3.9, 12/4.1, 18/3.7 → median 2.93.
	if got := rowByPrefix(t, rows, "cores busy"); got.Ours != "1.57" || got.Floor != "2.93 (cluster only)" || got.VsStock != "" {
		t.Errorf("cores busy row %+v", got)
	}
}

// TestFloorAfter: a floor run before and after the bursts counts as two
// runs of the size, the ratio is to their median, and the report says how
// the floor ran.
func TestFloorAfter(t *testing.T) {
	r := sampleReport()
	r.Config.Reps, r.Config.FloorAfter = 1, true
	r.Burst = []Pass{r.Burst[0], r.Burst[1]}
	r.Floor = []Floor{{Stacks: 200, Objects: 1200, Seconds: 4.0}, {After: true, Stacks: 200, Objects: 1200, Seconds: 6.0}}
	burst := rowByPrefix(t, r.Rows(), "200 stacks created at once")
	if burst.Floor != "5.0 s (4.0, 6.0)" || burst.VsFloor != "3.52×" {
		t.Errorf("burst row: floor %q, ours/floor %q; want the median of 4.0 and 6.0 s, 17.6 s / 5.0 s", burst.Floor, burst.VsFloor)
	}
	if md := r.Markdown(); !strings.Contains(md, "It runs before and again after each repetition's bursts") {
		t.Errorf("the report does not say the floor ran twice:\n%s", md)
	}
	r.Config.FloorAfter = false
	if strings.Contains(r.Markdown(), "again after") {
		t.Error("a floor run once is said to run twice")
	}
}

// TestFirstReps: a curve may repeat its first size (the main table's)
// more often than the others, and the main table says how often.
func TestFirstReps(t *testing.T) {
	o := Options{Sizes: []int{200, 1000, 2000}, Reps: 1, FirstReps: 3}.withDefaults()
	if got := []int{o.repsAt(200), o.repsAt(1000), o.repsAt(2000)}; !slices.Equal(got, []int{3, 1, 1}) {
		t.Errorf("repetitions at 200, 1000, 2000 = %v, want [3 1 1]", got)
	}
	if got := (Options{Sizes: []int{200, 1000}, Reps: 2}).withDefaults().repsAt(200); got != 2 {
		t.Errorf("without FirstReps, repetitions at the first size = %d, want Reps (2)", got)
	}
	r := sampleReport()
	if got := rowByPrefix(t, r.Rows(), "200 stacks created at once").Figure; !strings.Contains(got, "(median of 3)") {
		t.Errorf("a report from before FirstReps: %q, want the median of Reps (3)", got)
	}
	r.Config.Reps, r.Config.FirstReps = 1, 3
	if got := rowByPrefix(t, r.Rows(), "200 stacks created at once").Figure; !strings.Contains(got, "(median of 3)") {
		t.Errorf("%q, want the median of FirstReps (3)", got)
	}
}
