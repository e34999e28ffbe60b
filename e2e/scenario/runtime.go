package scenario

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	inferencestack "github.com/titanml/inference-stack-operator"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The operator's pods where they really run (kind, or the local
// provider's real node): what only a container runtime can show.

// MetricsPort is the operator's secure metrics port (the bundle's
// Deployment passes --metrics-bind-address=:8443).
const MetricsPort = 8443

// OperatorPods lists the operator Deployment's pods that are not being
// deleted.
func (s *Scenario) OperatorPods(ctx context.Context) ([]corev1.Pod, error) {
	name := inferencestack.Namespace(s.Major)
	d, err := s.CS.AppsV1().Deployments(name).Get(ctx, inferencestack.InstanceName(s.Major), metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, err
	}
	l, err := s.CS.CoreV1().Pods(name).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// WaitOperatorReady waits until exactly replicas operator pods exist, all
// running image and Ready — which the kubelet decides through the
// container's readiness probe — and returns them.
func (s *Scenario) WaitOperatorReady(ctx context.Context, image string, replicas int) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	err := s.waitFor(ctx, 3*time.Minute, fmt.Sprintf("%d operator pod(s) Ready with %s", replicas, image), func(ctx context.Context) (bool, string, error) {
		var err error
		pods, err = s.OperatorPods(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		var why []string
		ready := 0
		for i := range pods {
			p := &pods[i]
			if p.Spec.Containers[0].Image == image && podReady(p) {
				ready++
				continue
			}
			state := ""
			for _, cs := range p.Status.ContainerStatuses {
				switch {
				case cs.State.Waiting != nil:
					state = cs.State.Waiting.Reason + ": " + cs.State.Waiting.Message
				case cs.State.Terminated != nil:
					state = "terminated " + cs.State.Terminated.Reason
				case cs.State.Running != nil:
					state = "running, not ready"
				}
			}
			why = append(why, fmt.Sprintf("%s on %q: %s %s", p.Name, p.Spec.NodeName, p.Status.Phase, state))
		}
		return ready == replicas && len(pods) == replicas, fmt.Sprintf("%d/%d ready; %s", ready, replicas, strings.Join(why, "; ")), nil
	})
	return pods, err
}

var pulledIn = regexp.MustCompile(`Successfully pulled image "[^"]+" in ([0-9.]+[µmn]?s)`)

// PullTime is how long the kubelet took to pull the pod's image, from its
// Pulled event (0 if the image was already on the node).
func (s *Scenario) PullTime(ctx context.Context, pod *corev1.Pod) time.Duration {
	evs, err := s.CS.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name + ",reason=Pulled"})
	if err != nil {
		return 0
	}
	for _, e := range evs.Items {
		if m := pulledIn.FindStringSubmatch(e.Message); m != nil {
			d, _ := time.ParseDuration(m[1])
			return d
		}
	}
	return 0
}

// CheckOperatorRuntime checks the running operator pods against the
// bundle's promises: scheduled on the real node, the image by digest, and
// — read from the host — uid/gid 65532, a read-only root filesystem and no
// capabilities.
func (s *Scenario) CheckOperatorRuntime(ctx context.Context, image string) error {
	pods, err := s.OperatorPods(ctx)
	if err != nil {
		return err
	}
	if len(pods) == 0 {
		return fmt.Errorf("no operator pod")
	}
	digest := image[strings.LastIndex(image, "@")+1:]
	for _, p := range pods {
		if s.Env.RealNode != "" && p.Spec.NodeName != s.Env.RealNode {
			return fmt.Errorf("operator pod %s runs on %s, want the real node %s", p.Name, p.Spec.NodeName, s.Env.RealNode)
		}
		if len(p.Status.ContainerStatuses) != 1 {
			return fmt.Errorf("operator pod %s: %d container statuses", p.Name, len(p.Status.ContainerStatuses))
		}
		st := p.Status.ContainerStatuses[0]
		if !strings.HasSuffix(st.ImageID, digest) {
			return fmt.Errorf("operator pod %s runs image %s, want digest %s", p.Name, st.ImageID, digest)
		}
		if s.Env.InspectContainer == nil {
			continue
		}
		proc, err := s.Env.InspectContainer(st.ContainerID)
		if err != nil {
			return fmt.Errorf("inspecting operator pod %s: %w", p.Name, err)
		}
		if proc.UID != 65532 || proc.GID != 65532 || !proc.RootReadOnly || proc.CapEff != 0 {
			return fmt.Errorf("operator pod %s: process %d runs as uid %d gid %d, read-only root %v, capabilities %#x; want 65532, 65532, true, none",
				p.Name, proc.PID, proc.UID, proc.GID, proc.RootReadOnly, proc.CapEff)
		}
		s.logf("operator pod %s on %s: pid %d uid %d gid %d, read-only root, no capabilities, image %s", p.Name, p.Spec.NodeName, proc.PID, proc.UID, proc.GID, st.ImageID)
	}
	return nil
}

