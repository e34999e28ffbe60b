package localcluster

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/e2e/harness/poll"
	"github.com/titanml/inference-stack-operator/e2e/harness/testinputs"
)

// RealNodeMode says whether a cluster gets a real node (a kubelet with
// containerd on this machine) beside its simulated ones.
type RealNodeMode string

const (
	// RealNodeOff: simulated nodes only (the default).
	RealNodeOff RealNodeMode = ""
	// RealNodeAuto: a real node where this machine can run one; where it
	// cannot (not root, no cgroups) the cluster starts without it and
	// Cluster.RealNodeSkipped says why. Missing packages are an error, not
	// a reason to fall back: they are installable.
	RealNodeAuto RealNodeMode = "auto"
	// RealNodeRequired: Start fails unless the real node can run.
	RealNodeRequired RealNodeMode = "required"
)

// RealNodeName is the real node's Node name.
const RealNodeName = "real-node"

// RealNodeLabel marks the real node (value "true"), so that tests and
// workloads can select it.
const RealNodeLabel = "localcluster.inference-stack.io/real-node"

// ServiceCIDR is the cluster's Service range: room for the two Services of
// each of hundreds of stacks; the `kubernetes` Service is its first address.
const ServiceCIDR = "10.0.0.0/16"

// kubernetesServiceIP is the first address of ServiceCIDR.
const kubernetesServiceIP = "10.0.0.1"

// PauseImage is the reference under which the harness imports its own
// sandbox image into the real node's containerd.
const PauseImage = "localhost/inference-stack-e2e/pause:harness"

// ErrRealNodeUnsupported is wrapped by CheckRealNode when this machine
// cannot run a real node at all (not root, no cgroups): RealNodeAuto then
// falls back to simulated nodes only.
var ErrRealNodeUnsupported = errors.New("this machine cannot run a real node")

// Debian packages the real node needs: containerd (with ctr and the runc
// shim), runc, the CNI reference plugins, iptables for kube-proxy and
// iproute2/util-linux for the harness's network namespace.
const RealNodePackages = "containerd runc containernetworking-plugins iptables conntrack iproute2 util-linux"

// cniBinDir is where Debian's containernetworking-plugins installs them.
const cniBinDir = "/usr/lib/cni"

// cgroupV1Root is where the cgroup hierarchies are mounted.
const cgroupV1Root = "/sys/fs/cgroup"

// CheckRealNode says why this machine cannot run a real node, or nil. The
// error wraps ErrRealNodeUnsupported when the machine itself lacks what is
// needed (root, cgroups); a missing package is a plain error naming what to
// install.
func CheckRealNode() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: the kubelet and containerd need root (running as uid %d)", ErrRealNodeUnsupported, os.Geteuid())
	}
	if _, err := os.Stat(filepath.Join(cgroupV1Root, "cgroup.controllers")); err != nil {
		for _, c := range []string{"cpu", "memory", "pids"} {
			if _, err := os.Stat(filepath.Join(cgroupV1Root, c)); err != nil {
				return fmt.Errorf("%w: no cgroup hierarchy for %s under %s", ErrRealNodeUnsupported, c, cgroupV1Root)
			}
		}
	}
	var missing []string
	for _, tool := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc", "iptables", "ip", "nsenter", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, plugin)); err != nil {
			missing = append(missing, filepath.Join(cniBinDir, plugin))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the real node needs %s: apt-get install %s", strings.Join(missing, ", "), RealNodePackages)
	}
	return nil
}

