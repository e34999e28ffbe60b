package operatorproc

import (
	"bytes"
	"context"
	"sync"
	"testing"
)

// StartInProcess runs an operator inside the test binary rather than as a
// process: mgr (a controller-runtime manager, set up as the operator's main
// sets it up) starts in the background. The returned function stops it as
// SIGTERM does (in-flight reconciles finish first) and waits for it; the
// test's cleanup stops it too. If the manager returns an error, the test
// fails with "<name> exited: <error>".
func StartInProcess(t testing.TB, name string, mgr interface{ Start(context.Context) error }) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s exited: %v", name, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// LogBuffer holds a log that goroutines write while the test reads it (an
// in-process operator's, for one); it is safe for concurrent use.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *LogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *LogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
