package localcluster

import "syscall"

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER from <linux/prctl.h>

// becomeSubreaper makes this process the reaper of its orphaned
// descendants. kwokctl forks the components into their own sessions and
// exits, so they would otherwise be reparented to PID 1, which in containers
// and sandboxes often never reaps them, leaving zombies. The setting is
// process-wide and harmless for a test binary or the localcluster command:
// it only changes who may wait for orphans.
func becomeSubreaper() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

// reapChild waits for pid without blocking if it is an exited child of
// this process; otherwise (not our child, still running) it does nothing.
func reapChild(pid int) {
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
}