// realNode is the saved state of a cluster's real node: enough for Stop,
// possibly in another process, to remove everything it created.
type realNode struct {
	Name string
	// ID makes every host-visible name unique per cluster: the network
	// namespace, the host's veth, the cgroup root and the CNI network.
	ID  string
	Dir string
	// NetNS is the node's network namespace (ip netns name). containerd,
	// the kubelet, kube-proxy and the pods' bridge live in it, so that
	// kube-proxy's iptables chains and the pods' interfaces never touch the
	// host's, and other clusters on the machine cannot collide with them.
	NetNS string
	// HostIf/NodeIf are the two ends of the veth pair joining the host and
	// the node; HostIP and NodeIP their addresses (a /30). The control plane
	// listens on HostIP.
	HostIf, NodeIf string
	HostIP, NodeIP string
	// PodCIDR is the node's pod range; the host routes it via NodeIP so
	// that the API server reaches pods (webhooks, metrics).
	PodCIDR    string
	CgroupRoot string
	Network    string // CNI network name
	// APIServerPort is the API server's port on 127.0.0.1, forwarded
	// from HostIP (see forwardAPIServer).
	APIServerPort int
	// Sandboxes are the pod sandbox ids seen at teardown, to find their
	// entries in libcni's cache (see cniCacheEntries).
	Sandboxes []string `json:",omitempty"`
}

// natChain is the host's iptables chain holding the node's forward.
func (n *realNode) natChain() string { return "ISK-" + n.ID }

func (n *realNode) containerdDir() string { return filepath.Join(n.Dir, "containerd") }
func (n *realNode) socket() string        { return filepath.Join(n.containerdDir(), "containerd.sock") }
func (n *realNode) runcRoot() string      { return filepath.Join(n.Dir, "runc") }
func (n *realNode) kubeletDir() string    { return filepath.Join(n.Dir, "kubelet") }
func (n *realNode) certsDir() string      { return filepath.Join(n.containerdDir(), "certs.d") }
func (n *realNode) logDir() string        { return filepath.Join(n.Dir, "logs") }
func (n *realNode) netnsPath() string     { return filepath.Join("/run/netns", n.NetNS) }

// RealNodeSkipped says why the cluster has no real node although one was
// asked for with RealNodeAuto ("" when it has one or none was asked for).
func (c *Cluster) RealNodeSkipped() string { return c.st.RealNodeSkipped }

// HasRealNode reports whether the cluster has a real node.
func (c *Cluster) HasRealNode() bool { return c.st.RealNode != nil }

// NodeAddress is the address on which the control plane listens and by
// which the real node and its pods reach it (and this machine reaches
// services the harness runs, such as a registry): the host end of the
// node's veth pair, or 127.0.0.1 without a real node.
func (c *Cluster) NodeAddress() string {
	if c.st.RealNode != nil {
		return c.st.RealNode.HostIP
	}
	return "127.0.0.1"
}

// TrustRegistry makes the real node's containerd pull from the TLS
// registry at hostPort (e.g. "10.213.4.1:40123") trusting caPEM. A no-op
// without a real node.
func (c *Cluster) TrustRegistry(hostPort string, caPEM []byte) error {
	n := c.st.RealNode
	if n == nil {
		return nil
	}
	dir := filepath.Join(n.certsDir(), hostPort)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, caPEM, 0o644); err != nil {
		return err
	}
	// containerd reads hosts.toml at every pull: no restart needed.
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = %q\n",
		"https://"+hostPort, "https://"+hostPort, ca)
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644)
}

