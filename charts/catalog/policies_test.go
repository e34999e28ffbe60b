package catalogchart

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/olmlocal"
	"github.com/titanml/inference-stack-operator/e2e/harness/samples"
	"github.com/titanml/inference-stack-operator/operator/podsecurity/podsecuritytest"
)

// warnings collects the API server's warnings (Warning headers).
type warnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.seen
	w.seen = nil
	return out
}

// TestAdmissionPoliciesOnAPIServer installs the chart on a real
// kube-apiserver and checks each admission policy: it rejects (or warns
// about) a bad stack with a message naming the field, accepts the documented
// example, leaves stacks stored before it alone unless their spec changes,
// honours the namespace opt-in, and goes away when switched off.
func TestAdmissionPoliciesOnAPIServer(t *testing.T) {
	t.Parallel()
	c := localcluster.StartForTest(t, localcluster.Options{Nodes: []localcluster.Node{}, WithoutScheduler: true, WithoutControllerManager: true})
	ctx := t.Context()
	cfg := c.RESTConfig()
	if err := olmlocal.InstallCRDs(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	w := &warnings{}
	cfg.WarningHandler = w
	stacks := dynamic.NewForConfigOrDie(cfg).Resource(stackGVR)
	cs := kubernetes.NewForConfigOrDie(cfg)

	rel := Release{Kubeconfig: c.Kubeconfig(), Namespace: "inference-stack-system", Log: t.Logf}
	// switches turns every admission policy on but those named.
	switches := func(off ...string) map[string]any {
		p := map[string]any{}
		for name := range policiesOff {
			p[name] = map[string]any{"enabled": !slices.Contains(off, name)}
		}
		return map[string]any{"admissionPolicies": p}
	}
	if _, err := rel.Install(map[string]any{}); err != nil {
		t.Fatal(err)
	}
	dc := discovery.NewDiscoveryClientForConfigOrDie(cfg)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := dc.ServerResourcesForGroupVersion("models.takeoff.co/v1alpha1")
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the InferenceStack CRD is not served: %v", err)
	}

	newStack := func(namespace, name, major, spec string) *unstructured.Unstructured {
		t.Helper()
		var s map[string]any
		if err := yaml.Unmarshal([]byte(spec), &s); err != nil {
			t.Fatalf("test spec: %v", err)
		}
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "models.takeoff.co/v1alpha1", "kind": "InferenceStack",
			"metadata": map[string]any{"name": name, "namespace": namespace}, "spec": s,
		}}
		if major != "" {
			u.SetLabels(map[string]string{"operatorVersion": major})
		}
		return u
	}
	// try creates a stack (dry run unless real) and returns the error and
	// the warnings of that request.
	try := func(namespace, major, spec string, real bool) (error, []string) {
		t.Helper()
		w.take()
		name, opts := "dry-run", metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		if real {
			name, opts = "stored", metav1.CreateOptions{}
		}
		_, err := stacks.Namespace(namespace).Create(ctx, newStack(namespace, name, major, spec), opts)
		return err, w.take()
	}
	eventually := func(what string, cond func() (bool, string)) {
		t.Helper()
		var last string
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			ok, why := cond()
			last = why
			return ok, nil
		}); err != nil {
			t.Fatalf("%s: %s", what, last)
		}
	}

	const (
		privilegedSpec  = `gateway: {securityContext: {privileged: true}}`
		gatewayNameSpec = `applications: {llm-gateway: {}}`
		// The placement the first policies left open: tolerate the control-plane
		// taint and select control-plane nodes.
		controlPlaneSpec = `applications: {a: {tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}],
  nodeSelector: {node-role.kubernetes.io/control-plane: ""}}}`
		snippetSpec = `gateway: {ingress: {enabled: true, hosts: [{host: llm.example.com}],
  annotations: {nginx.ingress.kubernetes.io/server-snippet: "location /x { alias /var/run/secrets/; }"}}}`
	)
	eventually("the policies are in force", func() (bool, string) {
		err, _ := try("default", "v0", privilegedSpec, false)
		return err != nil, fmt.Sprintf("a privileged stack is accepted: %v", err)
	})

	// The namespaces of the three levels, set as a platform team sets
	// them for Pod Security Admission.
	levels := map[string]string{"baseline": "", "restricted": "restricted", "privileged": "privileged"}
	for level, label := range levels {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ps-" + level}}
		if label != "" {
			ns.Labels = map[string]string{"pod-security.kubernetes.io/enforce": label}
		}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("the Pod Security corpus gets the library's verdict, with the field named", func(t *testing.T) {
		for _, c := range podsecuritytest.Cases {
			spec, err := c.YAML()
			if err != nil {
				t.Fatal(err)
			}
			for level := range levels {
				want := level == "baseline" && c.Baseline || level == "restricted" && c.Restricted
				err, _ := try("ps-"+level, "v0", spec, false)
				switch {
				case want && err == nil:
					t.Errorf("%s at %s: accepted, want a denial", c.Name, level)
				case !want && err != nil:
					t.Errorf("%s at %s: %v", c.Name, level, err)
				case want && !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err):
					t.Errorf("%s at %s: %v, want a denial", c.Name, level, err)
				case want && (!strings.Contains(err.Error(), c.Field) || !strings.Contains(err.Error(), "pod-security.kubernetes.io/enforce")):
					t.Errorf("%s at %s: %q does not name %q and the level's label", c.Name, level, err, c.Field)
				case want:
					t.Logf("%s at %s: %v", c.Name, level, err)
				}
			}
		}
	})

	t.Run("a privileged namespace lifts Pod Security, not the name, placement or ingress rules", func(t *testing.T) {
		// Pod Security says what a pod may do on its node, not which
		// nodes it may land on.
		for name, spec := range map[string]string{"gateway-name": gatewayNameSpec, "placement": controlPlaneSpec, "ingress": snippetSpec} {
			if err, _ := try("ps-privileged", "v0", spec, false); err == nil {
				t.Errorf("a privileged namespace also lifted the %s rule", name)
			}
		}
	})

	t.Run("placement: no control-plane, reserved or cordoned nodes; GPU taints stay tolerable", func(t *testing.T) {
		var lists struct {
			ReservedTaints     []string `json:"reservedTaints"`
			ControlPlaneLabels []string `json:"controlPlaneLabels"`
			NodeNameLabels     []string `json:"nodeNameLabels"`
		}
		readYAML(t, "files/placement.yaml", &lists)
		// Every section of the spec that becomes a pod template, and the
		// spec setting the given pod settings there.
		sections := map[string]func(string) string{
			"spec.gateway":             func(pod string) string { return "gateway: " + pod },
			"spec.applicationTemplate": func(pod string) string { return "applicationTemplate: " + pod },
			"spec.applications.a":      func(pod string) string { return "applications: {a: " + pod + "}" },
		}
		refused := map[string]string{} // pod settings -> what the message names after the section's path
		for _, k := range lists.ReservedTaints {
			refused[`{tolerations: [{key: `+k+`, operator: Exists, effect: NoSchedule}]}`] = ".tolerations tolerates " + k
			refused[`{tolerations: [{key: nvidia.com/gpu, operator: Exists}, {key: `+k+`, operator: Equal, value: "true"}]}`] = ".tolerations tolerates " + k
		}
		refused[`{tolerations: [{operator: Exists}]}`] = ".tolerations has a toleration without a key"
		refused[`{tolerations: [{operator: Exists, effect: NoSchedule}]}`] = ".tolerations has a toleration without a key"
		for _, l := range lists.ControlPlaneLabels {
			refused[`{nodeSelector: {`+l+`: ""}}`] = ".nodeSelector selects " + l
			refused[`{affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [
  {matchExpressions: [{key: nvidia.com/gpu.present, operator: In, values: ["true"]}]},
  {matchExpressions: [{key: `+l+`, operator: Exists}]}]}}}}`] = ".affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution selects " + l
			refused[`{affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [
  {matchExpressions: [{key: `+l+`, operator: In, values: ["", "true"]}]}]}}}}`] = ".affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution selects " + l
			refused[`{affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [
  {weight: 100, preference: {matchExpressions: [{key: `+l+`, operator: Exists}]}}]}}}`] = ".affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution prefers " + l
		}
		// Nodes named, not selected: where the control-plane node is not
		// tainted, its name (or, with NotIn, the names of all the others)
		// lands a pod on it, and the name says nothing the policy can judge.
		for _, l := range lists.NodeNameLabels {
			refused[`{nodeSelector: {`+l+`: control-plane}}`] = ".nodeSelector names a node by " + l
			for _, op := range []string{"In", "NotIn"} {
				refused[`{affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [
  {matchExpressions: [{key: `+l+`, operator: `+op+`, values: [control-plane]}]}]}}}}`] = ".affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution names a node by " + l
			}
			refused[`{affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [
  {weight: 100, preference: {matchExpressions: [{key: `+l+`, operator: In, values: [control-plane]}]}}]}}}`] = ".affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution names a node by " + l
		}
		for _, op := range []string{"In", "NotIn"} {
			refused[`{affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [
  {matchExpressions: [{key: nvidia.com/gpu.present, operator: In, values: ["true"]}]},
  {matchFields: [{key: metadata.name, operator: `+op+`, values: [control-plane]}]}]}}}}`] = ".affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[1].matchFields names a node by metadata.name"
		}
		refused[`{affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [
  {weight: 100, preference: {matchFields: [{key: metadata.name, operator: In, values: [control-plane]}]}}]}}}`] = ".affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchFields names a node by metadata.name"
		// Following the control plane's pods onto their node, or any other
		// namespace's pods: terms may select the stack's own namespace's
		// pods only.
		apiserver := `labelSelector: {matchLabels: {component: kube-apiserver}}, topologyKey: kubernetes.io/hostname`
		refused[`{affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{`+apiserver+`, namespaces: [default, kube-system]}]}}}`] = ".affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaces[1]"
		refused[`{affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{`+apiserver+`, namespaceSelector: {}}]}}}`] = ".affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaceSelector is set"
		refused[`{affinity: {podAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [
  {weight: 1, podAffinityTerm: {labelSelector: {matchLabels: {app: x}}, topologyKey: kubernetes.io/hostname}},
  {weight: 100, podAffinityTerm: {`+apiserver+`, namespaces: [kube-system]}}]}}}`] = ".affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[1].podAffinityTerm.namespaces[0]"
		refused[`{affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [
  {labelSelector: {matchLabels: {app: x}}, topologyKey: kubernetes.io/hostname, namespaceSelector: {matchLabels: {team: b}}}]}}}`] = ".affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaceSelector is set"
		refused[`{affinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [
  {weight: 100, podAffinityTerm: {labelSelector: {matchLabels: {app: x}}, topologyKey: kubernetes.io/hostname, namespaces: [victim]}}]}}}`] = ".affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.namespaces[0]"
		for path, spec := range sections {
			for pod, want := range refused {
				err, _ := try("default", "v0", spec(pod), false)
				switch {
				case err == nil:
					t.Errorf("%s: %s: accepted", path, pod)
				case !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err):
					t.Errorf("%s: %s: %v, want a denial", path, pod, err)
				case !strings.Contains(err.Error(), path+want) || !strings.Contains(err.Error(), "models.takeoff.co/placement=unrestricted"):
					t.Errorf("%s: %s: %q does not name %q and the namespace label", path, pod, err, path+want)
				}
			}
		}
		err, _ := try("default", "v0", controlPlaneSpec, false)
		if err == nil || !strings.Contains(err.Error(), "spec.applications.a.tolerations tolerates node-role.kubernetes.io/control-plane") {
			t.Errorf("a stack tolerating the control-plane taint and selecting control-plane nodes: %v, want a denial naming the toleration", err)
		} else {
			t.Logf("control-plane placement: %v", err)
		}

		// GPU nodes are the product's purpose: their taint stays
		// tolerable; so are the other taints, and keeping pods off
		// control-plane nodes.
		for _, spec := range []string{
			`applications: {a: {tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}], nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}}`,
			`applicationTemplate: {tolerations: [{key: nvidia.com/gpu, operator: Equal, value: present}, {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 30}]}`,
			`gateway: {tolerations: [{key: dedicated, operator: Equal, value: inference, effect: NoSchedule}],
  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [
    {key: node-role.kubernetes.io/control-plane, operator: DoesNotExist}, {key: node-role.kubernetes.io/master, operator: NotIn, values: [""]}]}]}}}}`,
			// Spreading the stack's own pods over nodes, and keeping them
			// together, name no node and select no other namespace's pods.
			`applications: {a: {tolerations: [{key: nvidia.com/gpu, operator: Exists}], affinity: {
  podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{labelSelector: {matchLabels: {app.kubernetes.io/instance: dry-run}}, topologyKey: kubernetes.io/hostname}],
    preferredDuringSchedulingIgnoredDuringExecution: [{weight: 50, podAffinityTerm: {labelSelector: {matchLabels: {app: a}}, topologyKey: kubernetes.io/hostname, namespaces: [default]}}]},
  podAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 10, podAffinityTerm: {labelSelector: {matchLabels: {app: b}}, topologyKey: topology.kubernetes.io/zone}}]},
  nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 1, preference: {matchExpressions: [{key: nvidia.com/gpu.product, operator: In, values: [NVIDIA-H100-80GB-HBM3]}]}}]}}}}`,
		} {
			if err, warns := try("default", "v0", spec, false); err != nil || len(warns) > 0 {
				t.Errorf("%s: %v, warnings %q", spec, err, warns)
			}
		}

		// The platform team's label exempts a namespace, and only its
		// value unrestricted does.
		for name, value := range map[string]string{"placement-unrestricted": "unrestricted", "placement-other": "gpu-only"} {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"models.takeoff.co/placement": value}}}
			if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err, _ := try("placement-unrestricted", "v0", controlPlaneSpec, false); err != nil {
			t.Errorf("an unrestricted namespace: %v", err)
		}
		if err, _ := try("placement-other", "v0", controlPlaneSpec, false); err == nil {
			t.Error("a namespace labelled models.takeoff.co/placement: gpu-only lifted the placement rule")
		}
		if err, _ := try("placement-unrestricted", "v0", privilegedSpec, false); err == nil {
			t.Error("models.takeoff.co/placement: unrestricted also lifted Pod Security")
		}
	})

	t.Run("ingress: listed annotations only, no snippets, no requests elsewhere, no other namespace's objects, no configuration syntax", func(t *testing.T) {
		var lists struct {
			AllowedAnnotations              []string          `json:"allowedAnnotations"`
			RefusedAnnotationSuffixes       []string          `json:"refusedAnnotationSuffixes"`
			RefusedAnnotations              map[string]string `json:"refusedAnnotations"`
			ReferenceAnnotations            []string          `json:"referenceAnnotations"`
			ConfigurationAnnotationPrefixes []string          `json:"configurationAnnotationPrefixes"`
		}
		readYAML(t, "files/ingress.yaml", &lists)
		ingress := func(annotations, paths string) string {
			return `gateway: {ingress: {enabled: true, className: nginx, annotations: ` + annotations + `,
  hosts: [{host: llm.example.com, paths: ` + paths + `}]}}`
		}
		// JSON is YAML: values with quotes and line breaks, written once.
		annotations := func(m map[string]string) string {
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
		// refused tries each stack and wants a denial naming the annotation
		// and saying why.
		refused := func(namespace string, cases map[string]map[string]string, why string) {
			t.Helper()
			for a, m := range cases {
				err, _ := try(namespace, "v0", ingress(annotations(m), `[{path: /}]`), false)
				switch {
				case err == nil:
					t.Errorf("%s %q: accepted", a, m[a])
				case !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err):
					t.Errorf("%s: %v, want a denial", a, err)
				case !strings.Contains(err.Error(), "spec.gateway.ingress.annotations["+a+"]") || !strings.Contains(err.Error(), why):
					t.Errorf("%s %q: %q does not name the annotation and say %q", a, m[a], err, why)
				}
			}
		}

		// Refused whatever the lists say: snippets, requests elsewhere,
		// values once written into the controller's configuration
		// unchecked, with the injections that used them.
		never := map[string]map[string]string{}
		for _, a := range []string{
			"nginx.ingress.kubernetes.io/configuration-snippet", "nginx.ingress.kubernetes.io/server-snippet",
			"nginx.ingress.kubernetes.io/auth-snippet", "nginx.ingress.kubernetes.io/Server-Snippet",
			"nginx.org/server-snippets", "nginx.org/location-snippets", "haproxy.org/backend-config-snippet",
		} {
			never[a] = map[string]string{a: "x", "nginx.ingress.kubernetes.io/proxy-read-timeout": "600"}
		}
		for _, suffix := range lists.RefusedAnnotationSuffixes {
			if !slices.ContainsFunc(slices.Collect(maps.Keys(never)), func(a string) bool { return strings.HasSuffix(strings.ToLower(a), suffix) }) {
				t.Errorf("no annotation of this test ends in %s", suffix)
			}
		}
		for a := range lists.RefusedAnnotations {
			never[a] = map[string]string{a: "https://example.com/", "nginx.ingress.kubernetes.io/proxy-read-timeout": "600"}
			if slices.Contains(lists.AllowedAnnotations, a) {
				t.Errorf("%s is both allowed and refused", a)
			}
		}
		refused("default", never, "a stack may not give the ingress controller configuration of its own")
		refused("default", map[string]map[string]string{
			// CVE-2025-1097 and CVE-2023-5044: the value closes the
			// directive it is written into and adds its own.
			"nginx.ingress.kubernetes.io/auth-tls-match-cn": {"nginx.ingress.kubernetes.io/auth-tls-match-cn": "CN=a\"){}}}location ~* ^/x {alias /var/run/secrets/kubernetes.io/serviceaccount/;}#",
				"nginx.ingress.kubernetes.io/auth-tls-secret": "default/ca", "nginx.ingress.kubernetes.io/auth-tls-verify-client": "on"},
			"nginx.ingress.kubernetes.io/permanent-redirect": {"nginx.ingress.kubernetes.io/permanent-redirect": "https://example.com;}location /x {alias /etc/;}#"},
		}, "unchecked (CVE-")

		// References into other namespaces, allowed keys or not: the
		// controller would read them for the stack with its own power.
		foreign := map[string]map[string]string{}
		for _, a := range lists.ReferenceAnnotations {
			foreign[a] = map[string]string{a: "kube-system/x"}
		}
		refused("default", foreign, "may name only objects of the stack's own namespace")
		refused("default", map[string]map[string]string{
			"nginx.ingress.kubernetes.io/auth-tls-secret":  {"nginx.ingress.kubernetes.io/auth-tls-secret": "kube-system/kubeadm-ca", "nginx.ingress.kubernetes.io/auth-tls-verify-client": "on"},
			"nginx.ingress.kubernetes.io/proxy-ssl-secret": {"nginx.ingress.kubernetes.io/proxy-ssl-secret": "victim/backend-tls", "nginx.ingress.kubernetes.io/backend-protocol": "HTTPS"},
			"nginx.ingress.kubernetes.io/custom-headers":   {"nginx.ingress.kubernetes.io/custom-headers": "victim/headers"},
			"nginx.ingress.kubernetes.io/auth-secret":      {"nginx.ingress.kubernetes.io/auth-secret": "Kube-System/basic-auth", "nginx.ingress.kubernetes.io/auth-type": "basic"},
			// Her namespace's name as a prefix of another's.
			"nginx.ingress.kubernetes.io/default-backend": {"nginx.ingress.kubernetes.io/default-backend": "default-victim/svc"},
		}, "may name only objects of the stack's own namespace")

		// Not on the list: another controller's, one that merges other
		// namespaces' routes, one that adds hosts or steals a share of
		// another Ingress's traffic, a case variant.
		unlisted := map[string]map[string]string{}
		for _, a := range []string{
			"nginx.ingress.kubernetes.io/server-alias", "nginx.ingress.kubernetes.io/canary", "nginx.ingress.kubernetes.io/upstream-vhost",
			"nginx.ingress.kubernetes.io/temporal-redirect", "nginx.ingress.kubernetes.io/Proxy-Read-Timeout", "alb.ingress.kubernetes.io/group.name",
			"traefik.ingress.kubernetes.io/router.middlewares", "example.com/anything",
		} {
			unlisted[a] = map[string]string{a: "x"}
		}
		refused("default", unlisted, "admissionPolicies.ingress.extraAllowedAnnotations")

		// Configuration syntax in the values the controller writes into
		// its configuration, in allowed annotations.
		syntax := map[string]map[string]string{}
		for a, v := range map[string]string{
			"rewrite-target": "/$1;}location /x {alias /etc/;}#", "proxy-read-timeout": "600\nx", "auth-realm": `a"b`, "cors-allow-origin": "'",
			"x-forwarded-prefix": "\\", "proxy-ssl-name": "`", "cors-allow-headers": "#", "proxy-body-size": "{",
		} {
			a = "nginx.ingress.kubernetes.io/" + a
			if !slices.Contains(lists.AllowedAnnotations, a) {
				t.Fatalf("%s is not allowed: the test would try the list, not the value", a)
			}
			syntax[a] = map[string]string{a: v}
		}
		refused("default", syntax, "may not contain control characters, quotes, backslashes, backticks, semicolons, braces or #")

		for _, path := range []string{`"/v1;}location /x {alias /var/run/secrets/;"`, `"/a\nb"`, `"/a b"`, `"/a#b"`, `"/a\"b"`, `"/a\\b"`, "\"/a`b\"", `"/a'b"`} {
			err, _ := try("default", "v0", ingress(`{}`, `[{path: /ok}, {path: `+path+`, pathType: ImplementationSpecific}]`), false)
			if err == nil || !strings.Contains(err.Error(), "spec.gateway.ingress.hosts[0].paths[1].path") || strings.Contains(err.Error(), "paths[0]") {
				t.Errorf("path %s: %v, want a denial naming it alone", path, err)
			}
		}

		// The stack's own route: every listed annotation, rewrites,
		// timeouts, TLS with the namespace's own Secrets (with or without
		// the namespace), regular expressions, another controller's JSON,
		// and any annotation of the Service.
		every := map[string]string{}
		for _, a := range lists.AllowedAnnotations {
			every[a] = "on"
		}
		for _, spec := range []string{
			ingress(annotations(every), `[{path: /}]`),
			ingress(`{nginx.ingress.kubernetes.io/rewrite-target: /$2, nginx.ingress.kubernetes.io/use-regex: "true", nginx.ingress.kubernetes.io/proxy-read-timeout: "600",
    nginx.ingress.kubernetes.io/proxy-body-size: 64m, nginx.ingress.kubernetes.io/proxy-buffering: "off", nginx.ingress.kubernetes.io/ssl-redirect: "true",
    nginx.ingress.kubernetes.io/backend-protocol: HTTPS, nginx.ingress.kubernetes.io/proxy-ssl-secret: default/backend-tls, nginx.ingress.kubernetes.io/proxy-ssl-verify: "on",
    nginx.ingress.kubernetes.io/auth-tls-secret: ca, nginx.ingress.kubernetes.io/auth-tls-verify-client: "on",
    nginx.ingress.kubernetes.io/cors-allow-headers: "DNT, Authorization, Content-Type", nginx.ingress.kubernetes.io/whitelist-source-range: "10.0.0.0/8, 192.168.0.0/16",
    cert-manager.io/cluster-issuer: letsencrypt, kubernetes.io/ingress.class: nginx}`, `[{path: "/llm(/|$)(.*)", pathType: ImplementationSpecific}, {path: /v1.0/~models, pathType: Exact}]`),
			ingress(annotations(map[string]string{"alb.ingress.kubernetes.io/listen-ports": `[{"HTTPS": 443}]`, "alb.ingress.kubernetes.io/scheme": "internal"}), `[{path: /}]`),
			`gateway: {service: {type: LoadBalancer, annotations: {service.beta.kubernetes.io/aws-load-balancer-internal: "true"}}}`,
		} {
			if err, warns := try("default", "v0", spec, false); err != nil || len(warns) > 0 {
				t.Errorf("%s: %v, warnings %q", spec, err, warns)
			}
		}

		// The platform's additions pass, still held to its namespace and
		// to no configuration syntax; nothing else moves.
		extra := switches()
		extra["admissionPolicies"].(map[string]any)["ingress"] = map[string]any{"enabled": true,
			"extraAllowedAnnotations": []any{"nginx.ingress.kubernetes.io/custom-headers", "nginx.ingress.kubernetes.io/proxy-buffer-size", "nginx.org/proxy-read-timeout"}}
		if _, err := rel.Upgrade(extra); err != nil {
			t.Fatal(err)
		}
		buffer := ingress(`{nginx.ingress.kubernetes.io/proxy-buffer-size: 16k}`, `[{path: /}]`)
		eventually("an added annotation passes", func() (bool, string) {
			err, _ := try("default", "v0", buffer, false)
			return err == nil, fmt.Sprintf("still denied: %v", err)
		})
		if err, _ := try("default", "v0", ingress(`{nginx.ingress.kubernetes.io/custom-headers: default/headers}`, `[{path: /}]`), false); err != nil {
			t.Errorf("an added reference to the namespace's own ConfigMap: %v", err)
		}
		refused("default", map[string]map[string]string{"nginx.ingress.kubernetes.io/custom-headers": {"nginx.ingress.kubernetes.io/custom-headers": "victim/headers"}},
			"may name only objects of the stack's own namespace")
		for _, prefix := range lists.ConfigurationAnnotationPrefixes {
			a := map[string]string{"nginx.ingress.kubernetes.io/": "nginx.ingress.kubernetes.io/proxy-buffer-size", "nginx.org/": "nginx.org/proxy-read-timeout"}[prefix]
			if a == "" {
				t.Errorf("no annotation of this test starts with %s", prefix)
				continue
			}
			if err, _ := try("default", "v0", ingress(annotations(map[string]string{a: "16"}), `[{path: /}]`), false); err != nil {
				t.Errorf("an added %s: %v", a, err)
			}
			refused("default", map[string]map[string]string{a: {a: "16;}"}}, "may not contain control characters")
		}
		refused("default", unlisted, "admissionPolicies.ingress.extraAllowedAnnotations")
		if _, err := rel.Upgrade(switches()); err != nil {
			t.Fatal(err)
		}
		eventually("the addition is gone", func() (bool, string) {
			err, _ := try("default", "v0", buffer, false)
			return err != nil, "still accepted"
		})
	})

	t.Run("bad stacks that used to pass admission are stopped there", func(t *testing.T) {
		// Each was accepted before the CRD rules and these policies, and
		// failed (or worked) only once the operator applied it.
		bad := map[string]string{
			"privileged pods":                `gateway: {securityContext: {privileged: true}}`,
			"hostPath mounts":                `applications: {a: {volumes: [{name: h, hostPath: {path: /etc}}], volumeMounts: [{name: h, mountPath: /host}]}}`,
			"another ServiceAccount":         `serviceAccount: {create: false, name: builder}`,
			"added capabilities":             `applicationTemplate: {securityContext: {capabilities: {add: [SYS_ADMIN]}}}`,
			"readerConfig.tensorparallel":    `applications: {a: {readerConfig: {device: cuda, tensorparallel: 4}}}`,
			"periodSeconds: -5":              `applications: {a: {readinessProbe: {httpGet: {port: 3001}, periodSeconds: -5}}}`,
			"env name with =":                `gateway: {env: [{name: "A=B", value: x}]}`,
			"application named gateway":      `applications: {gateway: {}}`,
			"application named *-gateway":    `applications: {llm-gateway: {}}`,
			"Windows host process":           `gateway: {securityContext: {windowsOptions: {hostProcess: true}}}`,
			"value and valueFrom in one env": `applications: {a: {env: [{name: A, value: x, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]}}`,
			"control-plane placement":        controlPlaneSpec,
			"a toleration of every taint":    `gateway: {tolerations: [{operator: Exists}]}`,
			"cordoned nodes":                 `applicationTemplate: {tolerations: [{key: node.kubernetes.io/unschedulable, operator: Exists}]}`,
			"a node named by matchFields":    `applications: {a: {affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [cp]}]}]}}}}}`,
			"a node named by hostname":       `gateway: {nodeSelector: {kubernetes.io/hostname: cp}}`,
			"affinity to kube-system's pods": `gateway: {affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{labelSelector: {matchLabels: {component: etcd}}, namespaces: [kube-system], topologyKey: kubernetes.io/hostname}]}}}`,
			"an injected permanent-redirect": `gateway: {ingress: {enabled: true, hosts: [{host: a.example.com}], annotations: {nginx.ingress.kubernetes.io/permanent-redirect: "https://a;}#"}}}`,
			"kube-system's Secrets":          `gateway: {ingress: {enabled: true, hosts: [{host: a.example.com}], annotations: {nginx.ingress.kubernetes.io/auth-tls-secret: kube-system/ca}}}`,
			"a server-snippet":               snippetSpec,
		}
		stopped := 0
		for name, spec := range bad {
			if err, _ := try("default", "v0", spec, false); err != nil {
				stopped++
			} else {
				t.Errorf("%s: accepted", name)
			}
		}
		t.Logf("%d of %d bad stacks stopped at admission", stopped, len(bad))
	})

	t.Run("stacks of unknown majors get a warning, not a denial", func(t *testing.T) {
		for major, want := range map[string]string{
			"":   "metadata.labels.operatorVersion is not set",
			"v7": "metadata.labels.operatorVersion is v7: this cluster runs no operator of that major (it runs v0)",
		} {
			err, warns := try("default", major, samples.ExampleSpec, false)
			if err != nil {
				t.Errorf("operatorVersion %q: denied: %v", major, err)
			}
			if len(warns) != 1 || !strings.Contains(warns[0], want) {
				t.Errorf("operatorVersion %q: warnings %q, want one saying %q", major, warns, want)
			}
			t.Logf("operatorVersion %q: warning %q", major, warns)
		}
	})

	t.Run("the documented example and safe settings are accepted without warnings", func(t *testing.T) {
		for _, spec := range []string{
			samples.ExampleSpec,
			`serviceAccount: {create: true, name: my-own}
gateway: {securityContext: {capabilities: {drop: [ALL]}, privileged: false}}
applications: {gatewayish: {modelsVolume: {persistentVolumeClaim: {claimName: models}}, volumes: [{name: cache, emptyDir: {}}]}}`,
		} {
			if err, warns := try("default", "v0", spec, false); err != nil || len(warns) > 0 {
				t.Errorf("%s: %v, warnings %q", spec, err, warns)
			}
		}
	})

	t.Run("host namespaces cannot even be asked for", func(t *testing.T) {
		// The CRD has no hostNetwork/hostPID/hostIPC/hostUsers: the API
		// server prunes them before any policy runs.
		u := newStack("default", "pruned", "v0", `gateway: {hostNetwork: true, hostPID: true}`)
		got, err := stacks.Namespace("default").Create(ctx, u, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if gw, _, _ := unstructured.NestedMap(got.Object, "spec", "gateway"); len(gw) != 0 {
			t.Errorf("host namespace fields were stored: %v", gw)
		}
	})

	t.Run("each policy can be switched off", func(t *testing.T) {
		if _, err := rel.Upgrade(switches("podSecurity")); err != nil {
			t.Fatal(err)
		}
		eventually("pod security off", func() (bool, string) {
			err, _ := try("default", "v0", privilegedSpec, false)
			return err == nil, fmt.Sprintf("still denied: %v", err)
		})
		for name, spec := range map[string]string{"gateway-name": gatewayNameSpec, "placement": controlPlaneSpec, "ingress": snippetSpec} {
			if err, _ := try("default", "v0", spec, false); err == nil {
				t.Errorf("switching pod security off also switched the %s rule off", name)
			}
		}
		// A privileged stack stored while the policy was off, for below.
		if err, _ := try("default", "v0", privilegedSpec, true); err != nil {
			t.Fatal(err)
		}

		if _, err := rel.Upgrade(switches("podSecurity", "gatewayNames")); err != nil {
			t.Fatal(err)
		}
		eventually("gateway names off", func() (bool, string) {
			err, _ := try("default", "v0", gatewayNameSpec, false)
			return err == nil, fmt.Sprintf("still denied: %v", err)
		})

		if _, err := rel.Upgrade(switches("podSecurity", "gatewayNames", "placement")); err != nil {
			t.Fatal(err)
		}
		eventually("placement off", func() (bool, string) {
			err, _ := try("default", "v0", controlPlaneSpec, false)
			return err == nil, fmt.Sprintf("still denied: %v", err)
		})
		if err, _ := try("default", "v0", snippetSpec, false); err == nil {
			t.Error("switching placement off also switched the ingress rule off")
		}

		if _, err := rel.Upgrade(switches("podSecurity", "gatewayNames", "placement", "ingress")); err != nil {
			t.Fatal(err)
		}
		eventually("ingress off", func() (bool, string) {
			err, _ := try("default", "v0", snippetSpec, false)
			return err == nil, fmt.Sprintf("still denied: %v", err)
		})
		if _, warns := try("default", "", samples.ExampleSpec, false); len(warns) == 0 {
			t.Error("switching the others off also switched the operator-version warning off")
		}

		if _, err := rel.Upgrade(switches("podSecurity", "gatewayNames", "placement", "ingress", "operatorVersion")); err != nil {
			t.Fatal(err)
		}
		eventually("operator-version warning off", func() (bool, string) {
			_, warns := try("default", "", samples.ExampleSpec, false)
			return len(warns) == 0, fmt.Sprintf("still warned: %q", warns)
		})
	})

	t.Run("a stack stored before the policy keeps working until its spec changes", func(t *testing.T) {
		if _, err := rel.Upgrade(switches()); err != nil {
			t.Fatal(err)
		}
		eventually("the policies are back", func() (bool, string) {
			err, _ := try("default", "v0", privilegedSpec, false)
			return err != nil, "a privileged stack is accepted"
		})
		s, err := stacks.Namespace("default").Get(ctx, "stored", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// What the operator writes (finalizer, claim label) and a relabel
		// are not spec changes.
		s.SetFinalizers([]string{"uninstall-helm-release"})
		s.SetLabels(map[string]string{"operatorVersion": "v0", "models.takeoff.co/reconciled-by": "v0"})
		if s, err = stacks.Namespace("default").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("metadata update of a stored privileged stack: %v", err)
		}
		_ = unstructured.SetNestedField(s.Object, int64(2), "spec", "gateway", "replicaCount")
		if _, err := stacks.Namespace("default").Update(ctx, s, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "spec.gateway.securityContext.privileged") {
			t.Errorf("spec change of a privileged stack: %v, want the denial", err)
		}
		s, err = stacks.Namespace("default").Get(ctx, "stored", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.SetFinalizers(nil)
		if _, err := stacks.Namespace("default").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("removing the finalizer: %v", err)
		}
		if err := stacks.Namespace("default").Delete(ctx, "stored", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting it: %v", err)
		}
	})
}

