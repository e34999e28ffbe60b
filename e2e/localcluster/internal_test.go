package localcluster

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestNodeObject(t *testing.T) {
	taints := func(n *corev1.Node) []string {
		var s []string
		for _, t := range n.Spec.Taints {
			s = append(s, t.Key+"="+t.Value+":"+string(t.Effect))
		}
		return s
	}
	for _, tc := range []struct {
		node       Node
		wantTaints string
		wantGPU    int64
		wantLabels map[string]string
	}{
		{
			node:       Node{Name: "g", GPU: &GPU{Product: ProductH100, Count: 8}},
			wantTaints: "nvidia.com/gpu=present:NoSchedule",
			wantGPU:    8,
			wantLabels: map[string]string{GPUPresentLabel: "true", GPUProductLabel: ProductH100, GPUCountLabel: "8"},
		},
		{
			node:    Node{Name: "g", GPU: &GPU{Product: ProductRTX3060, Count: 1, Untainted: true}},
			wantGPU: 1,
		},
		{
			node:       Node{Name: "cp", ControlPlane: true},
			wantTaints: ControlPlaneLabel + "=:NoSchedule",
			wantLabels: map[string]string{ControlPlaneLabel: ""},
		},
		{node: Node{Name: "cpu", Labels: map[string]string{"pool": "a"}}, wantLabels: map[string]string{"pool": "a"}},
	} {
		n, err := tc.node.object()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(taints(n), ","); got != tc.wantTaints {
			t.Errorf("%s: taints %q, want %q", tc.node.Name, got, tc.wantTaints)
		}
		gpu := n.Status.Allocatable[GPUResource]
		if gpu.Value() != tc.wantGPU || !gpu.Equal(n.Status.Capacity[GPUResource]) {
			t.Errorf("%s: allocatable GPUs %s (capacity %s), want %d", tc.node.Name, gpu.String(), n.Status.Capacity.Name(GPUResource, "").String(), tc.wantGPU)
		}
		for k, v := range tc.wantLabels {
			if got, ok := n.Labels[k]; !ok || got != v {
				t.Errorf("%s: label %s=%q, want %q", tc.node.Name, k, got, v)
			}
		}
		if n.Annotations[KwokNodeAnnotation] != "fake" {
			t.Errorf("%s: missing %s annotation", tc.node.Name, KwokNodeAnnotation)
		}
		if cpu := n.Status.Capacity[corev1.ResourceCPU]; cpu.IsZero() {
			t.Errorf("%s: no cpu capacity", tc.node.Name)
		}
	}
}

// TestCachedBuildOnce checks that concurrent Ensure calls build once and
// share the result, using a tiny module so it runs in about a second.
func TestCachedBuildOnce(t *testing.T) {
	t.Setenv("INFERENCE_STACK_CACHE", t.TempDir())
	mod := t.TempDir()
	for name, content := range map[string]string{
		"go.mod":  "module example.com/hello\n\ngo 1.24\n",
		"go.sum":  "",
		"main.go": "package main\n\nfunc main() {}\n",
	} {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b := CachedBuild{Name: "hello", Version: "v1", ModuleDir: mod, Packages: []string{"."}, Outputs: []string{"hello"}}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		logs bytes.Buffer
		dirs = make([]string, 4)
	)
	for i := range dirs {
		wg.Go(func() {
			var log bytes.Buffer
			dir, err := b.Ensure(context.Background(), &log)
			if err != nil {
				t.Error(err)
			}
			dirs[i] = dir
			mu.Lock()
			logs.Write(log.Bytes())
			mu.Unlock()
		})
	}
	wg.Wait()
	if n := strings.Count("\n"+logs.String(), "\nbuilding hello"); n != 1 {
		t.Errorf("built %d times, want 1; log:\n%s", n, logs.String())
	}
	for _, d := range dirs {
		if d != dirs[0] {
			t.Errorf("different dirs %q and %q", d, dirs[0])
		}
	}
	if _, err := os.Stat(filepath.Join(dirs[0], "hello")); err != nil {
		t.Error(err)
	}
	// Changing the module changes the cache key.
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module example.com/hello\n\ngo 1.25\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, err := b.Ensure(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if dir == dirs[0] {
		t.Errorf("cache entry not invalidated by a go.mod change")
	}
}

func TestKubernetesLDFlags(t *testing.T) {
	got := kubernetesLDFlags()
	for _, want := range []string{
		"-X k8s.io/component-base/version.gitVersion=v1.34.4",
		"-X k8s.io/component-base/version.gitMajor=1",
		"-X k8s.io/component-base/version.gitMinor=34",
		"-X k8s.io/client-go/pkg/version.gitTreeState=clean",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("ldflags %q lack %q", got, want)
		}
	}
}
