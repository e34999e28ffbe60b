package operatorproc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Usage is what /proc says about a process.
type Usage struct {
	// CPU is the user plus system time the process has used.
	CPU time.Duration
	// RSS is its resident set size now (VmRSS); PeakRSS the largest it has
	// been (VmHWM, the "high water mark").
	RSS, PeakRSS int64
}

// userHZ is the unit of the times in /proc/<pid>/stat. It is USER_HZ, which
// the kernel fixes at 100 for user space on every architecture Go supports
// (sysconf(_SC_CLK_TCK), which would need cgo).
const userHZ = 100

// ReadUsage reads pid's CPU time from /proc/<pid>/stat and its memory from
// /proc/<pid>/status.
func ReadUsage(pid int) (Usage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Usage{}, fmt.Errorf("reading the CPU time of pid %d: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Usage{}, fmt.Errorf("reading the memory of pid %d: %w", pid, err)
	}
	var u Usage
	if u.CPU, err = parseStatCPU(stat); err != nil {
		return Usage{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	if u.RSS, u.PeakRSS, err = parseStatusMemory(status); err != nil {
		return Usage{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return u, nil
}

// parseStatCPU returns utime+stime (fields 14 and 15) of a /proc/<pid>/stat.
func parseStatCPU(stat []byte) (time.Duration, error) {
	// The command name (field 2) is in parentheses and may hold spaces
	// and parentheses; the fields after the last ')' are space-separated,
	// starting with field 3.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc stat %q", stat)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc stat %q", stat)
	}
	var ticks uint64
	for _, s := range f[11:13] { // fields 14 (utime) and 15 (stime)
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parsing CPU ticks %q: %w", s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// parseStatusMemory returns VmRSS and VmHWM of a /proc/<pid>/status, in
// bytes.
func parseStatusMemory(status []byte) (rss, hwm int64, err error) {
	found := map[string]*int64{"VmRSS:": &rss, "VmHWM:": &hwm}
	seen := 0
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line) // "VmRSS:", "123456", "kB"
		if len(f) == 0 {
			continue
		}
		dst, ok := found[f[0]]
		if !ok {
			continue
		}
		if len(f) != 3 || f[2] != "kB" {
			return 0, 0, fmt.Errorf("unexpected /proc status line %q", line)
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parsing %q: %w", line, err)
		}
		*dst = kb * 1024
		seen++
	}
	if seen != len(found) {
		return 0, 0, fmt.Errorf("no VmRSS and VmHWM in /proc status")
	}
	return rss, hwm, nil
}
