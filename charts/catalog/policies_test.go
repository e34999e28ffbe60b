package catalogchart

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/titanml/inference-stack-operator/e2e/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/olmlocal"
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

// exampleSpec is the documented example stack ("Using a Specific Operator
// Version").
const exampleSpec = `
applications:
  hello-world:
    nodeSelector: {nvidia.com/gpu.product: NVIDIA-GeForce-RTX-3060}
    readerConfig: {modelName: unsloth/Llama-3.2-1B-Instruct, device: cuda}
imagePullSecrets: [{name: regcred}]
`

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
	switches := func(podSecurity, operatorVersion, gatewayNames bool) map[string]any {
		return map[string]any{"admissionPolicies": map[string]any{
			"podSecurity":     map[string]any{"enabled": podSecurity},
			"operatorVersion": map[string]any{"enabled": operatorVersion},
			"gatewayNames":    map[string]any{"enabled": gatewayNames},
		}}
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

	denied := []struct {
		name, spec string
		want       []string // the field and the reason
	}{
		{"privileged gateway", `gateway: {securityContext: {privileged: true}}`, []string{"spec.gateway.securityContext.privileged is true", "privileged containers are not allowed"}},
		{"added capability", `applications: {a: {securityContext: {capabilities: {add: [NET_ADMIN], drop: [ALL]}}}}`, []string{"spec.applications.a.securityContext.capabilities.add", "adds capabilities"}},
		{"hostPath volume", `applicationTemplate: {volumes: [{name: host, hostPath: {path: /}}]}`, []string{"spec.applicationTemplate.volumes[host].hostPath", "hostPath volumes are not allowed"}},
		{"hostPath models volume", `applications: {m: {modelsVolume: {hostPath: {path: /var/lib/models}}}}`, []string{"spec.applications.m.modelsVolume.hostPath", "hostPath volumes"}},
		{"Windows host process", `gateway: {podSecurityContext: {windowsOptions: {hostProcess: true}}}`, []string{"spec.gateway.podSecurityContext.windowsOptions.hostProcess", "host processes"}},
		{"another ServiceAccount", `serviceAccount: {create: false, name: cluster-admin-sa}`, []string{"spec.serviceAccount.create is false", "existing ServiceAccount"}},
		{"application named like a gateway", `applications: {llm-gateway: {}}`, []string{"spec.applications.llm-gateway", "may not be gateway or end in -gateway"}},
	}
	optIn := "models.takeoff.co/allow-privileged-stacks=true"

	eventually("the policies are in force", func() (bool, string) {
		err, _ := try("default", "v0", denied[0].spec, false)
		return err != nil, fmt.Sprintf("a privileged stack is accepted: %v", err)
	})

	t.Run("bad stacks are rejected with the field named", func(t *testing.T) {
		for _, tc := range denied {
			err, _ := try("default", "v0", tc.spec, false)
			if err == nil {
				t.Errorf("%s: accepted", tc.name)
				continue
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
				t.Errorf("%s: %v, want a denial", tc.name, err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: %q does not say %q", tc.name, err, want)
				}
			}
			if tc.name != "application named like a gateway" && !strings.Contains(err.Error(), optIn) {
				t.Errorf("%s: %q does not say how to opt in", tc.name, err)
			}
			t.Logf("%s: %v", tc.name, err)
		}
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
			err, warns := try("default", major, exampleSpec, false)
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
			exampleSpec,
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

	t.Run("a namespace the platform team labelled may opt in", func(t *testing.T) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "trusted", Labels: map[string]string{"models.takeoff.co/allow-privileged-stacks": "true"}}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range denied[:6] {
			if err, _ := try("trusted", "v0", tc.spec, false); err != nil {
				t.Errorf("%s in an opted-in namespace: %v", tc.name, err)
			}
		}
		if err, _ := try("trusted", "v0", denied[6].spec, false); err == nil {
			t.Error("the opt-in also lifted the gateway-name rule")
		}
	})

	t.Run("each policy can be switched off", func(t *testing.T) {
		if _, err := rel.Upgrade(switches(false, true, true)); err != nil {
			t.Fatal(err)
		}
		eventually("pod security off", func() (bool, string) {
			err, _ := try("default", "v0", denied[0].spec, false)
			return err == nil, fmt.Sprintf("still denied: %v", err)
		})
		if err, _ := try("default", "v0", denied[6].spec, false); err == nil {
			t.Error("switching pod security off also switched the gateway-name rule off")
		}
		// A privileged stack stored while the policy was off, for below.
		if err, _ := try("default", "v0", denied[0].spec, true); err != nil {
			t.Fatal(err)
		}

		if _, err := rel.Upgrade(switches(false, true, false)); err != nil {
			t.Fatal(err)
		}
		eventually("gateway names off", func() (bool, string) {
			err, _ := try("default", "v0", denied[6].spec, false)
			return err == nil, fmt.Sprintf("still denied: %v", err)
		})
		if _, warns := try("default", "", exampleSpec, false); len(warns) == 0 {
			t.Error("switching the others off also switched the operator-version warning off")
		}

		if _, err := rel.Upgrade(switches(false, false, false)); err != nil {
			t.Fatal(err)
		}
		eventually("operator-version warning off", func() (bool, string) {
			_, warns := try("default", "", exampleSpec, false)
			return len(warns) == 0, fmt.Sprintf("still warned: %q", warns)
		})
	})

	t.Run("a stack stored before the policy keeps working until its spec changes", func(t *testing.T) {
		if _, err := rel.Upgrade(switches(true, true, true)); err != nil {
			t.Fatal(err)
		}
		eventually("the policies are back", func() (bool, string) {
			err, _ := try("default", "v0", denied[0].spec, false)
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
