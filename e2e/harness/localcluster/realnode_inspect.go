package localcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ContainerProcess is what the host sees of a container's main process on
// the real node: the identity and filesystem the runtime gave it, and its
// memory cgroup's accounting.
type ContainerProcess struct {
	PID int
	// UID and GID are the effective ids.
	UID, GID int
	// CapEff is the effective capability set.
	CapEff uint64
	// RootReadOnly reports whether its root filesystem is mounted
	// read-only.
	RootReadOnly bool
	// MemoryUsage, MemoryPeak and MemoryLimit are the memory cgroup's
	// current usage, high-water mark and limit in bytes.
	MemoryUsage, MemoryPeak, MemoryLimit int64
}

// InspectContainer reads the main process of the container with the
// given CRI id (a pod status's containerID, with or without its
// "containerd://" prefix) on the real node.
func (c *Cluster) InspectContainer(containerID string) (*ContainerProcess, error) {
	n := c.st.RealNode
	if n == nil {
		return nil, errors.New("the cluster has no real node")
	}
	pid, dir, err := n.containerPID(containerID)
	if err != nil {
		return nil, err
	}
	cp := &ContainerProcess{PID: pid}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cp.PID))
	if err != nil {
		return nil, err
	}
	for _, l := range strings.Split(string(status), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		switch f[0] {
		case "Uid:":
			cp.UID, _ = strconv.Atoi(f[2])
		case "Gid:":
			cp.GID, _ = strconv.Atoi(f[2])
		}
	}
	for _, l := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(l, "CapEff:"); ok {
			cp.CapEff, _ = strconv.ParseUint(strings.TrimSpace(rest), 16, 64)
		}
	}
	mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", cp.PID))
	if err != nil {
		return nil, err
	}
	for _, l := range strings.Split(string(mi), "\n") {
		f := strings.Fields(l)
		if len(f) > 5 && f[4] == "/" {
			cp.RootReadOnly = slices.Contains(strings.Split(f[5], ","), "ro")
		}
	}
	readInt := func(name string) int64 {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return -1
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return -1
		}
		return v
	}
	if cgroupV2() {
		cp.MemoryUsage, cp.MemoryPeak, cp.MemoryLimit = readInt("memory.current"), readInt("memory.peak"), readInt("memory.max")
	} else {
		cp.MemoryUsage, cp.MemoryPeak, cp.MemoryLimit = readInt("memory.usage_in_bytes"), readInt("memory.max_usage_in_bytes"), readInt("memory.limit_in_bytes")
	}
	return cp, nil
}
