package localcluster

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// TestBinariesJSON: binaries.json, which both the Go-native harness and
// the Bazel module extension read, agrees with the pinned versions and the
// version ldflags, and every wrapper module it names exists.
func TestBinariesJSON(t *testing.T) {
	srcs, err := BinarySources()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"kubernetes": KubernetesVersion, "kubernetes-node": KubernetesVersion, "etcd": EtcdVersion, "kwok": KwokVersion}
	outputs := map[string]string{}
	for _, s := range srcs {
		if (s.ModuleDir == "") == (s.Module == "") {
			t.Errorf("source %s: exactly one of module_dir and module must be set", s.Name)
		}
		if s.Module != "" && (s.Version == "" || !strings.HasPrefix(s.Sum, "h1:")) {
			t.Errorf("source %s: a downloaded module needs a version and an h1: sum", s.Name)
		}
		if s.ModuleDir != "" {
			for _, f := range []string{"go.mod", "go.sum"} {
				if _, err := os.Stat(filepath.Join("..", "..", "..", filepath.FromSlash(s.ModuleDir), f)); err != nil {
					t.Errorf("source %s: %v", s.Name, err)
				}
			}
		}
		for _, b := range s.Builds {
			if v, ok := want[b.Name]; ok && b.Version != v {
				t.Errorf("build %s: version %s, want %s", b.Name, b.Version, v)
			}
			if strings.HasPrefix(b.Name, "kubernetes") && b.LDFlags != kubernetesLDFlags() {
				t.Errorf("build %s: ldflags %q, want %q", b.Name, b.LDFlags, kubernetesLDFlags())
			}
			if len(b.Packages) == 0 || len(b.Packages) != len(b.Outputs) {
				t.Errorf("build %s: %d packages, %d outputs", b.Name, len(b.Packages), len(b.Outputs))
			}
			for _, o := range b.Outputs {
				if prev, dup := outputs[o]; dup {
					t.Errorf("output %s of %s and %s: binaries are found by file name, which must be unique", o, prev, b.Name)
				}
				outputs[o] = b.Name
			}
		}
	}
	for _, name := range controlPlane {
		if outputs[name] == "" {
			t.Errorf("no build outputs %s", name)
		}
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

func TestKwokctlConfig(t *testing.T) {
	c := &Cluster{st: state{Name: "x", Dir: t.TempDir()}}
	plain, err := c.kwokctlConfig(Options{})
	if err != nil {
		t.Fatal(err)
	}
	// KWOK manages only its own nodes, with or without a real node.
	for _, want := range []string{`"key": "manage-all-nodes"`, `"value": "false"`, `"manage-nodes-with-annotation-selector"`, `"kwok.x-k8s.io/node=fake"`, `"bindAddress": "127.0.0.1"`} {
		if !strings.Contains(string(plain), want) {
			t.Errorf("kwokctl config lacks %s:\n%s", want, plain)
		}
	}
	if strings.Contains(string(plain), "kubelet-client-certificate") {
		t.Errorf("kwokctl config without a real node configures kubelet clients:\n%s", plain)
	}
	c.st.RealNode = &realNode{ID: "abc123", HostIP: "10.213.7.1", NodeIP: "10.213.7.2"}
	withNode, err := c.kwokctlConfig(Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"kubelet-client-certificate"`, `"kubelet-certificate-authority"`, `"advertise-address"`, `"10.213.7.1"`, `"enable-aggregator-routing"`, `"bindAddress": "127.0.0.1"`, `"` + kubernetesServiceIP + `"`} {
		if !strings.Contains(string(withNode), want) {
			t.Errorf("kwokctl config with a real node lacks %s:\n%s", want, withNode)
		}
	}
	if c.st.RealNode.APIServerPort == 0 {
		t.Error("the API server port forwarded to the node was not recorded")
	}
}

func TestRealNodeConfigs(t *testing.T) {
	n := &realNode{Name: RealNodeName, ID: "abc123", Dir: "/work/node", NodeIP: "10.213.7.2", HostIP: "10.213.7.1", PodCIDR: "10.214.7.0/24", CgroupRoot: "/isk-abc123", Network: "isk-abc123"}
	cfg := n.containerdConfig()
	for _, want := range []string{"restrict_oom_score_adj = true", `sandbox_image = "` + PauseImage + `"`, `config_path = "/work/node/containerd/certs.d"`, `Root = "/work/node/runc"`, `address = "/work/node/containerd/containerd.sock"`} {
		if !strings.Contains(cfg, want) {
			t.Errorf("containerd config lacks %s:\n%s", want, cfg)
		}
	}
	cni := string(n.cniConfig())
	for _, want := range []string{`"subnet": "10.214.7.0/24"`, `"gateway": "10.214.7.1"`, `"dataDir": "/work/node/cni/ipam"`, `"name": "isk-abc123"`} {
		if !strings.Contains(cni, want) {
			t.Errorf("CNI config lacks %s:\n%s", want, cni)
		}
	}
	kc := n.kubeletConfig("/ca.crt", "/certs")
	auth := kc["authentication"].(map[string]any)
	if auth["anonymous"].(map[string]any)["enabled"] != false || kc["authorization"].(map[string]any)["mode"] != "Webhook" || kc["readOnlyPort"] != 0 {
		t.Errorf("kubelet must refuse anonymous requests, authorise by webhook and have no read-only port: %v", kc)
	}
	if kc["cgroupRoot"] != "/isk-abc123" || kc["resolvConf"] != "" {
		t.Errorf("kubelet cgroup root %v, resolvConf %q", kc["cgroupRoot"], kc["resolvConf"])
	}
}

func TestOverlapsAny(t *testing.T) {
	nets, err := parseNets("10.213.7.0/24", "192.168.1.5/32")
	if err != nil {
		t.Fatal(err)
	}
	for cidr, want := range map[string]bool{"10.213.7.0/30": true, "10.213.0.0/16": true, "10.213.8.0/30": false, "192.168.1.0/24": true, "10.214.7.0/24": false} {
		if got := overlapsAny(cidr, nets); got != want {
			t.Errorf("overlapsAny(%s) = %v, want %v", cidr, got, want)
		}
	}
}

// TestExitedComponents: a pid file naming a live process is not reported,
// one naming no process is, one being written (empty) is skipped.
func TestExitedComponents(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "pids"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"etcd":           strconv.Itoa(os.Getpid()),
		"kube-apiserver": "2147483646",
		"kube-scheduler": "",
	} {
		if err := os.WriteFile(filepath.Join(dir, "pids", name+".pid"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := exitedComponents(dir); !slices.Equal(got, []string{"kube-apiserver"}) {
		t.Errorf("exitedComponents = %v, want [kube-apiserver]", got)
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/a\040b/c`); got != "/a b/c" {
		t.Errorf("unescapeMount = %q", got)
	}
}

// TestAssembleImage: the same files give the same digest, and the config
// carries the entrypoint and user.
func TestAssembleImage(t *testing.T) {
	files := []ImageFile{{Path: "/bin/tool", Mode: 0o755, Data: []byte("x")}, {Path: "/etc/conf", Mode: 0o644, Data: []byte("y")}}
	spec := ImageSpec{Entrypoint: []string{"/bin/tool"}, User: "65532:65532", WorkingDir: "/"}
	a, err := AssembleImage(files, spec)
	if err != nil {
		t.Fatal(err)
	}
	b, err := AssembleImage([]ImageFile{files[1], files[0]}, spec)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("digests differ: %s vs %s", da, db)
	}
	cf, err := a.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || cf.Config.Entrypoint[0] != "/bin/tool" || cf.OS != "linux" {
		t.Errorf("config %+v", cf.Config)
	}
}