// MemorySample is one reading of an operator container's memory cgroup.
type MemorySample struct {
	Pod                string
	Usage, Peak, Limit int64
}

// SampleOperatorMemory records the operator containers' memory usage and
// high-water mark against their limit (real node only).
func (s *Scenario) SampleOperatorMemory(ctx context.Context) error {
	if s.Env.InspectContainer == nil {
		return nil
	}
	pods, err := s.OperatorPods(ctx)
	if err != nil {
		return err
	}
	for _, p := range pods {
		for _, st := range p.Status.ContainerStatuses {
			if st.ContainerID == "" || st.State.Running == nil {
				continue
			}
			proc, err := s.Env.InspectContainer(st.ContainerID)
			if err != nil {
				return err
			}
			s.Memory = append(s.Memory, MemorySample{Pod: p.Name, Usage: proc.MemoryUsage, Peak: proc.MemoryPeak, Limit: proc.MemoryLimit})
			if t := st.LastTerminationState.Terminated; t != nil {
				return fmt.Errorf("operator pod %s restarted: %s (exit %d)", p.Name, t.Reason, t.ExitCode)
			}
		}
	}
	return nil
}

// CheckMemory fails if any sample's high-water mark reached its limit.
func (s *Scenario) CheckMemory() error {
	for _, m := range s.Memory {
		if m.Limit <= 0 || m.Peak >= m.Limit {
			return fmt.Errorf("operator pod %s: memory peak %d MiB, limit %d MiB", m.Pod, m.Peak>>20, m.Limit>>20)
		}
	}
	return nil
}

// CheckMetrics calls the operator's metrics endpoint at a pod's address:
// 401 without a token, 403 with the token of a service account that lacks
// the bundle's metrics-reader ClusterRole, 200 once it is bound.
func (s *Scenario) CheckMetrics(ctx context.Context) error {
	url, err := s.leaderMetricsURL(ctx)
	if err != nil {
		return err
	}
	reader, err := s.metricsReaderRole(ctx)
	if err != nil {
		return err
	}

	const ns = "e2e-metrics"
	if _, err := s.CS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	defer func() {
		ctx := context.WithoutCancel(ctx)
		_ = s.CS.RbacV1().ClusterRoleBindings().Delete(ctx, metricsReaderBinding, metav1.DeleteOptions{})
		_ = s.CS.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	}()
	noRole, err := s.serviceAccountToken(ctx, ns, "no-role")
	if err != nil {
		return err
	}
	scraper, err := s.serviceAccountToken(ctx, ns, "scraper")
	if err != nil {
		return err
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: metricsReaderBinding},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "scraper"}},
	}
	if _, err := s.CS.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// The operator's authorizer caches a denial for 30 s
	// (controller-runtime's DenyCacheTTL): a first scrape that reached the
	// API server before its RBAC cache held the new binding would be denied
	// for longer than the check waits. Scrape once the API server itself
	// authorizes the scraper.
	if err := s.waitAuthorized(ctx, "system:serviceaccount:"+ns+":scraper", "/metrics"); err != nil {
		return err
	}
	return s.checkMetricsAnswers(ctx, url, []metricsCaller{
		{"no token", "", http.StatusUnauthorized},
		{"a token without " + reader, noRole, http.StatusForbidden},
		{"a token bound to " + reader, scraper, http.StatusOK},
	})
}

// waitAuthorized waits until the API server allows user to GET the
// non-resource path.
func (s *Scenario) waitAuthorized(ctx context.Context, user, path string) error {
	return s.waitFor(ctx, 30*time.Second, user+" authorized to GET "+path, func(ctx context.Context) (bool, string, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:                  user,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"},
		}}
		got, err := s.CS.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return got.Status.Allowed, fmt.Sprintf("allowed %v: %s", got.Status.Allowed, got.Status.Reason), nil
	})
}

// metricsReaderBinding binds the bundle's metrics-reader ClusterRole to
// the service account CheckMetrics scrapes as.
const metricsReaderBinding = "e2e-metrics-reader"

// leaderMetricsURL is the metrics endpoint of the pod holding the leader
// lease: only its controllers have started, so only it reports their
// metrics.
func (s *Scenario) leaderMetricsURL(ctx context.Context) (string, error) {
	pods, err := s.OperatorPods(ctx)
	if err != nil {
		return "", err
	}
	leader, err := s.leaderName(ctx)
	if err != nil {
		return "", err
	}
	i := slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Name == leader })
	if i < 0 || pods[i].Status.PodIP == "" {
		return "", fmt.Errorf("the lease holder %q is no operator pod with an IP", leader)
	}
	return fmt.Sprintf("https://%s/metrics", net.JoinHostPort(pods[i].Status.PodIP, fmt.Sprint(MetricsPort))), nil
}

