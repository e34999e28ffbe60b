package localcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// ServiceCheck is a call to a Service of the cluster made the way a pod of
// the real node makes it: to the Service's ClusterIP, from a network
// namespace of the node. This machine's own namespace has no route to the
// Service range (kube-proxy's rules live in the node's namespace), so a
// Service is never called from the host.
type ServiceCheck struct {
	Namespace, Name string
	// Port is the Service port called; 0 means its first.
	Port int32
	// FromNamespace and FromPod name the calling pod, which must run on
	// the real node: the call then starts in its network namespace and
	// crosses the node's bridge as the pod's own calls do. Empty: the
	// node's namespace, whose calls pass kube-proxy's rules but not the
	// bridge.
	FromNamespace, FromPod string
}

func (s ServiceCheck) String() string {
	from := "the real node"
	if s.FromPod != "" {
		from = "pod " + s.FromNamespace + "/" + s.FromPod
	}
	return fmt.Sprintf("Service %s/%s from %s", s.Namespace, s.Name, from)
}

// ServiceHop is a step on the way from a client to a Service's backend.
type ServiceHop string

const (
	// HopService: the Service does not exist or has no ClusterIP or port.
	HopService ServiceHop = "service"
	// HopEndpoints: its EndpointSlices list no ready endpoint for the
	// port (the backend pods are not Ready).
	HopEndpoints ServiceHop = "endpoints"
	// HopRules: kube-proxy has not (yet) programmed the node's iptables
	// to translate the ClusterIP to the ready endpoints.
	HopRules ServiceHop = "kube-proxy rules"
	// HopBackend: a ready endpoint does not accept connections at its own
	// address.
	HopBackend ServiceHop = "backend"
	// HopClusterIP: rules and backend are in place but a call to the
	// ClusterIP gets no answer: the translation is taken, the reply is
	// lost (the conntrack entries and the bridge's netfilter setting
	// say more).
	HopClusterIP ServiceHop = "cluster IP"
	// HopClient: the calling pod or the node's namespace is not usable.
	HopClient ServiceHop = "client"
)

// ServiceError says at which hop a Service call fails and what was seen
// there.
type ServiceError struct {
	Check  ServiceCheck
	Hop    ServiceHop
	Detail string
}

func (e *ServiceError) Error() string {
	return fmt.Sprintf("%s does not answer: %s: %s", e.Check, e.Hop, e.Detail)
}

// serviceDialTimeout bounds one connection attempt. A SYN that is dropped
// is retransmitted after 1 s, so two seconds see one retry.
const serviceDialTimeout = 2 * time.Second