// parseNets parses CIDRs.
func parseNets(cidrs ...string) ([]*net.IPNet, error) {
	var out []*net.IPNet
	for _, c := range cidrs {
		_, n, err := net.ParseCIDR(c)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// TestKubeProxyDestinations reads kube-proxy's nat rules as iptables-save
// prints them (a Service with one endpoint, one with two chosen at random,
// one without endpoints).
func TestKubeProxyDestinations(t *testing.T) {
	nat := `*nat
:KUBE-SEP-C7HIQ5QXOI446F43 - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SEP-C7HIQ5QXOI446F43 -s 10.213.186.1/32 -m comment --comment "default/kubernetes:https" -j KUBE-MARK-MASQ
-A KUBE-SEP-C7HIQ5QXOI446F43 -p tcp -m comment --comment "default/kubernetes:https" -m tcp -j DNAT --to-destination 10.213.186.1:39795
-A KUBE-SERVICES -d 10.0.0.1/32 -p tcp -m comment --comment "default/kubernetes:https cluster IP" -m tcp --dport 443 -j KUBE-SVC-NPX46M4PTMTKRN6Y
-A KUBE-SERVICES -d 10.0.77.7/32 -p tcp -m comment --comment "olm/catalog:grpc cluster IP" -m tcp --dport 50051 -j KUBE-SVC-AAAA
-A KUBE-SERVICES -d 10.213.186.2/32 -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -j KUBE-NODEPORTS
-A KUBE-SVC-NPX46M4PTMTKRN6Y ! -s 10.214.186.0/24 -d 10.0.0.1/32 -p tcp -m comment --comment "default/kubernetes:https cluster IP" -m tcp --dport 443 -j KUBE-MARK-MASQ
-A KUBE-SVC-NPX46M4PTMTKRN6Y -m comment --comment "default/kubernetes:https -> 10.213.186.1:39795" -j KUBE-SEP-C7HIQ5QXOI446F43
-A KUBE-SVC-AAAA -m comment --comment "olm/catalog:grpc -> 10.214.186.5:50051" -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-BBBB
-A KUBE-SVC-AAAA -m comment --comment "olm/catalog:grpc -> 10.214.186.9:50051" -j KUBE-SEP-CCCC
-A KUBE-SEP-BBBB -p tcp -m comment --comment "olm/catalog:grpc" -m tcp -j DNAT --to-destination 10.214.186.5:50051
-A KUBE-SEP-CCCC -p tcp -m comment --comment "olm/catalog:grpc" -m tcp -j DNAT --to-destination 10.214.186.9:50051
COMMIT
`
	for _, c := range []struct {
		ip   string
		port int32
		want []string
	}{
		{"10.0.0.1", 443, []string{"10.213.186.1:39795"}},
		{"10.0.77.7", 50051, []string{"10.214.186.5:50051", "10.214.186.9:50051"}},
		{"10.0.77.7", 50052, nil},
		{"10.0.9.9", 80, nil},
	} {
		got := kubeProxyDestinations(nat, c.ip, corev1.ServicePort{Port: c.port, Protocol: corev1.ProtocolTCP})
		if !slices.Equal(got, c.want) {
			t.Errorf("%s:%d: got %v, want %v", c.ip, c.port, got, c.want)
		}
	}
}
