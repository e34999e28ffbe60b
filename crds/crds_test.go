package crds_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/titanml/inference-stack-operator/crds"
	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/samples"
	"github.com/titanml/inference-stack-operator/internal/crdcompat"
)

var gvr = schema.GroupVersionResource{Group: "models.takeoff.co", Version: "v1alpha1", Resource: "inferencestacks"}

func stack(t *testing.T, name, spec string) *unstructured.Unstructured {
	t.Helper()
	var s map[string]any
	if err := yaml.Unmarshal([]byte(spec), &s); err != nil {
		t.Fatalf("test spec for %s: %v", name, err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "models.takeoff.co/v1alpha1",
		"kind":       "InferenceStack",
		"metadata":   map[string]any{"name": name, "labels": map[string]any{"operatorVersion": "v0"}},
		"spec":       s,
	}}
	return u
}

// maxCRDJSON bounds the CRD as JSON: it must fit client-side `kubectl
// apply` (whose last-applied annotation holds the whole object and is
// limited to 256 KiB), Helm's release Secret of the catalog chart, and
// leave room under etcd's 1.5 MiB request limit for more served versions.
// The size bounds of every string, list and map (about 30 KB) took it
// past 200 KiB; 224 KiB keeps 32 KiB under kubectl's limit.
const maxCRDJSON = 224 << 10

func TestCRDSize(t *testing.T) {
	crd, err := crds.InferenceStack()
	if err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(crd)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the CRD is %d bytes of YAML, %d bytes of JSON", len(crds.InferenceStackYAML), len(j))
	if len(j) > maxCRDJSON {
		t.Errorf("the CRD is %d bytes of JSON, more than %d: keep descriptions out of embedded Kubernetes types (tools/generate)", len(j), maxCRDJSON)
	}
}

