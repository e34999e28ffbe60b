package controller

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Failures back off. A release that fails (its install, upgrade or dry
// run refused by the API server, the chart or Pod Security) is not rolled
// back: a failed install keeps what it created, a failed upgrade is
// retried forward, never replaced with Force. What it is retried on is
// bounded here: after the nth failure of a stack's generation the next
// attempt waits base×2ⁿ⁻¹, at most failureBackoffMax, and only a new
// generation (a spec change) or drift in one of its objects retries it
// sooner. The stack's Retrying condition says when the next attempt is.
const (
	failureBackoffBase = 5 * time.Second
	failureBackoffMax  = 5 * time.Minute

	conditionRetrying = "Retrying"
	reasonFailed      = "ReleaseFailing"
	reasonRecovered   = "ReleaseSucceeded"
)

// failureBackoff tracks the failing stacks of one controller.
type failureBackoff struct {
	mu    sync.Mutex
	now   func() time.Time
	stack map[types.NamespacedName]*failing
}

type failing struct {
	generation int64
	failures   int
	next       time.Time
	// kicked: drift in one of the stack's objects since the last
	// failure, which is retried at once.
	kicked bool
}

func newFailureBackoff() *failureBackoff {
	return &failureBackoff{now: time.Now, stack: map[types.NamespacedName]*failing{}}
}

// wait says how long a reconcile of the stack at generation must wait
// before it may retry its release (0: go ahead). A new generation or a
// kick ends the wait.
func (b *failureBackoff) wait(key types.NamespacedName, generation int64) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.stack[key]
	if f == nil || f.generation != generation || f.kicked {
		return 0
	}
	return max(f.next.Sub(b.now()), 0)
}

// fail records a failure of the stack's release at generation and returns
// the condition to report and the wait before the next attempt.
func (b *failureBackoff) fail(key types.NamespacedName, generation int64, cause string) (condition, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.stack[key]
	if f == nil || f.generation != generation {
		f = &failing{generation: generation}
		b.stack[key] = f
	}
	f.failures++
	f.kicked = false
	delay := failureBackoffBase << min(f.failures-1, 16)
	delay = min(delay, failureBackoffMax)
	f.next = b.now().Add(delay)
	if len(cause) > maxEventMessage {
		cause = cause[:maxEventMessage] + "…"
	}
	return condition{Type: conditionRetrying, Status: "True", Reason: reasonFailed,
		Message: fmt.Sprintf("attempt %d at generation %d failed; next attempt at %s (in %s), or at once when the spec changes or one of the stack's objects is changed or deleted: %s",
			f.failures, generation, f.next.UTC().Format(time.RFC3339), delay, cause)}, delay
}

// kick lets the next reconcile of a failing stack retry at once.
func (b *failureBackoff) kick(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f := b.stack[key]; f != nil {
		f.kicked = true
	}
}

// succeed forgets the stack's failures; it reports whether there were any.
func (b *failureBackoff) succeed(key types.NamespacedName) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.stack[key]
	delete(b.stack, key)
	return ok
}
