// Package operatorproc builds operator binaries and runs them as separate
// processes against a cluster, as a pod would run them: this repository's
// operator for a given major, and the stock helm-operator it replaces
// (helm-operator-plugins' `helm-operator run`, from a pinned wrapper module).
// A Process can be killed with any signal, restarted with the same log file,
// and read from /proc (CPU time, resident memory). StartInProcess runs an
// operator inside the test binary instead. The operator's lifecycle tests,
// the migration's tests and the benchmark (e2e/bench/operatorbench) share it.
package operatorproc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/testinputs"
)

// versionVar is the variable the release build stamps the operator's
// version into; the major the operator reconciles derives from it.
const versionVar = inferencestack.ModulePath + "/operator/internal/version.Version"

// SourceMajor is the major of this source tree's VERSION ("v0"): the major
// an unstamped build reconciles.
func SourceMajor() (string, error) {
	m, err := inferencestack.MajorOf(inferencestack.Version())
	if err != nil {
		return "", fmt.Errorf("the major of VERSION: %w", err)
	}
	return m, nil
}

// Build compiles this repository's operator (`go build ./operator`) into
// dir as operator-<major>. The source tree's own major is built as is; any
// other major "vN" is the same source stamped N.0.0, as the next major's
// release would be, so it reconciles the stacks labelled vN.
func Build(ctx context.Context, dir, major string) (string, error) {
	n, ok := strings.CutPrefix(major, "v")
	if !ok || n == "" || strings.Trim(n, "0123456789") != "" {
		return "", fmt.Errorf("building the operator: major %q is not v<N>", major)
	}
	root, err := localcluster.RepoRoot()
	if err != nil {
		return "", err
	}
	source, err := SourceMajor()
	if err != nil {
		return "", err
	}
	ldflags := ""
	if major != source {
		ldflags = "-X " + versionVar + "=" + n + ".0.0"
	}
	out := filepath.Join(dir, "operator-"+major)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, "./operator")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the %s operator: %w\n%s", major, err, b)
	}
	return out, nil
}

// Builds builds each major's operator at most once into Dir, for callers
// (such as a test binary) that start many processes of the same builds.
// Under `bazel test` nothing is built: each major's operator is the
// prebuilt binary the test's BUILD file passes as a runfile (a rules_go
// go_binary, stamped with x_defs as Build stamps it), listed as major=path
// in testinputs.OperatorBinaries (see e2e/BUILD.bazel).
// It is safe for concurrent use.
type Builds struct {
	Dir string

	mu   sync.Mutex
	bins map[string]string
}

// Binary returns the operator for major: under Bazel the prebuilt runfile,
// otherwise the one built into Dir, building it on first use.
func (b *Builds) Binary(ctx context.Context, major string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bin, ok := b.bins[major]; ok {
		return bin, nil
	}
	bin, found, err := prebuilt(major)
	if !found && err == nil {
		bin, err = Build(ctx, b.Dir, major)
	}
	if err != nil {
		return "", err
	}
	if b.bins == nil {
		b.bins = map[string]string{}
	}
	b.bins[major] = bin
	return bin, nil
}

// prebuilt returns the operator binary of major that a test's BUILD file
// passes under Bazel (testinputs.OperatorBinaries). ok is false, and err
// nil, outside Bazel when the variable is unset: the caller builds.
func prebuilt(major string) (bin string, ok bool, err error) {
	bins, ok, err := testinputs.Pairs(testinputs.OperatorBinaries)
	if !ok || err != nil {
		return "", ok, err
	}
	bin, found := bins[major]
	if !found {
		have := make([]string, 0, len(bins))
		for k := range bins {
			have = append(have, k)
		}
		sort.Strings(have)
		return "", true, fmt.Errorf("%s has no %s operator binary (it has %s): add it to the test's data and env", testinputs.OperatorBinaries, major, strings.Join(have, ", "))
	}
	return bin, true, nil
}

// Spec describes a process to run.
type Spec struct {
	// Name identifies the process in messages.
	Name string
	// Binary and Args are what is executed.
	Binary string
	Args   []string
	// Env is added to this process's environment (e.g. KUBECONFIG for a
	// command without a --kubeconfig flag).
	Env []string
	// Log is the file that receives the process's stdout and stderr; each
	// start appends to it after a header line.
	Log string
}

// Process is one operator process, restartable. Its methods are safe for
// concurrent use.
type Process struct {
	spec Spec

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan error
}

// New returns a process of spec, not yet started.
func New(spec Spec) *Process { return &Process{spec: spec} }

// Name returns the process's name.
func (p *Process) Name() string { return p.spec.Name }

// LogPath returns the path of the process's log file.
func (p *Process) LogPath() string { return p.spec.Log }

// Start starts the process. Starting a running process is an error.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done: // exited by itself: start it again
		default:
			return fmt.Errorf("starting %s: already running as pid %d", p.spec.Name, p.cmd.Process.Pid)
		}
	}
	f, err := os.OpenFile(p.spec.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("starting %s: %w", p.spec.Name, err)
	}
	fmt.Fprintf(f, "---- %s starting %s\n", time.Now().Format(time.RFC3339Nano), p.spec.Name)
	cmd := exec.Command(p.spec.Binary, p.spec.Args...)
	cmd.Env = append(os.Environ(), p.spec.Env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", p.spec.Name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); f.Close() }()
	p.cmd, p.done = cmd, done
	return nil
}

// Kill sends sig and waits for the process to exit (SIGKILL after two
// minutes); it reports how long the exit took. A process that is not
// running is left alone.
func (p *Process) Kill(sig syscall.Signal) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	start := time.Now()
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd = nil
	return time.Since(start)
}

// Signal sends sig without waiting (SIGSTOP and SIGCONT stall and resume
// the process as a long GC pause or CPU starvation would).
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("signalling %s: not running", p.spec.Name)
	}
	return p.cmd.Process.Signal(sig)
}

// Running reports whether the process is alive.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case err := <-p.done:
		p.done <- err
		return false
	default:
		return true
	}
}

// PID returns the process id, or 0 if the process is not running.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// LogContains reports whether the log holds s.
func (p *Process) LogContains(s string) bool {
	b, _ := os.ReadFile(p.spec.Log)
	return bytes.Contains(b, []byte(s))
}

// LogLineContaining reports whether one line of the log holds every one of
// parts, whatever their order (e.g. a message and a key of a JSON log line).
func (p *Process) LogLineContaining(parts ...string) bool {
	b, _ := os.ReadFile(p.spec.Log)
	for _, line := range bytes.Split(b, []byte("\n")) {
		all := true
		for _, s := range parts {
			all = all && bytes.Contains(line, []byte(s))
		}
		if all {
			return true
		}
	}
	return false
}

// Tail returns the last n lines of the log.
func (p *Process) Tail(n int) string {
	b, err := os.ReadFile(p.spec.Log)
	if err != nil {
		return err.Error()
	}
	return LastLines(string(b), n)
}

// WriteTail writes the last n lines of the log to w under a heading naming
// the process, for failure reports.
func (p *Process) WriteTail(w io.Writer, n int) {
	fmt.Fprintf(w, "==== %s (last %d lines of %s) ====\n%s\n", p.spec.Name, n, p.spec.Log, p.Tail(n))
}

// Usage reads the process's CPU time and memory from /proc.
func (p *Process) Usage() (Usage, error) {
	pid := p.PID()
	if pid == 0 {
		return Usage{}, fmt.Errorf("reading the usage of %s: not running", p.spec.Name)
	}
	return ReadUsage(pid)
}

// LastLines returns the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