// CheckService calls the Service once. When the call fails it walks the
// hops in order (Service, endpoints, kube-proxy's rules, backend, the
// ClusterIP's translation) and returns a *ServiceError for the first one
// that fails, so a failure names what is wrong instead of a timeout.
func (c *Cluster) CheckService(ctx context.Context, chk ServiceCheck) error {
	n := c.st.RealNode
	if n == nil {
		return errors.New("the cluster has no real node to call Services from")
	}
	cs, err := kubernetes.NewForConfig(c.cfg)
	if err != nil {
		return err
	}
	fail := func(hop ServiceHop, format string, args ...any) error {
		return &ServiceError{Check: chk, Hop: hop, Detail: fmt.Sprintf(format, args...)}
	}
	svc, err := cs.CoreV1().Services(chk.Namespace).Get(ctx, chk.Name, metav1.GetOptions{})
	if err != nil {
		return fail(HopService, "%v", err)
	}
	port, err := servicePort(svc, chk.Port)
	if err != nil {
		return fail(HopService, "%v", err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return fail(HopService, "no ClusterIP (%q)", svc.Spec.ClusterIP)
	}
	nsPath := n.netnsPath()
	if chk.FromPod != "" {
		if nsPath, err = c.podNetNS(ctx, cs, chk.FromNamespace, chk.FromPod); err != nil {
			return fail(HopClient, "%v", err)
		}
	}
	vip := net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(port.Port)))
	conn, dialErr := dialInNetNS(ctx, nsPath, vip, serviceDialTimeout)
	if dialErr == nil {
		return conn.Close()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}

	// The call failed: find the first hop that does not work.
	ready, notReady, err := readyEndpoints(ctx, cs, svc, port)
	if err != nil {
		return fail(HopEndpoints, "listing EndpointSlices: %v", err)
	}
	if len(ready) == 0 {
		return fail(HopEndpoints, "no ready endpoint for port %s (calling %s: %v)%s", portName(port), vip, dialErr, c.describeNotReady(ctx, cs, chk.Namespace, notReady))
	}
	nat, err := n.iptablesSave(ctx, "nat")
	if err != nil {
		return fail(HopRules, "reading the node's nat table: %v", err)
	}
	programmed := kubeProxyDestinations(nat, svc.Spec.ClusterIP, port)
	var missing []string
	for _, ep := range ready {
		if !slices.Contains(programmed, ep) {
			missing = append(missing, ep)
		}
	}
	if len(missing) > 0 {
		return fail(HopRules, "%s is translated to %v, not to the ready endpoints %v (calling it: %v); %s",
			vip, programmed, missing, dialErr, n.kubeProxySync(ctx))
	}
	for _, ep := range ready {
		conn, err := dialInNetNS(ctx, nsPath, ep, serviceDialTimeout)
		if err != nil {
			return fail(HopBackend, "endpoint %s: %v", ep, err)
		}
		conn.Close()
	}
	return fail(HopClusterIP, "%s → %v is programmed and every endpoint answers at its own address, but the call to %s failed (%v); bridge-nf-call-iptables in the node's namespace: %s; conntrack entries for %s:\n%s",
		vip, ready, vip, dialErr, n.bridgeNFCallIPTables(ctx), vip, n.conntrackEntries(ctx, svc.Spec.ClusterIP, port.Port))
}

// WaitService calls CheckService until it passes, for at most timeout; on
// timeout it returns the last *ServiceError, which names the failing hop.
func (c *Cluster) WaitService(ctx context.Context, chk ServiceCheck, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		err := c.CheckService(ctx, chk)
		if err == nil {
			return nil
		}
		if ctx.Err() == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last == nil {
				last = ctx.Err()
			}
			return fmt.Errorf("after %s: %w", timeout, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func servicePort(svc *corev1.Service, port int32) (corev1.ServicePort, error) {
	if len(svc.Spec.Ports) == 0 {
		return corev1.ServicePort{}, errors.New("no ports")
	}
	if port == 0 {
		return svc.Spec.Ports[0], nil
	}
	for _, p := range svc.Spec.Ports {
		if p.Port == port {
			return p, nil
		}
	}
	return corev1.ServicePort{}, fmt.Errorf("no port %d", port)
}

func portName(p corev1.ServicePort) string {
	if p.Name != "" {
		return fmt.Sprintf("%d (%s)", p.Port, p.Name)
	}
	return strconv.Itoa(int(p.Port))
}

// readyEndpoints lists the Service's endpoints for port as ip:port, ready
// or not (the latter by the pod they point to, or their address).
func readyEndpoints(ctx context.Context, cs kubernetes.Interface, svc *corev1.Service, port corev1.ServicePort) (ready, notReady []string, err error) {
	slices_, err := cs.DiscoveryV1().EndpointSlices(svc.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
	if err != nil {
		return nil, nil, err
	}
	for _, s := range slices_.Items {
		var target int32 = -1
		for _, p := range s.Ports {
			if p.Port != nil && ptrString(p.Name) == port.Name {
				target = *p.Port
			}
		}
		if target < 0 {
			if port.TargetPort.Type == intstr.Int && len(s.Ports) == 0 {
				target = port.TargetPort.IntVal
			} else {
				continue
			}
		}
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				addr := net.JoinHostPort(a, strconv.Itoa(int(target)))
				if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
					ready = append(ready, addr)
					continue
				}
				who := addr
				if ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" {
					who = ep.TargetRef.Name
				}
				notReady = append(notReady, who)
			}
		}
	}
	slices.Sort(ready)
	return ready, notReady, nil
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// describeNotReady says why the named pods (or addresses) are not ready.
func (c *Cluster) describeNotReady(ctx context.Context, cs kubernetes.Interface, namespace string, names []string) string {
	if len(names) == 0 {
		return "; the EndpointSlices list no endpoint at all (no pod matches the selector, or none has an address yet)"
	}
	var b strings.Builder
	for _, name := range names {
		p, err := cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			fmt.Fprintf(&b, "; %s not ready", name)
			continue
		}
		fmt.Fprintf(&b, "; pod %s on %q %s", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status != corev1.ConditionTrue {
				fmt.Fprintf(&b, " Ready=%s %s %s", cond.Status, cond.Reason, cond.Message)
			}
		}
		for _, st := range p.Status.ContainerStatuses {
			switch {
			case st.State.Waiting != nil:
				fmt.Fprintf(&b, ", %s waiting: %s %s", st.Name, st.State.Waiting.Reason, st.State.Waiting.Message)
			case st.State.Running != nil && !st.Ready:
				fmt.Fprintf(&b, ", %s running since %s, not ready", st.Name, st.State.Running.StartedAt.Format(time.RFC3339))
			}
		}
	}
	return b.String()
}

