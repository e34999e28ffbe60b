// Package poll is the one way the tests and their harness wait: a
// condition checked on an interval until it holds, fails, or its deadline
// passes, with the condition's last reason in the error, so a timeout says
// what was still missing.
package poll

import (
	"context"
	"fmt"
	"time"
)

// Cond reports whether what is awaited holds and, when it does not, why
// (the reason a timeout reports). An error ends the wait at once.
type Cond func(ctx context.Context) (done bool, why string, err error)

// Check adapts a condition that cannot fail.
func Check(f func() (bool, string)) Cond {
	return func(context.Context) (bool, string, error) {
		ok, why := f()
		return ok, why, nil
	}
}

// Option tunes Until.
type Option func(*options)

type options struct {
	interval time.Duration
	alive    func() error
}

// Every sets how often the condition is checked (default 100ms).
func Every(d time.Duration) Option { return func(o *options) { o.interval = d } }

// While ends the wait at once when alive reports an error: a process the
// condition depends on exited, so waiting longer cannot help.
func While(alive func() error) Option { return func(o *options) { o.alive = alive } }

// Until checks cond (first at once, then every interval) until it holds,
// returns an error, timeout passes or ctx ends. A timeout <= 0 waits as
// long as ctx allows.
func Until(ctx context.Context, timeout time.Duration, what string, cond Cond, opts ...Option) error {
	o := options{interval: 100 * time.Millisecond}
	for _, opt := range opts {
		opt(&o)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	last := ""
	for {
		if o.alive != nil {
			if err := o.alive(); err != nil {
				return fmt.Errorf("waiting for %s: %w", what, err)
			}
		}
		done, why, err := cond(ctx)
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if done {
			return nil
		}
		last = why
		select {
		case <-ctx.Done():
			if timeout > 0 && ctx.Err() == context.DeadlineExceeded {
				return fmt.Errorf("timed out after %s waiting for %s (last: %s)", timeout, what, last)
			}
			return fmt.Errorf("waiting for %s: %w (last: %s)", what, ctx.Err(), last)
		case <-tick.C:
		}
	}
}
