package operatorproc

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis, as the kernel writes
	// it; utime 250 and stime 130 ticks.
	stat := "4242 (helm op) erator) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 130 0 0 20 0 12 0 123456 1000000 5000 18446744073709551615"
	got, err := parseStatCPU([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if want := 3800 * time.Millisecond; got != want {
		t.Errorf("CPU = %s, want %s", got, want)
	}
	for _, bad := range []string{"no parenthesis", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 x 1 2"} {
		if _, err := parseStatCPU([]byte(bad)); err == nil {
			t.Errorf("parseStatCPU(%q) succeeded", bad)
		}
	}
}

func TestParseStatusMemory(t *testing.T) {
	status := "Name:\toperator\nVmPeak:\t 2000000 kB\nVmHWM:\t  190464 kB\nVmRSS:\t  152576 kB\nThreads:\t12\n"
	rss, hwm, err := parseStatusMemory([]byte(status))
	if err != nil {
		t.Fatal(err)
	}
	if rss != 149<<20 || hwm != 186<<20 {
		t.Errorf("RSS %d, HWM %d; want %d, %d", rss, hwm, 149<<20, 186<<20)
	}
	if _, _, err := parseStatusMemory([]byte("Name:\tx\nVmRSS:\t 1 kB\n")); err == nil {
		t.Error("a status without VmHWM parsed")
	}
	if _, _, err := parseStatusMemory([]byte("VmRSS:\t 1 MB\nVmHWM:\t 1 kB\n")); err == nil {
		t.Error("a status in MB parsed")
	}
}

// TestProcess runs a shell as the process: start, usage, log, a restart
// after it exits by itself, and a kill.
func TestProcess(t *testing.T) {
	sh := "/bin/sh"
	if _, err := os.Stat(sh); err != nil {
		t.Skip("no /bin/sh")
	}
	p := New(Spec{Name: "sleeper", Binary: sh, Args: []string{"-c", `echo "ready at start"; exec sleep 60`},
		Log: filepath.Join(t.TempDir(), "sleeper.log")})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Kill(syscall.SIGKILL)
	if err := p.Start(); err == nil {
		t.Error("a running process started twice")
	}
	deadline := time.Now().Add(30 * time.Second)
	for !p.LogLineContaining("at start", "ready") {
		if time.Now().After(deadline) {
			t.Fatalf("no line in the log:\n%s", p.Tail(10))
		}
		time.Sleep(20 * time.Millisecond)
	}
	u, err := p.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if u.RSS <= 0 || u.PeakRSS < u.RSS {
		t.Errorf("usage %+v", u)
	}
	p.Kill(syscall.SIGTERM)
	if p.Running() || p.PID() != 0 {
		t.Error("still running after SIGTERM")
	}
	if _, err := p.Usage(); err == nil {
		t.Error("usage of a stopped process")
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if !p.Running() {
		t.Error("not running after a restart")
	}
	if got := strings.Count(p.Tail(100), "---- "); got != 2 {
		t.Errorf("%d start headers in the log, want 2:\n%s", got, p.Tail(100))
	}
}

func TestLastLines(t *testing.T) {
	if got := LastLines("a\nb\nc\n", 2); got != "b\nc" {
		t.Errorf("LastLines = %q", got)
	}
	if got := LastLines("a", 5); got != "a" {
		t.Errorf("LastLines = %q", got)
	}
}

// TestStockBuild: the stock helm-operator's build in binaries.json is of
// StockVersion, stamped with it, and outputs the one command EnsureStock
// returns.
func TestStockBuild(t *testing.T) {
	src, b, err := localcluster.Source(stockSource, stockBuild)
	if err != nil {
		t.Fatal(err)
	}
	want := "-X github.com/operator-framework/helm-operator-plugins/internal/version.GitVersion=" + StockVersion
	if b.Version != StockVersion || b.LDFlags != want || len(b.Outputs) != 1 || b.Outputs[0] != "helm-operator" {
		t.Errorf("build %+v: want version %s, ldflags %q and the one output helm-operator", b, StockVersion, want)
	}
	if src.ModuleDir != "e2e/binaries/helm-operator" {
		t.Errorf("module dir %q", src.ModuleDir)
	}
}