// podNetNS is the network namespace of a running pod on the real node: that
// of its first running container's process.
func (c *Cluster) podNetNS(ctx context.Context, cs kubernetes.Interface, namespace, name string) (string, error) {
	p, err := cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if p.Spec.NodeName != c.st.RealNode.Name {
		return "", fmt.Errorf("pod %s/%s runs on %q, not on the real node", namespace, name, p.Spec.NodeName)
	}
	for _, st := range p.Status.ContainerStatuses {
		if st.State.Running == nil || st.ContainerID == "" {
			continue
		}
		pid, _, err := c.st.RealNode.containerPID(st.ContainerID)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("/proc/%d/ns/net", pid), nil
	}
	return "", fmt.Errorf("pod %s/%s has no running container (%s)", namespace, name, p.Status.Phase)
}

// iptablesSave is the node's table as iptables-save prints it.
func (n *realNode) iptablesSave(ctx context.Context, table string) (string, error) {
	out, err := exec.CommandContext(ctx, "nsenter", "--net="+n.netnsPath(), "--", "iptables-save", "-t", table).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("iptables-save: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

var (
	kubeServicesRule = regexp.MustCompile(`^-A KUBE-SERVICES -d (\S+)/32 -p (\w+) .*--dport (\d+) -j (KUBE-SVC-\w+)`)
	sepJump          = regexp.MustCompile(`^-A (KUBE-SVC-\w+) .*-j (KUBE-SEP-\w+)`)
	sepDNAT          = regexp.MustCompile(`^-A (KUBE-SEP-\w+) .*-j DNAT --to-destination (\S+)`)
)

// kubeProxyDestinations lists the ip:port addresses kube-proxy's nat rules
// translate ip:port to (empty when it has no rule for the Service).
func kubeProxyDestinations(nat, ip string, port corev1.ServicePort) []string {
	proto := strings.ToLower(string(port.Protocol))
	if proto == "" {
		proto = "tcp"
	}
	var svcChain string
	seps := map[string][]string{}
	dnat := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(nat))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		l := sc.Text()
		if m := kubeServicesRule.FindStringSubmatch(l); m != nil && m[1] == ip && m[2] == proto && m[3] == strconv.Itoa(int(port.Port)) {
			svcChain = m[4]
		}
		if m := sepJump.FindStringSubmatch(l); m != nil {
			seps[m[1]] = append(seps[m[1]], m[2])
		}
		if m := sepDNAT.FindStringSubmatch(l); m != nil {
			dnat[m[1]] = m[2]
		}
	}
	var out []string
	for _, sep := range seps[svcChain] {
		if d, ok := dnat[sep]; ok {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// kubeProxySync says when kube-proxy last wrote its rules and how long its
// syncs take, from its metrics (served in the node's namespace).
func (n *realNode) kubeProxySync(ctx context.Context) string {
	client := &http.Client{
		Timeout: 3 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return dialInNetNS(ctx, n.netnsPath(), addr, serviceDialTimeout)
		}},
	}
	resp, err := client.Get("http://" + kubeProxyMetricsAddr + "/metrics")
	if err != nil {
		return fmt.Sprintf("kube-proxy's metrics: %v; its log: %s", err, filepath.Join(n.logDir(), "kube-proxy.log"))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	metric := func(name string) (float64, bool) {
		for _, l := range strings.Split(string(body), "\n") {
			if rest, ok := strings.CutPrefix(l, name+" "); ok {
				v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
				return v, err == nil
			}
		}
		return 0, false
	}
	var parts []string
	if last, ok := metric("kubeproxy_sync_proxy_rules_last_timestamp_seconds"); ok && last > 0 {
		parts = append(parts, fmt.Sprintf("kube-proxy last synced its rules %s ago", time.Since(time.Unix(int64(last), 0)).Round(time.Second)))
	} else {
		parts = append(parts, "kube-proxy has not synced its rules yet")
	}
	if sum, ok := metric("kubeproxy_sync_proxy_rules_duration_seconds_sum"); ok {
		if cnt, ok := metric("kubeproxy_sync_proxy_rules_duration_seconds_count"); ok && cnt > 0 {
			parts = append(parts, fmt.Sprintf("%.0f syncs, %.2f s each on average", cnt, sum/cnt))
		}
	}
	if fails, ok := metric("kubeproxy_sync_proxy_rules_iptables_restore_failures_total"); ok && fails > 0 {
		parts = append(parts, fmt.Sprintf("%.0f failed iptables-restore runs", fails))
	}
	return strings.Join(parts, ", ") + "; log " + filepath.Join(n.logDir(), "kube-proxy.log")
}

// bridgeNFCallIPTables is the node namespace's
// net.bridge.bridge-nf-call-iptables (whether bridged frames, such as a
// backend's reply to a client pod on the same bridge, pass iptables and
// conntrack, which reverses the ClusterIP's translation).
func (n *realNode) bridgeNFCallIPTables(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "nsenter", "--net="+n.netnsPath(), "--", "cat", bridgeNFCallIPTablesPath).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("unreadable (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out))
}

// conntrackEntries lists the node's conntrack entries for connections to
// ip:port (an [UNREPLIED] entry whose reply source is an endpoint: the
// translation was taken and nothing came back).
func (n *realNode) conntrackEntries(ctx context.Context, ip string, port int32) string {
	out, err := exec.CommandContext(ctx, "nsenter", "--net="+n.netnsPath(), "--", "conntrack", "-L", "-p", "tcp",
		"--orig-dst", ip, "--orig-port-dst", strconv.Itoa(int(port))).CombinedOutput()
	if err != nil && len(out) == 0 {
		return fmt.Sprintf("(conntrack: %v)", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > 20 {
		lines = append(lines[:20], fmt.Sprintf("… %d more", len(lines)-20))
	}
	return strings.Join(lines, "\n")
}

// containerPID finds the main process of a container on the real node (by
// its CRI id, with or without the "containerd://" prefix) through its
// memory cgroup, and returns it with that cgroup's directory.
func (n *realNode) containerPID(containerID string) (int, string, error) {
	id := strings.TrimPrefix(containerID, "containerd://")
	memRoot := filepath.Join(cgroupV1Root, "memory", n.CgroupRoot)
	if cgroupV2() {
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
		return 0, "", fmt.Errorf("no memory cgroup for container %s under %s", id, memRoot)
	}
	procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return 0, "", err
	}
	pid := 0
	// The container's init process has the smallest pid of its cgroup.
	for _, f := range strings.Fields(string(procs)) {
		if p, err := strconv.Atoi(f); err == nil && (pid == 0 || p < pid) {
			pid = p
		}
	}
	if pid == 0 {
		return 0, "", fmt.Errorf("container %s has no process", id)
	}
	return pid, dir, nil
}

// cgroupV2 reports a unified cgroup hierarchy.
func cgroupV2() bool {
	_, err := os.Stat(filepath.Join(cgroupV1Root, "cgroup.controllers"))
	return err == nil
}
