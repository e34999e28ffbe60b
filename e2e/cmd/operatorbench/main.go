// Command operatorbench runs the side-by-side benchmark of this operator,
// the stock helm-operator and the client-go write floor (package
// e2e/bench/operatorbench), prints its table and writes it as Markdown and JSON
// under --out. Run it from inside the repository (`make bench`); it takes
// about an hour with the defaults on 2 cores, plus the first build of the
// cluster's and the stock operator's binaries on a new machine.
//
//	operatorbench [--stacks 200 | --sizes 200,1000] [--reps 3] [--restart-reps 1] [--own 500 --foreign 500 --memory-reps 1] [--idle 3m] [--out out/bench]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/titanml/inference-stack-operator/e2e/bench/operatorbench"
	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "operatorbench:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	d := operatorbench.DefaultOptions()
	o := d
	fs := flag.NewFlagSet("operatorbench", flag.ContinueOnError)
	fs.IntVar(&o.Stacks, "stacks", d.Stacks, "stacks created at once in the burst")
	fs.IntVar(&o.Reps, "reps", d.Reps, "repetitions of the burst, for each operator and the write floor")
	fs.IntVar(&o.FirstReps, "first-reps", 0, "repetitions of the burst at the first size, the main table's (0: --reps)")
	fs.Func("sizes", "several burst sizes, e.g. 200,1000,2000: the burst, floor and restart at each, and how each figure grows (the table is of the first)", func(v string) error {
		o.Sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				return fmt.Errorf("a size is a positive number of stacks: %q", f)
			}
			o.Sizes = append(o.Sizes, n)
		}
		return nil
	})
	fs.IntVar(&o.StockMaxStacks, "stock-max-stacks", 0, "run the stock operator's burst only at sizes up to this (0: all)")
	fs.IntVar(&o.StacksPerNamespace, "stacks-per-namespace", 0, "spread the stacks and the write floor's objects over namespaces of this many stacks each, as a fleet's tenants (0: one namespace)")
	fs.BoolVar(&o.FloorAfter, "floor-after", false, "run each repetition's write floor again after the operators' bursts (the machine's speed drifts); a size's floor is the median of its runs")
	fs.IntVar(&o.RestartReps, "restart-reps", d.RestartReps, "repetitions of the burst after which each operator is restarted and measured until quiet")
	fs.IntVar(&o.Own, "own", d.Own, "own stacks of the memory workload (-1 skips it)")
	fs.IntVar(&o.Foreign, "foreign", d.Foreign, "stacks of another major in the memory workload")
	fs.IntVar(&o.MemoryReps, "memory-reps", d.MemoryReps, "repetitions of the memory workload, for each operator")
	fs.DurationVar(&o.Idle, "idle", d.Idle, "idle window after each burst has settled")
	fs.DurationVar(&o.Quiet, "quiet", d.Quiet, "time without a reconcile after which an operator counts as settled")
	fs.DurationVar(&o.DeployTimeout, "deploy-timeout", d.DeployTimeout, "longest wait for every stack of a burst to be Deployed")
	fs.DurationVar(&o.Profile, "cpu-profile", 0, "profile this much of each burst and write floor (this operator and the API server), into --out as <pass>.cpu.pprof and <pass>.apiserver.cpu.pprof (0: off)")
	out := fs.String("out", "out/bench", "directory for the report and profiles (relative to the repository root)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// Progress on stderr; the table on stdout.
	o.Log = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir := *out
	if !filepath.IsAbs(dir) {
		root, err := localcluster.RepoRoot()
		if err != nil {
			return err
		}
		dir = filepath.Join(root, dir)
	}
	o.ProfileDir = dir
	report, err := operatorbench.Run(ctx, o)
	if err != nil {
		return err
	}
	md, js, err := report.Write(dir)
	if err != nil {
		return err
	}
	fmt.Print(report.Markdown())
	fmt.Fprintf(os.Stderr, "wrote %s and %s\n", md, js)
	return nil
}
