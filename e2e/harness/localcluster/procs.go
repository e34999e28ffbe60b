package localcluster

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Process is one running component of the cluster.
type Process struct {
	Name string // component name as kwokctl knows it, e.g. "kube-apiserver"
	PID  int
	// StartTime is the process start time in clock ticks since boot (field
	// 22 of /proc/<pid>/stat). Together with PID it identifies the process
	// even after the PID is reused.
	StartTime uint64
	RSSBytes  int64 // resident set size when last read
}

// procStat reads the state and start time of pid from /proc.
func procStat(pid int) (state byte, start uint64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces;
	// fields after the last ')' are space-separated.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	// fields[0] is field 3 (state); field 22 (starttime) is fields[19].
	if len(fields) < 20 {
		return 0, 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	start, err = strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("parsing start time in /proc/%d/stat: %w", pid, err)
	}
	return fields[0][0], start, nil
}

// alive reports whether p is still running. A zombie counts as exited: the
// components are reparented to whatever reaps orphans on this machine, and
// a zombie holds no ports or files.
func (p Process) alive() bool {
	state, start, err := procStat(p.PID)
	if err != nil {
		return false
	}
	return start == p.StartTime && state != 'Z' && state != 'X'
}

// rss reads the resident set size of p from /proc/<pid>/status.
func (p Process) rss() (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.PID))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest) // "123456 kB"
			if len(f) < 1 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, err
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", p.PID)
}

// kill sends sig to p if it is still the same process.
func (p Process) kill(sig syscall.Signal) error {
	if !p.alive() {
		return nil
	}
	if err := syscall.Kill(p.PID, sig); err != nil && err != syscall.ESRCH {
		return fmt.Errorf("kill %s (pid %d): %w", p.Name, p.PID, err)
	}
	return nil
}

// readPIDFiles reads kwokctl's pid files (<clusterdir>/pids/<component>.pid),
// keeping only live processes that run one of binaries (so a PID reused by
// an unrelated process is never tracked, let alone killed).
func readPIDFiles(clusterDir string, binaries []string) ([]Process, error) {
	files, err := filepath.Glob(filepath.Join(clusterDir, "pids", "*.pid"))
	if err != nil {
		return nil, err
	}
	var procs []Process
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading pid file: %w", err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			return nil, fmt.Errorf("parsing pid file %s: %w", f, err)
		}
		_, start, err := procStat(pid)
		if err != nil {
			// Already gone; nothing to track.
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || !slices.Contains(binaries, exe) {
			continue
		}
		procs = append(procs, Process{Name: strings.TrimSuffix(filepath.Base(f), ".pid"), PID: pid, StartTime: start})
	}
	return procs, nil
}

// self describes the current process.
func self() Process {
	p := Process{Name: filepath.Base(os.Args[0]), PID: os.Getpid()}
	if _, start, err := procStat(p.PID); err == nil {
		p.StartTime = start
	}
	return p
}

// exitedComponents names the components whose pid file exists but whose
// process is gone (or a zombie).
func exitedComponents(clusterDir string) []string {
	var dead []string
	for _, c := range componentPIDs(clusterDir) {
		if state, _, err := procStat(c.pid); err != nil || state == 'Z' || state == 'X' {
			dead = append(dead, c.name)
		}
	}
	return dead
}

// componentPID is a component's process, as its pid file names it.
type componentPID struct {
	name string
	pid  int
}

// componentPIDs reads the pid files of the cluster's components, in the
// order of their names; a file that cannot be read or is being written is
// left out.
func componentPIDs(clusterDir string) []componentPID {
	files, _ := filepath.Glob(filepath.Join(clusterDir, "pids", "*.pid"))
	var out []componentPID
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			continue // being written
		}
		out = append(out, componentPID{name: strings.TrimSuffix(filepath.Base(f), ".pid"), pid: pid})
	}
	return out
}

// reapExitedChildren reaps components listed in pid files that already
// exited and are our children (after a failed start they are not tracked:
// a zombie's executable can no longer be read to identify it, but only our
// own children can be waited for, so nothing else is touched).
func reapExitedChildren(clusterDir string) {
	for _, c := range componentPIDs(clusterDir) {
		if state, _, err := procStat(c.pid); err == nil && state == 'Z' {
			reapChild(c.pid)
		}
	}
}
