package operatorbench

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/testinputs"
)

// readMachine describes this machine from /proc.
func readMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), LoadBefore: loadAverage()}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		m.MemoryBytes = memTotal(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPUModel = cpuModel(string(b))
	}
	return m
}

// memTotal is MemTotal of a /proc/meminfo, in bytes.
func memTotal(meminfo string) int64 {
	for _, line := range strings.Split(meminfo, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// cpuModel is the first "model name" of a /proc/cpuinfo.
func cpuModel(cpuinfo string) string {
	for _, line := range strings.Split(cpuinfo, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// loadAverage is the 1, 5 and 15 minute load average.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// SourceCommit names the commit of the source tree the benchmark runs
// from (see gitCommit). Under Bazel it is "unknown": a test runs in its
// runfiles tree, not in a checkout, and has no git.
func SourceCommit(ctx context.Context) (string, error) {
	if testinputs.UnderBazel() {
		return "unknown", nil
	}
	root, err := localcluster.RepoRoot()
	if err != nil {
		return "", err
	}
	return gitCommit(ctx, root), nil
}

// gitCommit names the commit of the tree at root, marked dirty when
// tracked files differ from it.
func gitCommit(ctx context.Context, root string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	commit := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		commit += "-dirty"
	}
	return commit
}
