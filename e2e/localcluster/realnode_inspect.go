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
	id := strings.TrimPrefix(containerID, "containerd://")
	v2 := false
	if _, err := os.Stat(filepath.Join(cgroupV1Root, "cgroup.controllers")); err == nil {
		v2 = true
	}
	memRoot := filepath.Join(cgroupV1Root, "memory", n.CgroupRoot)
	if v2 {
		memRoot = filepath.Join(cgroupV1Root, n.CgroupRoot)
	}
	var dir string
	_ = filepath.WalkDir(memRoot, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == id {
			dir = p
			return filepath.SkipAll
		}
		return nil
	})
	if dir == "" {
		return nil, fmt.Errorf("no memory cgroup for container %s under %s", id, memRoot)
	}
	procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	fields := strings.Fields(string(procs))
	if len(fields) == 0 {
		return nil, fmt.Errorf("container %s has no process", id)
	}
	cp := &ContainerProcess{}
	// The container's init process has the smallest pid of its cgroup.
	for _, f := range fields {
		if pid, err := strconv.Atoi(f); err == nil && (cp.PID == 0 || pid < cp.PID) {
			cp.PID = pid
		}
	}
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
	if v2 {
		cp.MemoryUsage, cp.MemoryPeak, cp.MemoryLimit = readInt("memory.current"), readInt("memory.peak"), readInt("memory.max")
	} else {
		cp.MemoryUsage, cp.MemoryPeak, cp.MemoryLimit = readInt("memory.usage_in_bytes"), readInt("memory.max_usage_in_bytes"), readInt("memory.limit_in_bytes")
	}
	return cp, nil
}
