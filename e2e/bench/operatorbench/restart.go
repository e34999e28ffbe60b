package operatorbench

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// restartDeadline bounds the wait for a restarted operator to go quiet,
// from the start of its new process: the stock operator reconciles every
// stack once more when it starts, and requeues each a minute later.
const restartDeadline = 2 * time.Minute

// Restart is an operator's restart after its burst has settled and its
// idle window has passed: SIGTERM, then the same binary and flags started
// again on the same cluster, until it is quiet (no reconcile finishing or
// running and no API write for the Quiet period).
type Restart struct {
	// StopSeconds is how long the process took to exit on SIGTERM.
	StopSeconds float64 `json:"stopSeconds"`
	// QuietSeconds runs from the start of the new process to the last
	// time it was seen at work (at least until its stack controller's
	// workers started); Quiet says whether it went quiet before
	// restartDeadline.
	QuietSeconds float64 `json:"quietSeconds"`
	Quiet        bool    `json:"quiet"`
	// The new process's API requests (WritesPerStack of them writes) and
	// reconciles per stack, and its CPU, from its start to the end of the
	// quiet period: everything it did to take over the settled stacks.
	RequestsPerStack   float64 `json:"requestsPerStack"`
	WritesPerStack     float64 `json:"writesPerStack"`
	ReconcilesPerStack float64 `json:"reconcilesPerStack"`
	CPUSeconds         float64 `json:"cpuSeconds"`
}

// restart stops o with SIGTERM, starts it again and measures it until
// quiet. The new process's counters and CPU start from zero, so its
// figures are its totals.
func (b *bench) restart(ctx context.Context, o operatorUnderTest, own int) (*Restart, error) {
	b.logf("restarting %s", o.Name())
	r := &Restart{StopSeconds: o.Kill(syscall.SIGTERM).Seconds()}
	begin := time.Now()
	if err := b.start(ctx, o); err != nil {
		return nil, fmt.Errorf("restarting: %w", err)
	}
	from, err := o.sample(ctx)
	if err != nil {
		return nil, err
	}
	last, active, ok, err := b.settle(ctx, o, from, restartDeadline-time.Since(begin))
	if err != nil {
		return nil, err
	}
	if !ok {
		b.logf("not quiet %s after the restart: counting until then", restartDeadline)
	}
	r.Quiet, r.QuietSeconds = ok, active.Sub(begin).Seconds()
	r.RequestsPerStack = last.Requests / float64(own)
	r.WritesPerStack = last.Writes / float64(own)
	r.ReconcilesPerStack = last.Reconciles / float64(own)
	r.CPUSeconds = last.CPU.Seconds()
	return r, nil
}
