package operatorproc

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
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

// LogTo sends controller-runtime's log to w from now on. controller-runtime
// keeps the first logger it is given and ignores later ones (and, if none
// was given within 30 s of its first log, drops every log), so the
// in-process operators of one test binary all log through one logger, set
// by the first call (a test binary makes it before its tests run), whose
// output goes to the operator started last (tests that start them run one
// at a time).
func LogTo(w io.Writer) {
	controllerLog.mu.Lock()
	controllerLog.w = w
	controllerLog.mu.Unlock()
	setLogger.Do(func() { ctrl.SetLogger(zap.New(zap.WriteTo(controllerLog), zap.UseDevMode(true))) })
}

var (
	controllerLog = &logSwitch{w: io.Discard}
	setLogger     sync.Once
)

type logSwitch struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *logSwitch) Write(p []byte) (int, error) {
	s.mu.Lock()
	w := s.w
	s.mu.Unlock()
	return w.Write(p)
}
