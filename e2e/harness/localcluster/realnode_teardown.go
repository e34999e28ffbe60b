package localcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/titanml/inference-stack-operator/e2e/harness/poll"
)

// nodeProcessNames are the components startNodeProcess runs.
var nodeProcessNames = []string{"kubelet", "kube-proxy", "containerd"}

// stopRealNode removes everything the real node created, in an order that
// leaves nothing behind: the kubelet and kube-proxy first (so nothing is
// restarted), every container through containerd (whose shims then exit
// and unmount the containers' root filesystems), containerd, any mount
// left under the node's directory, the network namespace (which takes the
// veth pair, the pods' bridge, kube-proxy's and the kubelet's iptables
// chains and the host's route to the pods with it), the cgroups, and the
// kubelet's symlinks in /var/log/containers and libcni's cache entries.
func (c *Cluster) stopRealNode(ctx context.Context) error {
	n := c.st.RealNode
	if n == nil {
		return nil
	}
	var errs []error
	stop := func(names ...string) {
		var procs []Process
		for _, p := range c.st.Processes {
			if slices.Contains(names, p.Name) && p.alive() {
				procs = append(procs, p)
				_ = p.kill(syscall.SIGTERM)
			}
		}
		waitCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if err := poll.Until(waitCtx, 0, strings.Join(names, ", ")+" to exit", func(context.Context) (bool, string, error) {
			for _, p := range procs {
				if state, start, err := procStat(p.PID); err == nil && start == p.StartTime && state == 'Z' {
					reapChild(p.PID)
				}
			}
			return !slices.ContainsFunc(procs, Process.alive), "", nil
		}); err != nil {
			for _, p := range procs {
				_ = p.kill(syscall.SIGKILL)
			}
			killCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := poll.Until(killCtx, 0, strings.Join(names, ", ")+" to die", func(context.Context) (bool, string, error) {
				for _, p := range procs {
					reapChild(p.PID)
				}
				return !slices.ContainsFunc(procs, Process.alive), "", nil
			}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	stop("kubelet", "kube-proxy")
	if slices.ContainsFunc(c.st.Processes, func(p Process) bool { return p.Name == "containerd" && p.alive() }) {
		if err := n.removeContainers(ctx); err != nil {
			fmt.Fprintf(c.log, "removing the real node's containers through containerd: %v\n", err)
		}
	}
	// Whatever is left (containerd died, a task would not go): kill the
	// containers with runc and the shims by their containerd address.
	n.forceRemoveContainers(ctx)
	stop("containerd")
	for _, pid := range n.shims() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		reapChild(pid)
	}
	if err := unmountUnder(n.Dir); err != nil {
		errs = append(errs, err)
	}
	if _, err := os.Stat(n.netnsPath()); err == nil {
		if err := run(ctx, "ip", "netns", "delete", n.NetNS); err != nil {
			errs = append(errs, err)
		}
	}
	// The host end normally goes with the namespace (asynchronously); a
	// failed setup may have left it alone.
	if _, err := net.InterfaceByName(n.HostIf); err == nil {
		if err := run(ctx, "ip", "link", "delete", n.HostIf); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
			errs = append(errs, err)
		}
	}
	if err := n.removeForward(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := n.removeCgroups(ctx); err != nil {
		errs = append(errs, err)
	}
	for _, l := range append(n.containerLogLinks(), n.cniCacheEntries()...) {
		if err := os.Remove(l); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cniCacheDir is where libcni (inside containerd) caches every attachment's
// result, a fixed path containerd does not let us move.
const cniCacheDir = "/var/lib/cni/results"

// cniCacheEntries lists the CNI result cache files of this node's pod
// sandboxes: containerd only removes them when a sandbox's network is torn
// down through the CRI, which a teardown that kills everything skips. The
// files are named <network>-<sandbox id>-<interface>.
func (n *realNode) cniCacheEntries() []string {
	n.Sandboxes = append(n.Sandboxes, n.sandboxIDs()...)
	slices.Sort(n.Sandboxes)
	n.Sandboxes = slices.Compact(n.Sandboxes)
	entries, _ := os.ReadDir(cniCacheDir)
	var out []string
	for _, e := range entries {
		for _, id := range n.Sandboxes {
			if strings.Contains(e.Name(), "-"+id+"-") {
				out = append(out, filepath.Join(cniCacheDir, e.Name()))
				break
			}
		}
	}
	return out
}

// sandboxIDs lists the pod sandboxes containerd's CRI plugin has created
// (one directory each under its root).
func (n *realNode) sandboxIDs() []string {
	entries, _ := os.ReadDir(filepath.Join(n.containerdDir(), "root", "io.containerd.grpc.v1.cri", "sandboxes"))
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.Name())
	}
	return ids
}

// removeContainers force-deletes every task (kill, then delete, which
// makes the shim unmount the root filesystem and exit) and container in
// containerd's k8s.io namespace.
func (n *realNode) removeContainers(ctx context.Context) error {
	ctr := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.socket(), "--namespace", "k8s.io"}, args...)...).CombinedOutput()
		return string(out), err
	}
	var errs []error
	for _, kind := range []string{"tasks", "containers"} {
		out, err := ctr(kind, "list", "-q")
		if err != nil {
			return fmt.Errorf("ctr %s list: %w: %s", kind, err, out)
		}
		for _, id := range strings.Fields(out) {
			args := []string{kind, "delete", id}
			if kind == "tasks" {
				args = []string{"tasks", "delete", "--force", id}
			}
			// A sandbox's shim may go away with its last task ("ttrpc:
			// closed"): forceRemoveContainers deals with what is left.
			if out, err := ctr(args...); err != nil && !strings.Contains(out, "not found") && !strings.Contains(out, "ttrpc: closed") {
				errs = append(errs, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out)))
			}
		}
	}
	return errors.Join(errs...)
}