// kubectl runs the local cluster's kubectl (built from the same Kubernetes
// release as the API server) against it.
func kubectl(t *testing.T, c *localcluster.Cluster, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), c.Binaries().Kubectl, append([]string{"--kubeconfig", c.Kubeconfig()}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// explain runs kubectl explain for field. The API server publishes a new
// CRD's schema a moment after the CRD is Established, and kubectl may hold
// discovery from before: until then explain cannot find the resource, so
// it is retried for a while.
func explain(t *testing.T, c *localcluster.Cluster, field string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := exec.CommandContext(t.Context(), c.Binaries().Kubectl, "--kubeconfig", c.Kubeconfig(), "explain", field).CombinedOutput()
		if err == nil {
			return string(out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubectl explain %s: %v\n%s", field, err, out)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func TestInferenceStackSchemaOnAPIServer(t *testing.T) {
	c := localcluster.StartForTest(t, localcluster.Options{Nodes: []localcluster.Node{}, WithoutScheduler: true, WithoutControllerManager: true})
	ctx := t.Context()
	// The way docs/api.md installs it without the catalog chart: client-side
	// apply of this directory (the test runs in crds/), twice, as a user
	// re-applying after an upgrade would.
	t.Logf("kubectl apply: %s", kubectl(t, c, "apply", "-f", "."))
	t.Logf("kubectl apply again: %s", kubectl(t, c, "apply", "-f", "."))
	if err := crds.Install(ctx, c.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	t.Run("kubectl explain", func(t *testing.T) {
		// The API server publishes the CRD's schema; explain reads it back.
		for field, want := range map[string]string{
			"inferencestacks.spec.applications":                                    "maps an application name",
			"inferencestacks.spec.applicationTemplate.readerConfig.tensorParallel": "number of GPUs",
			"inferencestacks.spec.gateway.volumes":                                 "volumes added to the pod",
		} {
			if out := explain(t, c, field); !strings.Contains(out, want) {
				t.Errorf("kubectl explain %s does not say %q:\n%s", field, want, out)
			}
		}
	})
	dyn := dynamic.NewForConfigOrDie(c.RESTConfig())
	stacks := dyn.Resource(gvr).Namespace("default")

	t.Run("documented example is accepted", func(t *testing.T) {
		created, err := stacks.Create(ctx, stack(t, "my-inference-stack", samples.ExampleSpec), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the documented example was rejected: %v", err)
		}
		got, _, _ := unstructured.NestedString(created.Object, "spec", "applications", "hello-world", "readerConfig", "modelName")
		if got != "unsloth/Llama-3.2-1B-Instruct" {
			t.Errorf("modelName = %q after round trip", got)
		}
	})

	t.Run("unknown readerConfig keys are preserved, unknown spec keys pruned", func(t *testing.T) {
		created, err := stacks.Create(ctx, stack(t, "forward-compat", `
notAValue: 1
applications:
  a:
    readerConfig: {device: cpu, futureReaderKnob: "x:y", nested: {deep: true}}
gateway:
  config: {someNewGatewaySetting: 7}
`), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if v, _, _ := unstructured.NestedString(created.Object, "spec", "applications", "a", "readerConfig", "futureReaderKnob"); v != "x:y" {
			t.Errorf("unknown readerConfig key lost: %v", created.Object["spec"])
		}
		if v, _, _ := unstructured.NestedInt64(created.Object, "spec", "gateway", "config", "someNewGatewaySetting"); v != 7 {
			t.Errorf("unknown gateway config key lost: %v", created.Object["spec"])
		}
		if _, found, _ := unstructured.NestedFieldNoCopy(created.Object, "spec", "notAValue"); found {
			t.Error("an unknown top-level key was stored; the schema must prune it")
		}
	})

	t.Run("valid values near the new rules are accepted", func(t *testing.T) {
		for i, spec := range []string{
			`gateway: {livenessProbe: {}, readinessProbe: {httpGet: {port: 3001}, periodSeconds: 10, successThreshold: 3}}`,
			`applications: {a: {startupProbe: {tcpSocket: {port: 3001}, successThreshold: 1, failureThreshold: 0}}}`,
			`applications: {a: {env: [{name: "my.var-1", valueFrom: {fieldRef: {fieldPath: metadata.name}}}, {name: B, value: ""}]}}`,
			`applications: {my-gateway: {readerConfig: {tensorParallel: 2, device: cuda, logLevel: debug}}}`,
			`gateway: {image: {tag: "0.22.0-cpu@sha256:` + strings.Repeat("a", 64) + `"}}
applications: {a: {image: {digest: "sha256:` + strings.Repeat("b", 64) + `"}, accessTokenFrom: {secretKeyRef: {name: hf-token, key: token}, mountAs: File}}}`,
		} {
			if _, err := stacks.Create(ctx, stack(t, fmt.Sprintf("good-%d", i), spec), metav1.CreateOptions{}); err != nil {
				t.Errorf("%s: %v", spec, err)
			}
		}
	})

	long := strings.Repeat("a", 51)
	rejected := []struct {
		name, spec string
		// want are substrings of the API server's message: the field path and
		// the reason.
		want []string
	}{
		{"app name uppercase", `applications: {Hello: {}}`, []string{"spec.applications", "every key must be a DNS label"}},
		{"app name too long", `applications: {` + long + `: {}}`, []string{"spec.applications", "at most 50"}},
		{"app name with dot", `applications: {"a.b": {}}`, []string{"spec.applications", "every key must be a DNS label"}},
		{"negative replicas", `applications: {a: {replicaCount: -1}}`, []string{"spec.applications.a.replicaCount", "greater than or equal to 0"}},
		{"replicas not a number", `applications: {a: {replicaCount: "two"}}`, []string{"spec.applications.a.replicaCount", "integer"}},
		{"unknown device", `applications: {a: {readerConfig: {device: tpu}}}`, []string{"spec.applications.a.readerConfig.device", "Unsupported value"}},
		{"tensorParallel zero", `applications: {a: {readerConfig: {device: cuda, tensorParallel: 0}}}`, []string{"spec.applications.a.readerConfig.tensorParallel", "greater than or equal to 1"}},
		{"tensorParallel huge", `applications: {a: {readerConfig: {device: cuda, tensorParallel: 64}}}`, []string{"spec.applications.a.readerConfig.tensorParallel", "less than or equal to 16"}},
		{"tensorParallel on cpu", `applications: {a: {readerConfig: {device: cpu, tensorParallel: 2}}}`, []string{"spec.applications[a].readerConfig.tensorParallel", "needs device: cuda"}},
		{"maxBatchSize string", `applications: {a: {readerConfig: {maxBatchSize: big}}}`, []string{"spec.applications.a.readerConfig.maxBatchSize", "integer"}},
		{"empty modelName", `applications: {a: {readerConfig: {modelName: ""}}}`, []string{"spec.applications.a.readerConfig.modelName", "at least 1"}},
		{"bad consumerGroup", `applications: {a: {readerConfig: {consumerGroup: "two words"}}}`, []string{"spec.applications.a.readerConfig.consumerGroup", "should match"}},
		{"nodeSelector value not string", `applications: {a: {nodeSelector: {gpu: 1}}}`, []string{"spec.applications.a.nodeSelector.gpu", "string"}},
		{"tolerations not a list", `applications: {a: {tolerations: {key: x}}}`, []string{"spec.applications.a.tolerations", "array"}},
		{"bad GPU quantity", `applications: {a: {resources: {limits: {nvidia.com/gpu: lots}}}}`, []string{"spec.applications.a.resources.limits.nvidia.com/gpu", "should match"}},
		{"env entry without name", `applicationTemplate: {env: [{value: x}]}`, []string{"spec.applicationTemplate.env[0].name", "Required value"}},
		{"imagePullSecrets not a list", `imagePullSecrets: regcred`, []string{"spec.imagePullSecrets", "array"}},
		{"unknown pullPolicy", `gateway: {image: {pullPolicy: Sometimes}}`, []string{"spec.gateway.image.pullPolicy", "Unsupported value"}},
		{"bad image tag", `applications: {a: {image: {tag: "latest please"}}}`, []string{"spec.applications.a.image.tag", "should match"}},
		{"scaling without target", `applications: {a: {scaling: {enabled: true}}}`, []string{"spec.applications[a].scaling.metricTarget", "required when scaling is enabled"}},
		{"scaling with replicaCount", `applications: {a: {replicaCount: 2, scaling: {enabled: true, metricTarget: {value: 5}}}}`, []string{"spec.applications[a].replicaCount", "KEDA owns the replica count"}},
		{"scaling min above max", `applications: {a: {scaling: {spec: {minReplicaCount: 5, maxReplicaCount: 2}}}}`, []string{"spec.applications[a].scaling.spec.minReplicaCount", "must not exceed"}},
		{"gateway internalPort out of range", `gateway: {config: {internalPort: 70000}}`, []string{"spec.gateway.config.internalPort", "less than or equal to 65535"}},
		{"gateway service type", `gateway: {service: {type: External}}`, []string{"spec.gateway.service.type", "Unsupported value"}},
		{"ingress without hosts", `gateway: {ingress: {enabled: true}}`, []string{"spec.gateway.ingress.hosts", "at least one host"}},
		{"port name too long", `gateway: {ports: {averyveryverylongname: 3000}}`, []string{"spec.gateway.ports", "every key must be an IANA service name"}},
		{"port out of range", `applications: {a: {ports: {metrics: 70000}}}`, []string{"spec.applications[a].ports", "1-65535"}},
		{"fullnameOverride uppercase", `fullnameOverride: MyStack`, []string{"spec.fullnameOverride", "should match"}},
		{"affinity not an object", `applications: {a: {affinity: [1]}}`, []string{"spec.applications.a.affinity", "object"}},
		// Names in the formats Kubernetes applies to them
		// (v1alpha1.NameRules), whatever the chart makes of them.
		{"serviceAccount name with a newline", `serviceAccount: {name: "x\n  template: {}"}`, []string{"spec.serviceAccount.name", "should match"}},
		{"targetPort with a newline", `gateway: {service: {ports: {http: {port: 80, targetPort: "h\n  x: [1]"}}}}`, []string{"spec.gateway.service.ports.http.targetPort", "should match"}},
		{"service port name", `gateway: {service: {ports: {"Http": {port: 80}}}}`, []string{"spec.gateway.service.ports", "every key must be an IANA service name"}},
		{"pod label key", `gateway: {podLabels: {"a b": x}}`, []string{"spec.gateway.podLabels", "every key must be a label or annotation key"}},
		{"pod label value", `applications: {a: {podLabels: {team: "ml team"}}}`, []string{"spec.applications.a.podLabels.team", "should match"}},
		{"node selector key", `applicationTemplate: {nodeSelector: {"gpu:": x}}`, []string{"spec.applicationTemplate.nodeSelector", "every key must be a label or annotation key"}},
		{"annotation key", `gateway: {podAnnotations: {"x\ny": z}}`, []string{"spec.gateway.podAnnotations", "every key must be a label or annotation key"}},
		{"volume name", `gateway: {volumes: [{name: Data, emptyDir: {}}]}`, []string{"spec.gateway.volumes[0].name", "should match"}},
		{"pull Secret name", `imagePullSecrets: [{name: "reg cred"}]`, []string{"spec.imagePullSecrets[0].name", "should match"}},
		{"env Secret name", `gateway: {env: [{name: A, valueFrom: {secretKeyRef: {name: "s\nx", key: k}}}]}`, []string{"spec.gateway.env[0].valueFrom.secretKeyRef.name", "should match"}},
		{"image repository", `gateway: {image: {repository: "tytn/Takeoff pro"}}`, []string{"spec.gateway.image.repository", "should match"}},
		{"ingress host", `gateway: {ingress: {enabled: true, hosts: [{host: "a b.example"}]}}`, []string{"spec.gateway.ingress.hosts[0].host", "should match"}},
		{"ingress TLS Secret", `gateway: {ingress: {tls: [{secretName: "TLS"}]}}`, []string{"spec.gateway.ingress.tls[0].secretName", "should match"}},
		// What the API server would only refuse later, when the chart's
		// objects are applied (ReleaseFailed), or what the chart would
		// silently ignore.
		{"application named gateway", `applications: {gateway: {}}`, []string{"spec.applications", "may not be named gateway"}},
		{"negative probe period", `applications: {a: {livenessProbe: {httpGet: {port: 3001}, periodSeconds: -5}}}`, []string{"spec.applications.a.livenessProbe.periodSeconds", "greater than or equal to 0"}},
		{"negative readiness timeout", `gateway: {readinessProbe: {tcpSocket: {port: 3000}, timeoutSeconds: -1}}`, []string{"spec.gateway.readinessProbe.timeoutSeconds", "greater than or equal to 0"}},
		{"liveness successThreshold", `applicationTemplate: {livenessProbe: {httpGet: {port: 3001}, successThreshold: 3}}`, []string{"spec.applicationTemplate.livenessProbe.successThreshold", "less than or equal to 1"}},
		{"probe without handler", `applications: {a: {startupProbe: {periodSeconds: 5}}}`, []string{"spec.applications[a].startupProbe", "exactly one of exec, httpGet"}},
		{"probe with two handlers", `gateway: {livenessProbe: {httpGet: {port: 1}, tcpSocket: {port: 1}}}`, []string{"spec.gateway.livenessProbe", "exactly one of exec, httpGet"}},
		{"env name with =", `applications: {a: {env: [{name: "A=B", value: x}]}}`, []string{"spec.applications.a.env[0].name", "should match"}},
		{"env value and valueFrom", `gateway: {env: [{name: A, value: x, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]}`, []string{"spec.gateway.env[0].valueFrom", "not both"}},
		{"readerConfig key in lower case", `applications: {a: {readerConfig: {device: cuda, tensorparallel: 2}}}`, []string{"spec.applications[a].readerConfig.tensorparallel", "did you mean tensorParallel"}},
		{"readerConfig key capitalised", `applicationTemplate: {readerConfig: {ModelName: x}}`, []string{"spec.applicationTemplate.readerConfig.ModelName", "did you mean modelName"}},
		{"digest and digest in tag", `gateway: {image: {tag: "1.0@sha256:` + strings.Repeat("a", 64) + `", digest: "sha256:` + strings.Repeat("b", 64) + `"}}`, []string{"spec.gateway.image.digest", "not both"}},
		{"malformed digest", `applications: {a: {image: {digest: "sha256:abc"}}}`, []string{"spec.applications.a.image.digest", "should match"}},
		{"token in plain text and from a Secret", `applications: {a: {readerConfig: {accessToken: x}, accessTokenFrom: {secretKeyRef: {name: s, key: k}}}}`, []string{"spec.applications[a].accessTokenFrom", "not both"}},
		{"token Secret without key", `applicationTemplate: {accessTokenFrom: {secretKeyRef: {name: s}}}`, []string{"spec.applicationTemplate.accessTokenFrom.secretKeyRef.key", "Required value"}},
		{"token env name the chart sets", `applications: {a: {accessTokenFrom: {secretKeyRef: {name: s, key: k}, envName: POD_NAME}}}`, []string{"spec.applications[a].accessTokenFrom.envName", "variables the chart sets"}},
		{"token mounted as what", `applications: {a: {accessTokenFrom: {secretKeyRef: {name: s, key: k}, mountAs: Volume}}}`, []string{"spec.applications.a.accessTokenFrom.mountAs", "Unsupported value"}},
		{"generated name over 63", `fullnameOverride: ` + strings.Repeat("b", 40) + `
applications: {` + strings.Repeat("c", 30) + `: {}}`, []string{"spec.applications", "at most 63 characters"}},
	}
	if len(rejected) < 20 {
		t.Fatalf("only %d malformed cases", len(rejected))
	}
	for i, tc := range rejected {
		t.Run(tc.name, func(t *testing.T) {
			_, err := stacks.Create(ctx, stack(t, fmt.Sprintf("bad-%d", i), tc.spec), metav1.CreateOptions{})
			assertInvalid(t, err, tc.want)
		})
	}

	t.Run("stack name over 53 characters", func(t *testing.T) {
		_, err := stacks.Create(ctx, stack(t, strings.Repeat("n", 54), `{}`), metav1.CreateOptions{})
		assertInvalid(t, err, []string{"metadata.name", "may not be more than 53"})
	})
	t.Run("stack name too long for the gateway name", func(t *testing.T) {
		_, err := stacks.Create(ctx, stack(t, strings.Repeat("n", 45), `{}`), metav1.CreateOptions{})
		assertInvalid(t, err, []string{"spec", "gateway name"})
	})
}

func assertInvalid(t *testing.T, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want a rejection mentioning %q", want)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want an Invalid error, got %v", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
	t.Logf("%v", err)
}

// The CRD upgrade-safety gate: the CRD must keep every stack created
// against the last release's CRD (or, before the first release, the CRD at
// the commit that last changed VERSION) valid, except for the changes
// listed in operator/api/crd-compatibility.yaml. `isctl release` runs the
// same check.
func TestCRDCompatibleWithLastRelease(t *testing.T) {
	if err := exec.Command("git", "-C", "..", "rev-parse", "--is-inside-work-tree").Run(); err != nil {
		t.Skip("not a git work tree (the baseline CRD is read from git history)")
	}
	r, err := crdcompat.Check(t.Context(), "..")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compared with the CRD of %s", r.Baseline.Source)
	for _, f := range r.Accepted {
		t.Logf("accepted for %s: %s", r.Version, f)
	}
	if err := r.Err(); err != nil {
		t.Error(err)
	}
	if err := r.UnusedErr(); err != nil {
		t.Error(err)
	}
}