// newRealNode picks a free address slot and names, under an exclusive lock
// so that clusters started concurrently on the machine never share one.
// The lock is held until release, after the veth addresses exist.
func newRealNode(ctx context.Context, dir string) (n *realNode, release func(), err error) {
	cache, err := CacheDir()
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, nil, err
	}
	unlock, err := lockFile(ctx, filepath.Join(cache, "realnode-addresses.lock"), nil)
	if err != nil {
		return nil, nil, err
	}
	used, err := hostRoutes()
	if err != nil {
		unlock()
		return nil, nil, err
	}
	idb := make([]byte, 3)
	if _, err := rand.Read(idb); err != nil {
		unlock()
		return nil, nil, err
	}
	id := hex.EncodeToString(idb)
	start := int(idb[0])
	for i := range 250 {
		s := (start + i) % 250
		veth := fmt.Sprintf("10.213.%d.0/30", s)
		pods := fmt.Sprintf("10.214.%d.0/24", s)
		if overlapsAny(veth, used) || overlapsAny(pods, used) {
			continue
		}
		return &realNode{
			Name:       RealNodeName,
			ID:         id,
			Dir:        dir,
			NetNS:      "isk-" + id,
			HostIf:     "isk" + id + "h",
			NodeIf:     "isk" + id + "n",
			HostIP:     fmt.Sprintf("10.213.%d.1", s),
			NodeIP:     fmt.Sprintf("10.213.%d.2", s),
			PodCIDR:    pods,
			CgroupRoot: "/isk-" + id,
			Network:    "isk-" + id,
		}, unlock, nil
	}
	unlock()
	return nil, nil, errors.New("no free address range for the real node in 10.213.0.0/16 and 10.214.0.0/16")
}

// hostRoutes lists the destinations of the host's routes and addresses.
func hostRoutes() ([]*net.IPNet, error) {
	var out []*net.IPNet
	for _, args := range [][]string{{"-4", "-o", "route", "show", "table", "all"}, {"-4", "-o", "addr", "show"}} {
		b, err := exec.Command("ip", args...).Output()
		if err != nil {
			return nil, fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			for _, f := range strings.Fields(line) {
				if !strings.Contains(f, "/") {
					if ip := net.ParseIP(f); ip != nil && ip.To4() != nil {
						f += "/32"
					} else {
						continue
					}
				}
				if _, n, err := net.ParseCIDR(f); err == nil {
					out = append(out, n)
				}
			}
		}
	}
	return out, nil
}

func overlapsAny(cidr string, nets []*net.IPNet) bool {
	_, a, _ := net.ParseCIDR(cidr)
	for _, b := range nets {
		if b.Contains(a.IP) || a.Contains(b.IP) {
			return true
		}
	}
	return false
}

// run runs a command and returns its error with its output.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setupNetwork creates the node's network namespace and the veth pair
// joining it to the host. Every address is in a range no route of the
// host uses; nothing is routed off the machine (the host does not forward).
func (n *realNode) setupNetwork(ctx context.Context) error {
	steps := [][]string{
		{"ip", "netns", "add", n.NetNS},
		{"ip", "link", "add", n.HostIf, "type", "veth", "peer", "name", n.NodeIf},
		{"ip", "link", "set", n.NodeIf, "netns", n.NetNS},
		{"ip", "addr", "add", n.HostIP + "/30", "dev", n.HostIf},
		{"ip", "link", "set", n.HostIf, "up"},
		{"ip", "-n", n.NetNS, "addr", "add", n.NodeIP + "/30", "dev", n.NodeIf},
		{"ip", "-n", n.NetNS, "link", "set", n.NodeIf, "up"},
		{"ip", "-n", n.NetNS, "link", "set", "lo", "up"},
		{"ip", "-n", n.NetNS, "route", "add", "default", "via", n.HostIP},
		// The API server reaches pods (webhooks, kubectl port-forward,
		// metrics) through the node; the route goes with the veth.
		{"ip", "route", "add", n.PodCIDR, "via", n.NodeIP, "dev", n.HostIf},
	}
	for _, s := range steps {
		if err := run(ctx, s[0], s[1:]...); err != nil {
			return fmt.Errorf("setting up the real node's network: %w", err)
		}
	}
	return n.setSysctls(ctx)
}

// kubeProxyMetricsAddr is where kube-proxy serves its metrics, in the
// node's namespace.
const kubeProxyMetricsAddr = "127.0.0.1:10249"

// bridgeNFCallIPTablesPath is the sysctl that makes frames crossing a
// bridge pass iptables and conntrack (br_netfilter; one per network
// namespace since Linux 5.3).
const bridgeNFCallIPTablesPath = "/proc/sys/net/bridge/bridge-nf-call-iptables"