// forceRemoveContainers deletes with runc whatever containers are left
// under the node's runc root (this kills their processes and removes
// their cgroups).
func (n *realNode) forceRemoveContainers(ctx context.Context) {
	roots, _ := os.ReadDir(n.runcRoot())
	for _, r := range roots {
		root := filepath.Join(n.runcRoot(), r.Name())
		out, err := exec.CommandContext(ctx, "runc", "--root", root, "list", "-q").Output()
		if err != nil {
			continue
		}
		for _, id := range strings.Fields(string(out)) {
			_ = exec.CommandContext(ctx, "runc", "--root", root, "delete", "--force", id).Run()
		}
	}
}

// shims lists the containerd shims serving this node's containerd (their
// command line names its socket).
func (n *realNode) shims() []int {
	var pids []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") && slices.Contains(args, n.socket()) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unmountUnder(dir string) error {
	var errs []error
	for range 3 {
		mps := mountsUnder(dir)
		if len(mps) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, mp := range mps {
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", mp, err))
			}
		}
	}
	if mps := mountsUnder(dir); len(mps) > 0 {
		errs = append(errs, fmt.Errorf("still mounted: %s", strings.Join(mps, ", ")))
	}
	return errors.Join(errs...)
}

// removeCgroups removes the node's cgroup subtree in every hierarchy,
// deepest first (a cgroup can only be removed once it has no children and
// no tasks; killed containers may take a moment to leave theirs).
func (n *realNode) removeCgroups(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return poll.Until(ctx, 0, "the real node's cgroups to be removed", func(context.Context) (bool, string, error) {
		left := n.cgroupsLeft()
		for _, d := range left {
			_ = syscall.Rmdir(d)
		}
		left = n.cgroupsLeft()
		return len(left) == 0, strings.Join(left, ", "), nil
	})
}

// cgroupsLeft lists the node's cgroup directories, deepest first.
func (n *realNode) cgroupsLeft() []string {
	var dirs []string
	for _, h := range cgroupHierarchies() {
		root := filepath.Join(h, n.CgroupRoot)
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return dirs
}

// containerLogLinks lists the kubelet's symlinks in /var/log/containers
// (a fixed path) that point into this node's directory.
func (n *realNode) containerLogLinks() []string {
	entries, _ := os.ReadDir("/var/log/containers")
	var out []string
	for _, e := range entries {
		p := filepath.Join("/var/log/containers", e.Name())
		if t, err := os.Readlink(p); err == nil && strings.HasPrefix(t, n.Dir+"/") {
			out = append(out, p)
		}
	}
	return out
}

// RealNodeLeftovers lists what the real node left on the machine after
// Stop: processes, mounts, the network namespace, interfaces, routes,
// iptables rules naming its addresses, cgroups and log links. Empty means
// a clean teardown. A test calls it after Stop.
func (c *Cluster) RealNodeLeftovers() []string {
	n := c.st.RealNode
	if n == nil {
		return nil
	}
	var left []string
	for _, p := range c.st.Processes {
		if slices.Contains(nodeProcessNames, p.Name) && p.alive() {
			left = append(left, fmt.Sprintf("process %s (pid %d)", p.Name, p.PID))
		}
	}
	for _, pid := range n.shims() {
		left = append(left, fmt.Sprintf("containerd shim pid %d", pid))
	}
	for _, mp := range mountsUnder(n.Dir) {
		left = append(left, "mount "+mp)
	}
	if _, err := os.Stat(n.netnsPath()); err == nil {
		left = append(left, "network namespace "+n.NetNS)
	}
	if _, err := net.InterfaceByName(n.HostIf); err == nil {
		left = append(left, "interface "+n.HostIf)
	}
	if out, err := exec.Command("ip", "-4", "-o", "route", "show", "table", "all").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, n.PodCIDR) || strings.Contains(l, n.HostIf) {
				left = append(left, "route "+strings.TrimSpace(l))
			}
		}
	}
	for _, tool := range []string{"iptables-save", "iptables-legacy-save"} {
		out, err := exec.Command(tool).Output()
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, n.HostIP+"/") || strings.Contains(l, n.NodeIP+"/") || strings.Contains(l, n.PodCIDR) || strings.Contains(l, n.natChain()) || strings.Contains(l, n.HostIf) {
				left = append(left, tool+": "+l)
			}
		}
	}
	for _, d := range n.cgroupsLeft() {
		left = append(left, "cgroup "+d)
	}
	for _, l := range n.containerLogLinks() {
		left = append(left, "log link "+l)
	}
	for _, f := range n.cniCacheEntries() {
		left = append(left, "CNI cache entry "+f)
	}
	return left
}

// nodeLogFiles maps the node's components to their logs.
func (n *realNode) nodeLogFiles() map[string]string {
	m := map[string]string{}
	for _, name := range nodeProcessNames {
		m[name] = filepath.Join(n.logDir(), name+".log")
	}
	return m
}