// metricsReaderRole names the bundle's metrics-reader ClusterRole.
func (s *Scenario) metricsReaderRole(ctx context.Context) (string, error) {
	roles, err := s.CS.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	reader := ""
	for _, r := range roles.Items {
		if strings.HasPrefix(r.Name, inferencestack.PackageName) && strings.HasSuffix(r.Name, "metrics-reader") {
			reader = r.Name
		}
	}
	if reader == "" {
		return "", fmt.Errorf("the bundle's metrics-reader ClusterRole is not installed")
	}
	return reader, nil
}

// serviceAccountToken creates service account ns/sa if needed and returns
// a token of it.
func (s *Scenario) serviceAccountToken(ctx context.Context, ns, sa string) (string, error) {
	if _, err := s.CS.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	tr, err := s.CS.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// metricsCaller is one caller of the metrics endpoint and the status it
// must get.
type metricsCaller struct {
	who, token string
	want       int
}

// checkMetricsAnswers calls url as each caller until it gets the status
// the caller must get; the authorized answer must hold the controllers'
// metrics.
func (s *Scenario) checkMetricsAnswers(ctx context.Context, url string, callers []metricsCaller) error {
	// The certificate is controller-runtime's self-signed one: what is
	// checked here is who may read, not the server's identity.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // see above
	for _, c := range callers {
		// RBAC changes reach the authorizer within moments; retry until
		// the expected answer or the deadline.
		var code int
		var body string
		err := s.waitFor(ctx, 30*time.Second, fmt.Sprintf("GET %s with %s → %d", url, c.who, c.want), func(context.Context) (bool, string, error) {
			var err error
			code, body, err = getMetrics(ctx, client, url, c.token)
			if err != nil {
				return false, err.Error(), nil
			}
			return code == c.want, fmt.Sprintf("%d %.200s", code, body), nil
		})
		if err != nil {
			return err
		}
		if c.want == http.StatusOK && !strings.Contains(body, "controller_runtime_reconcile_total") {
			return fmt.Errorf("metrics answered 200 without the controller's metrics: %.300s", body)
		}
		s.logf("metrics %s with %s: %d", url, c.who, code)
	}
	return nil
}

// getMetrics GETs url, with token as a bearer token unless it is empty,
// and returns the status and (the first MiB of) the body.
func getMetrics(ctx context.Context, client *http.Client, url, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(body), nil
}

// Handover deletes the operator pod holding the leader lease and waits
// until another replica holds it: one of the other running replicas if the
// Deployment has several, else the pod its ReplicaSet creates instead. It
// returns how long the lease took to change hands.
//
// The replica count is the bundle's: OLM owns the Deployment and puts back
// whatever it installed (a `kubectl scale` is reverted within seconds).
func (s *Scenario) Handover(ctx context.Context, image string) (time.Duration, error) {
	name := inferencestack.Namespace(s.Major)
	d, err := s.CS.AppsV1().Deployments(name).Get(ctx, inferencestack.InstanceName(s.Major), metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	replicas := 1
	if d.Spec.Replicas != nil {
		replicas = int(*d.Spec.Replicas)
	}
	pods, err := s.WaitOperatorReady(ctx, image, replicas)
	if err != nil {
		return 0, err
	}
	old, err := s.leaderName(ctx)
	if err != nil {
		return 0, err
	}
	if !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Name == old }) {
		return 0, fmt.Errorf("the lease holder %q is none of the operator pods", old)
	}
	if err := s.SampleOperatorMemory(ctx); err != nil {
		return 0, err
	}
	begin := time.Now()
	if err := s.CS.CoreV1().Pods(name).Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
		return 0, fmt.Errorf("deleting the leader pod %s: %w", old, err)
	}
	s.logf("deleted the leader pod %s (%d replica(s))", old, replicas)
	var holder string
	err = s.waitFor(ctx, 2*time.Minute, "another operator pod to take the lease from "+old, func(ctx context.Context) (bool, string, error) {
		h, err := s.leaderName(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		holder = h
		if h == old {
			return false, "still held by " + h, nil
		}
		p, err := s.CS.CoreV1().Pods(name).Get(ctx, h, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Sprintf("holder %s: %v", h, err), nil
		}
		return p.DeletionTimestamp == nil && podReady(p), "holder " + h + " not Ready", nil
	})
	if err != nil {
		return 0, err
	}
	took := time.Since(begin)
	s.Mark("lease handed over")
	s.logf("lease %s: %s → %s in %s", inferencestack.LeaseID(s.Major), old, holder, took.Round(10*time.Millisecond))
	_, err = s.WaitOperatorReady(ctx, image, replicas)
	return took, err
}

// leaderName is the name of the operator pod holding the leader lease.
func (s *Scenario) leaderName(ctx context.Context) (string, error) {
	l, err := s.CS.CoordinationV1().Leases(inferencestack.Namespace(s.Major)).Get(ctx, inferencestack.LeaseID(s.Major), metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading the operator's lease: %w", err)
	}
	// controller-runtime's identity is "<hostname>_<uuid>", and a pod's
	// hostname is its name.
	holder, _, _ := strings.Cut(fmt.Sprint(deref(l.Spec.HolderIdentity)), "_")
	return holder, nil
}