// setSysctls sets, inside the node's namespace only, what its Services
// need: forwarding between the pods' bridge and the veth, and
// bridge-nf-call-iptables. Without the latter a pod calling a Service whose
// backend is a pod on the same bridge never gets an answer: the backend
// replies straight across the bridge, conntrack never sees the reply and
// never reverses the ClusterIP's translation, and the client drops a reply
// from an address it did not call. The sysctl exists only once
// br_netfilter is loaded, which on a fresh machine nothing may have done
// yet, so it is loaded here, and a node without it does not start.
func (n *realNode) setSysctls(ctx context.Context) error {
	inNode := func(script string) ([]byte, error) {
		return exec.CommandContext(ctx, "nsenter", "--net="+n.netnsPath(), "--", "sh", "-c", script).CombinedOutput()
	}
	if out, err := inNode("test -e " + bridgeNFCallIPTablesPath); err != nil {
		if mout, merr := exec.CommandContext(ctx, "modprobe", "br_netfilter").CombinedOutput(); merr != nil {
			return fmt.Errorf("the real node needs br_netfilter (%s is missing: %s) and loading it failed: %w: %s",
				bridgeNFCallIPTablesPath, strings.TrimSpace(string(out)), merr, strings.TrimSpace(string(mout)))
		}
	}
	script := "echo 1 > /proc/sys/net/ipv4/ip_forward && echo 1 > " + bridgeNFCallIPTablesPath +
		" && cat /proc/sys/net/ipv4/ip_forward " + bridgeNFCallIPTablesPath
	out, err := inNode(script)
	if err != nil {
		return fmt.Errorf("setting the real node's sysctls: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if got := strings.Fields(string(out)); !slices.Equal(got, []string{"1", "1"}) {
		return fmt.Errorf("the real node's ip_forward and bridge-nf-call-iptables read %v after setting them to 1", got)
	}
	return nil
}

// forwardAPIServer lets the node and its pods reach the API server, which
// listens on 127.0.0.1 only, at HostIP: a DNAT rule for exactly that
// address and port, for packets arriving from the node's veth, in a chain
// of the host's nat table named after the node (removed at teardown), and
// route_localnet on that veth alone so the kernel accepts the loopback
// destination. Nothing else on the machine can reach the API server.
func (n *realNode) forwardAPIServer(ctx context.Context) error {
	port := strconv.Itoa(n.APIServerPort)
	steps := [][]string{
		{"iptables", "-w", "-t", "nat", "-N", n.natChain()},
		{"iptables", "-w", "-t", "nat", "-A", n.natChain(), "-i", n.HostIf, "-d", n.HostIP, "-p", "tcp", "--dport", port,
			"-j", "DNAT", "--to-destination", "127.0.0.1:" + port},
		{"iptables", "-w", "-t", "nat", "-I", "PREROUTING", "-i", n.HostIf, "-m", "comment", "--comment", "inference-stack e2e real node " + n.ID, "-j", n.natChain()},
		{"sysctl", "-q", "-w", "net.ipv4.conf." + n.HostIf + ".route_localnet=1"},
	}
	for _, s := range steps {
		if err := run(ctx, s[0], s[1:]...); err != nil {
			return fmt.Errorf("forwarding %s:%s to the API server: %w", n.HostIP, port, err)
		}
	}
	return nil
}

// removeForward deletes the node's nat chain and the jump to it, if they
// exist.
func (n *realNode) removeForward(ctx context.Context) error {
	if exec.CommandContext(ctx, "iptables", "-w", "-t", "nat", "-S", n.natChain()).Run() != nil {
		return nil // no such chain
	}
	var errs []error
	for exec.CommandContext(ctx, "iptables", "-w", "-t", "nat", "-C", "PREROUTING", "-i", n.HostIf, "-m", "comment", "--comment", "inference-stack e2e real node "+n.ID, "-j", n.natChain()).Run() == nil {
		if err := run(ctx, "iptables", "-w", "-t", "nat", "-D", "PREROUTING", "-i", n.HostIf, "-m", "comment", "--comment", "inference-stack e2e real node "+n.ID, "-j", n.natChain()); err != nil {
			errs = append(errs, err)
			break
		}
	}
	for _, op := range []string{"-F", "-X"} {
		if err := run(ctx, "iptables", "-w", "-t", "nat", op, n.natChain()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// createCgroups creates the node's cgroup root in every v1 hierarchy (the
// kubelet requires --cgroup-root to exist). cpuset children start empty,
// so the root copies its parent's CPUs and memory nodes.
func (n *realNode) createCgroups() error {
	if _, err := os.Stat(filepath.Join(cgroupV1Root, "cgroup.controllers")); err == nil {
		return os.MkdirAll(filepath.Join(cgroupV1Root, n.CgroupRoot), 0o755)
	}
	for _, h := range cgroupHierarchies() {
		d := filepath.Join(h, n.CgroupRoot)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", d, err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return fmt.Errorf("%s/%s: %w", d, f, err)
				}
			}
		}
	}
	return nil
}

// cgroupHierarchies lists the mounted cgroup v1 hierarchies.
func cgroupHierarchies() []string {
	entries, _ := os.ReadDir(cgroupV1Root)
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join(cgroupV1Root, e.Name()))
		}
	}
	if _, err := os.Stat(filepath.Join(cgroupV1Root, "cgroup.controllers")); err == nil {
		return []string{cgroupV1Root}
	}
	return out
}