// TestTenantRBAC: a user holding only the built-in edit role in a
// namespace creates, changes and deletes stacks there (the chart's
// aggregated role), cannot write their status or touch another namespace's
// stacks, and gets nothing privileged onto a node through one; a viewer
// reads stacks and changes none.
func TestTenantRBAC(t *testing.T) {
	t.Parallel()
	c := localcluster.StartForTest(t, localcluster.Options{Nodes: []localcluster.Node{}, WithoutScheduler: true})
	ctx := t.Context()
	cfg := c.RESTConfig()
	cs := kubernetes.NewForConfigOrDie(cfg)
	if err := olmlocal.InstallCRDs(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	rel := Release{Kubeconfig: c.Kubeconfig(), Namespace: "inference-stack-system", Log: t.Logf}
	if _, err := rel.Install(map[string]any{}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for user, role := range map[string]string{"alice": "edit", "victor": "view"} {
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: "team-a"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
		}
		if _, err := cs.RbacV1().RoleBindings("team-a").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	as := func(user string) dynamic.NamespaceableResourceInterface {
		u := rest.CopyConfig(cfg)
		u.Impersonate = rest.ImpersonationConfig{UserName: user}
		return dynamic.NewForConfigOrDie(u).Resource(stackGVR)
	}
	stack := func(name, spec string) *unstructured.Unstructured {
		var s map[string]any
		if err := yaml.Unmarshal([]byte(spec), &s); err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "models.takeoff.co/v1alpha1", "kind": "InferenceStack",
			"metadata": map[string]any{"name": name, "labels": map[string]any{"operatorVersion": "v0"}}, "spec": s,
		}}
	}

	// The aggregation controller folds the chart's rules into edit and
	// view: wait for that.
	alice := as("alice")
	var created *unstructured.Unstructured
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		created, err = alice.Namespace("team-a").Create(ctx, stack("mine", samples.ExampleSpec), metav1.CreateOptions{})
		return err == nil, nil
	}); err != nil {
		edit, _ := cs.RbacV1().ClusterRoles().Get(ctx, "edit", metav1.GetOptions{})
		t.Fatalf("a namespace editor cannot create a stack: %v (edit's rules: %v)", err, edit)
	}
	created.Object["spec"].(map[string]any)["gateway"] = map[string]any{"replicaCount": int64(2)}
	if _, err := alice.Namespace("team-a").Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Errorf("the editor cannot change her stack: %v", err)
	}
	// Policies are loaded a moment after the chart installs them.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := alice.Namespace("team-a").Create(ctx, stack("privileged", `gateway: {securityContext: {privileged: true}}`), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil, nil
	}); err != nil {
		t.Fatal("the admission policies are not in force")
	}
	// Dry runs: admission judges them all the same, and none is left
	// behind to make the next one a name conflict.
	for name, c := range map[string]struct{ spec, field string }{
		"privileged":      {`gateway: {securityContext: {privileged: true}}`, "spec.gateway.securityContext.privileged"},
		"host path":       {`applications: {a: {modelsVolume: {hostPath: {path: /}}}}`, "spec.applications.a.modelsVolume"},
		"another account": {`serviceAccount: {create: false, name: default}`, "spec.serviceAccount.create"},
		"control-plane placement": {`applications: {a: {tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}],
  nodeSelector: {node-role.kubernetes.io/control-plane: ""}}}`, "spec.applications.a.tolerations tolerates node-role.kubernetes.io/control-plane"},
		"cordoned nodes":              {`gateway: {tolerations: [{key: node.kubernetes.io/unschedulable, operator: Exists}]}`, "spec.gateway.tolerations tolerates node.kubernetes.io/unschedulable"},
		"every taint":                 {`applicationTemplate: {tolerations: [{operator: Exists}]}`, "spec.applicationTemplate.tolerations has a toleration without a key"},
		"control-plane node affinity": {`gateway: {affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: node-role.kubernetes.io/master, operator: Exists}]}]}}}}`, "spec.gateway.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution selects node-role.kubernetes.io/master"},
		// Where the control-plane node is not tainted, naming it, or
		// following the API server's pods, lands a pod on it.
		"the control-plane node by matchFields (an application)": {`applications: {a: {affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [
  {matchFields: [{key: metadata.name, operator: In, values: [control-plane]}]}]}}}}}`,
			"spec.applications.a.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields"},
		"the control-plane node by matchFields (the gateway)": {`gateway: {affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [
  {matchFields: [{key: metadata.name, operator: In, values: [control-plane]}]}]}}}}`,
			"spec.gateway.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields"},
		"the control-plane node by hostname": {`gateway: {nodeSelector: {kubernetes.io/hostname: control-plane}}`, "spec.gateway.nodeSelector names a node by kubernetes.io/hostname"},
		"affinity to the API server's pods": {`applications: {a: {affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [
  {labelSelector: {matchLabels: {component: kube-apiserver}}, namespaces: [kube-system], topologyKey: kubernetes.io/hostname}]}}}}`,
			"spec.applications.a.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaces[0]"},
		"a server-snippet": {`gateway: {ingress: {enabled: true, hosts: [{host: a.example.com}], annotations: {nginx.ingress.kubernetes.io/server-snippet: "return 200;"}}}`,
			"spec.gateway.ingress.annotations[nginx.ingress.kubernetes.io/server-snippet]"},
		"an auth-url": {`gateway: {ingress: {enabled: true, hosts: [{host: a.example.com}], annotations: {nginx.ingress.kubernetes.io/auth-url: "http://vault.team-b.svc:8200/"}}}`,
			"spec.gateway.ingress.annotations[nginx.ingress.kubernetes.io/auth-url]"},
		// Injections through annotation values (CVE-2025-1097,
		// CVE-2023-5044), and the controller reading another namespace's
		// Secrets and ConfigMaps for her.
		"an injected auth-tls-match-cn": {`gateway: {ingress: {enabled: true, hosts: [{host: a.example.com}], annotations: {nginx.ingress.kubernetes.io/auth-tls-secret: team-a/ca,
  nginx.ingress.kubernetes.io/auth-tls-match-cn: "CN=a\\\"){}}}location /x {alias /var/run/secrets/;}#"}}}`,
			"spec.gateway.ingress.annotations[nginx.ingress.kubernetes.io/auth-tls-match-cn]"},
		"an injected permanent-redirect": {`gateway: {ingress: {enabled: true, hosts: [{host: a.example.com}], annotations: {nginx.ingress.kubernetes.io/permanent-redirect: "https://a;}location /x {alias /etc/;}#"}}}`,
			"spec.gateway.ingress.annotations[nginx.ingress.kubernetes.io/permanent-redirect]"},
		"kube-system's CA for client certificates": {`gateway: {ingress: {enabled: true, hosts: [{host: a.example.com}], annotations: {nginx.ingress.kubernetes.io/auth-tls-secret: kube-system/kubeadm-ca}}}`,
			"spec.gateway.ingress.annotations[nginx.ingress.kubernetes.io/auth-tls-secret]"},
		"another namespace's backend certificate": {`gateway: {ingress: {enabled: true, hosts: [{host: a.example.com}], annotations: {nginx.ingress.kubernetes.io/proxy-ssl-secret: team-b/tls}}}`,
			"spec.gateway.ingress.annotations[nginx.ingress.kubernetes.io/proxy-ssl-secret]"},
		"another namespace's headers": {`gateway: {ingress: {enabled: true, hosts: [{host: a.example.com}], annotations: {nginx.ingress.kubernetes.io/custom-headers: team-b/headers}}}`,
			"spec.gateway.ingress.annotations[nginx.ingress.kubernetes.io/custom-headers]"},
	} {
		_, err := alice.Namespace("team-a").Create(ctx, stack("bad", c.spec), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			t.Errorf("the editor created a stack with %s", name)
		} else if !strings.Contains(err.Error(), c.field) {
			t.Errorf("the editor's stack with %s: %q does not name %s", name, err, c.field)
		}
	}
	// A GPU reader's toleration, spreading her pods over nodes, a
	// LoadBalancer Service of her own and the ingress annotations of her
	// own route are hers to set.
	if _, err := alice.Namespace("team-a").Create(ctx, stack("gpu", `
gateway:
  service: {type: LoadBalancer, annotations: {service.beta.kubernetes.io/aws-load-balancer-internal: "true"}}
  ingress: {enabled: true, hosts: [{host: a.example.com}], annotations: {nginx.ingress.kubernetes.io/proxy-read-timeout: "600",
    nginx.ingress.kubernetes.io/auth-tls-secret: team-a/clients-ca, nginx.ingress.kubernetes.io/auth-tls-verify-client: "on", cert-manager.io/cluster-issuer: letsencrypt}}
  affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{labelSelector: {matchLabels: {app.kubernetes.io/instance: gpu}}, topologyKey: kubernetes.io/hostname}]}}
applications: {a: {readerConfig: {device: cuda}, tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]}}`), metav1.CreateOptions{}); err != nil {
		t.Errorf("the editor cannot create a GPU stack with a LoadBalancer and an Ingress: %v", err)
	}
	if _, err := alice.Namespace("team-a").UpdateStatus(ctx, created, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the editor writing a stack's status: %v, want forbidden", err)
	}
	if _, err := alice.Namespace("team-b").Create(ctx, stack("theirs", samples.ExampleSpec), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the editor creating a stack in another namespace: %v, want forbidden", err)
	}

	victor := as("victor")
	if _, err := victor.Namespace("team-a").Get(ctx, "mine", metav1.GetOptions{}); err != nil {
		t.Errorf("a viewer cannot read a stack: %v", err)
	}
	if err := victor.Namespace("team-a").Delete(ctx, "mine", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a viewer deleting a stack: %v, want forbidden", err)
	}
	if err := alice.Namespace("team-a").Delete(ctx, "mine", metav1.DeleteOptions{}); err != nil {
		t.Errorf("the editor cannot delete her stack: %v", err)
	}

	// The chart's roles name the InferenceStack resource and nothing else.
	for _, name := range []string{"inference-stack-operator-stacks-edit", "inference-stack-operator-stacks-view"} {
		r, err := cs.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, rule := range r.Rules {
			for _, res := range rule.Resources {
				if !slices.Equal(rule.APIGroups, []string{"models.takeoff.co"}) || !strings.HasPrefix(res, "inferencestacks") || slices.Contains(rule.Verbs, "*") {
					t.Errorf("%s grants %v", name, rule)
				}
			}
		}
	}
}

// readYAML reads one of the chart's files (strictly: a key the test does
// not know would be a list it does not try).
func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