// pki is the cluster CA that kwokctl generated (it signs every component's
// certificate); the harness signs the node's certificates with it, as
// kubeadm would.
type pki struct {
	dir  string
	cert *x509.Certificate
	key  crypto.Signer
}

func loadPKI(dir string) (*pki, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("reading the cluster CA: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, fmt.Errorf("reading the cluster CA key: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("no PEM data in %s/ca.{crt,key}", dir)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	var key any
	if key, err = x509.ParsePKCS8PrivateKey(kb.Bytes); err != nil {
		if key, err = x509.ParsePKCS1PrivateKey(kb.Bytes); err != nil {
			if key, err = x509.ParseECPrivateKey(kb.Bytes); err != nil {
				return nil, fmt.Errorf("parsing %s/ca.key: %w", dir, err)
			}
		}
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s/ca.key is not a signing key", dir)
	}
	return &pki{dir: dir, cert: cert, key: signer}, nil
}

// issue writes <base>.crt and <base>.key: a certificate for cn in orgs,
// for client or server use, valid for ips.
func (p *pki) issue(base, cn string, orgs []string, server bool, ips ...string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(30 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if _, isRSA := p.key.(*rsa.PrivateKey); isRSA {
		tmpl.SignatureAlgorithm = x509.SHA256WithRSA
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		for _, ip := range ips {
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
		}
		tmpl.DNSNames = []string{cn}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		return fmt.Errorf("issuing a certificate for %s: %w", cn, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(base+".key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
}

// kubeconfigFor writes a kubeconfig authenticating with a client
// certificate issued by the cluster CA.
func (p *pki) kubeconfigFor(path, server, certBase string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: filepath.Join(p.dir, "ca.crt")}
	kc.AuthInfos["node"] = &clientcmdapi.AuthInfo{ClientCertificate: certBase + ".crt", ClientKey: certBase + ".key"}
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "node"}
	kc.CurrentContext = "local"
	return clientcmd.WriteToFile(*kc, path)
}

// start brings the node up: certificates, containerd (with the harness's
// own pause image), the CNI configuration, kube-proxy and the kubelet, all
// in the node's network namespace. The caller waits for the Node to be
// Ready.
func (n *realNode) start(ctx context.Context, c *Cluster, apiserver string) error {
	for _, d := range []string{n.logDir(), n.containerdDir(), n.certsDir(), n.kubeletDir(), filepath.Join(n.Dir, "cni", "net.d"), filepath.Join(n.Dir, "pki"), n.runcRoot()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	ca, err := loadPKI(filepath.Join(c.clusterDir(), "pki"))
	if err != nil {
		return err
	}
	certs := filepath.Join(n.Dir, "pki")
	// The kubelet's identity for the Node authorizer, its serving
	// certificate (the API server checks it against the cluster CA when it
	// calls for logs and exec), and kube-proxy's identity (bound to
	// system:node-proxier by the default RBAC).
	if err := ca.issue(filepath.Join(certs, "kubelet-client"), "system:node:"+n.Name, []string{"system:nodes"}, false); err != nil {
		return err
	}
	if err := ca.issue(filepath.Join(certs, "kubelet-serving"), n.Name, nil, true, n.NodeIP); err != nil {
		return err
	}
	if err := ca.issue(filepath.Join(certs, "kube-proxy"), "system:kube-proxy", nil, false); err != nil {
		return err
	}
	server := "https://" + apiserver
	if err := ca.kubeconfigFor(filepath.Join(n.Dir, "kubelet.kubeconfig"), server, filepath.Join(certs, "kubelet-client")); err != nil {
		return err
	}
	if err := ca.kubeconfigFor(filepath.Join(n.Dir, "kube-proxy.kubeconfig"), server, filepath.Join(certs, "kube-proxy")); err != nil {
		return err
	}

	// containerd.
	cfgPath := filepath.Join(n.containerdDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte(n.containerdConfig()), 0o644); err != nil {
		return err
	}
	if err := c.startNodeProcess("containerd", n, "containerd", "--config", cfgPath); err != nil {
		return err
	}
	if err := poll.Until(ctx, 0, "containerd to serve "+n.socket(), func(ctx context.Context) (bool, string, error) {
		if err := c.checkAlive(); err != nil {
			return false, "", err
		}
		err := exec.CommandContext(ctx, "ctr", "--address", n.socket(), "version").Run()
		return err == nil, fmt.Sprint(err), nil
	}); err != nil {
		return err
	}
	if err := n.importPause(ctx); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.Dir, "cni", "net.d", "10-"+n.Network+".conflist"), n.cniConfig(), 0o644); err != nil {
		return err
	}

	// kube-proxy, then the kubelet.
	kpCfg := filepath.Join(n.Dir, "kube-proxy.json")
	if err := writeJSON(kpCfg, n.kubeProxyConfig()); err != nil {
		return err
	}
	if err := c.startNodeProcess("kube-proxy", n, c.st.Binaries.KubeProxy, "--config="+kpCfg, "--v=2"); err != nil {
		return err
	}
	kCfg := filepath.Join(n.Dir, "kubelet.json")
	if err := writeJSON(kCfg, n.kubeletConfig(filepath.Join(ca.dir, "ca.crt"), certs)); err != nil {
		return err
	}
	return c.startNodeProcess("kubelet", n, c.st.Binaries.Kubelet,
		"--config="+kCfg,
		"--kubeconfig="+filepath.Join(n.Dir, "kubelet.kubeconfig"),
		"--root-dir="+n.kubeletDir(),
		"--cert-dir="+filepath.Join(n.Dir, "pki"),
		"--hostname-override="+n.Name,
		"--node-ip="+n.NodeIP,
		"--node-labels="+RealNodeLabel+"=true",
		"--v=2",
	)
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// containerdConfig renders containerd's configuration: every path under
// the node's directory, and the settings this kind of machine needs.
func (n *realNode) containerdConfig() string {
	d := n.containerdDir()
	return fmt.Sprintf(`version = 2
root = %q
state = %q
# Plugins the node does not use: fewer moving parts, nothing probed on the host.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # Lowering a container's oom_score_adj below containerd's own needs
  # CAP_SYS_RESOURCE, which this kind of machine withholds: without this
  # every sandbox fails with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  # Pod network namespaces live under the state dir, not /var/run/netns.
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %q
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
    max_conf_num = 1

  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
`, filepath.Join(d, "root"), filepath.Join(d, "state"), n.socket(), n.socket()+".ttrpc", filepath.Join(d, "opt"),
		PauseImage, n.runcRoot(), cniBinDir, filepath.Join(n.Dir, "cni", "net.d"), n.certsDir())
}

// cniConfig is a bridge network inside the node's namespace, addresses
// from PodCIDR (state under the node's directory), with hairpin mode so a
// pod reaches itself through a Service.
func (n *realNode) cniConfig() []byte {
	_, pods, _ := net.ParseCIDR(n.PodCIDR)
	gw := slices.Clone(pods.IP.To4())
	gw[3] = 1
	conf := map[string]any{
		"cniVersion": "0.4.0",
		"name":       n.Network,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      "cni0",
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": filepath.Join(n.Dir, "cni", "ipam"),
					"ranges":  []any{[]any{map[string]any{"subnet": n.PodCIDR, "gateway": gw.String()}}},
					"routes":  []any{map[string]any{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	data, _ := json.MarshalIndent(conf, "", "  ")
	return data
}

func (n *realNode) kubeProxyConfig() map[string]any {
	return map[string]any{
		"apiVersion":         "kubeproxy.config.k8s.io/v1alpha1",
		"kind":               "KubeProxyConfiguration",
		"mode":               "iptables",
		"clientConnection":   map[string]any{"kubeconfig": filepath.Join(n.Dir, "kube-proxy.kubeconfig")},
		"hostnameOverride":   n.Name,
		"clusterCIDR":        n.PodCIDR,
		"bindAddress":        n.NodeIP,
		"healthzBindAddress": "127.0.0.1:10256",
		"metricsBindAddress": kubeProxyMetricsAddr,
		// Leave the machine-wide conntrack settings alone (only writable
		// from the host's namespace, and not ours to change).
		"conntrack": map[string]any{"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
		// kube-proxy's default of -999 needs CAP_SYS_RESOURCE.
		"oomScoreAdj":       0,
		"nodePortAddresses": []string{n.NodeIP + "/32"},
	}
}

func (n *realNode) kubeletConfig(clientCA, certs string) map[string]any {
	return map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		"address":    n.NodeIP,
		"port":       10250,
		// No unauthenticated read-only port; the API server authenticates
		// with its client certificate, others with tokens checked by
		// TokenReview, and every request is authorised by the API server
		// (SubjectAccessReview).
		"readOnlyPort":       0,
		"healthzBindAddress": "127.0.0.1",
		"healthzPort":        10248,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": clientCA},
		},
		"authorization":     map[string]any{"mode": "Webhook"},
		"tlsCertFile":       filepath.Join(certs, "kubelet-serving.crt"),
		"tlsPrivateKeyFile": filepath.Join(certs, "kubelet-serving.key"),
		"cgroupDriver":      "cgroupfs",
		// The node's own cgroup subtree: removed whole at teardown, never
		// shared with another kubelet on the machine.
		"cgroupRoot":                    n.CgroupRoot,
		"failSwapOn":                    false,
		"failCgroupV1":                  false,
		"containerRuntimeEndpoint":      "unix://" + n.socket(),
		"localStorageCapacityIsolation": false,
		"evictionHard":                  map[string]string{"memory.available": "100Mi"},
		"imageGCHighThresholdPercent":   100,
		"imageGCLowThresholdPercent":    99,
		"enforceNodeAllocatable":        []string{"none"},
		"podLogsDir":                    filepath.Join(n.Dir, "pod-logs"),
		"volumePluginDir":               filepath.Join(n.kubeletDir(), "volume-plugins"),
		// No resolver: pods have no cluster DNS here, and must never send
		// lookups off the machine.
		"resolvConf":             "",
		"serializeImagePulls":    false,
		"oomScoreAdj":            0,
		"rotateCertificates":     false,
		"serverTLSBootstrap":     false,
		"shutdownGracePeriod":    "0s",
		"registerNode":           true,
		"maxPods":                110,
		"syncFrequency":          "10s",
		"fileCheckFrequency":     "1h",
		"staticPodPath":          "",
		"makeIPTablesUtilChains": true,
	}
}

// importPause builds the harness's pause program, packages it and imports
// it into containerd's k8s.io namespace (where the CRI looks for images).
func (n *realNode) importPause(ctx context.Context) error {
	work := filepath.Join(n.Dir, "images")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	bin, err := pauseBinary(ctx, work)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	img, err := AssembleImage([]ImageFile{{Path: "/pause", Mode: 0o755, Data: data}}, ImageSpec{Entrypoint: []string{"/pause"}, User: "65535:65535"})
	if err != nil {
		return err
	}
	return n.ImportImage(ctx, img, PauseImage)
}

// pauseBinary returns the pause program: under Bazel the go_binary its
// BUILD file passes (testinputs.PauseBinary), otherwise built into work.
func pauseBinary(ctx context.Context, work string) (string, error) {
	if bin, ok, err := testinputs.Path(testinputs.PauseBinary); ok || err != nil {
		return bin, err
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return buildBinary(ctx, root, inferencestack.ModulePath+"/e2e/harness/localcluster/internal/pause", "pause", work)
}

// ImportImage imports img into the node's containerd (namespace k8s.io,
// where the CRI finds images) under ref, so that pods can use it without a
// registry (imagePullPolicy IfNotPresent or Never).
func (n *realNode) ImportImage(ctx context.Context, img v1.Image, ref string) error {
	dir, err := os.MkdirTemp(n.Dir, "import-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	archive := filepath.Join(dir, "image.tar")
	if err := writeImageArchive(img, ref, archive); err != nil {
		return err
	}
	return run(ctx, "ctr", "--address", n.socket(), "--namespace", "k8s.io", "images", "import", "--snapshotter", "overlayfs", archive)
}

// ImportImage imports img into the real node's containerd under ref (see
// realNode.ImportImage). It fails without a real node.
func (c *Cluster) ImportImage(ctx context.Context, img v1.Image, ref string) error {
	if c.st.RealNode == nil {
		return errors.New("the cluster has no real node to import images into")
	}
	return c.st.RealNode.ImportImage(ctx, img, ref)
}

// startNodeProcess starts a node component in the node's network namespace
// (nsenter execs it, so the pid is the component's), in its own session so
// that it outlives the starting process like the control plane, logging to
// <node>/logs/<name>.log, and records it in the cluster state.
func (c *Cluster) startNodeProcess(name string, n *realNode, bin string, args ...string) error {
	logf, err := os.OpenFile(filepath.Join(n.logDir(), name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	path, err := exec.LookPath(bin)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	cmd := exec.Command("nsenter", append([]string{"--net=" + n.netnsPath(), "--", path}, args...)...)
	cmd.Dir = n.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	pid := cmd.Process.Pid
	// Released, not waited for: like kwokctl's components it may outlive
	// us; Stop reaps it if it is still our child.
	_ = cmd.Process.Release()
	// nsenter replaces itself with the component; wait for the exec so
	// that the recorded start time and executable are the component's.
	resolved, _ := filepath.EvalSymlinks(path)
	deadline := time.Now().Add(5 * time.Second)
	for {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if exe == resolved || exe == path {
			break
		}
		if _, _, err := procStat(pid); err != nil || time.Now().After(deadline) {
			return fmt.Errorf("%s (pid %d) did not start (exe %q); log %s", name, pid, exe, filepath.Join(n.logDir(), name+".log"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, start, err := procStat(pid)
	if err != nil {
		return fmt.Errorf("%s exited at once; log %s", name, filepath.Join(n.logDir(), name+".log"))
	}
	c.st.Processes = append(c.st.Processes, Process{Name: name, PID: pid, StartTime: start})
	return c.save()
}
