package migrate_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/operator-framework/helm-operator-plugins/pkg/reconciler"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	inferencestack "github.com/titanml/inference-stack-operator"
	stackchart "github.com/titanml/inference-stack-operator/charts/inference-stack"
	"github.com/titanml/inference-stack-operator/crds"
	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/operatorproc"
	"github.com/titanml/inference-stack-operator/e2e/harness/poll"
	"github.com/titanml/inference-stack-operator/internal/migrate"
)

// orchestraGVK is the resource the Model Orchestra operator reconciled.
var orchestraGVK = schema.GroupVersionKind{Group: "models.titanml.co", Version: "v1alpha1", Kind: "ModelOrchestra"}

// exampleOrchestra is the Model Orchestra documentation's example, with
// the GPU request and toleration its chart left to the user (without them
// the reader could not be scheduled on a tainted GPU node).
const exampleOrchestra = `
apiVersion: models.titanml.co/v1alpha1
kind: ModelOrchestra
metadata:
  name: my-model-orchestra
  namespace: default
  labels: {team: ml}
spec:
  applications:
    hello-world:
      nodeSelector:
        nvidia.com/gpu.product: NVIDIA-GeForce-RTX-3060
      readerConfig:
        modelName: "unsloth/Llama-3.2-1B-Instruct"
        device: cuda
      resources: {limits: {nvidia.com/gpu: 1}}
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  imagePullSecrets:
    - name: regcred
`

type cluster struct {
	t   *testing.T
	cfg *rest.Config
	dyn dynamic.Interface
	cs  kubernetes.Interface
	lc  *localcluster.Cluster
}

// startCluster starts a real control plane with KWOK nodes (an RTX 3060
// node, a CPU node) and both CRDs: the InferenceStack's and the
// ModelOrchestra's.
// controller-runtime drops every log if no logger is set within 30 s of the
// first one, and keeps the first it is given: set it before any test runs,
// for the in-process operators to switch to their tests' logs.
func init() { operatorproc.LogTo(io.Discard) }

func startCluster(t *testing.T) *cluster {
	lc := localcluster.StartForTest(t, localcluster.Options{})
	cfg := lc.RESTConfig()
	c := &cluster{t: t, cfg: cfg, lc: lc, dyn: dynamic.NewForConfigOrDie(cfg), cs: kubernetes.NewForConfigOrDie(cfg)}
	if err := crds.Install(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	// Where the v0 operator runs, as OLM makes it: it keeps its
	// release-record key there.
	if _, err := c.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: inferencestack.Namespace("v0")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crd := c.read("testdata/modelorchestras-crd.yaml")
	if _, err := c.dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).Create(t.Context(), crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually("the ModelOrchestra CRD served", time.Minute, func() (bool, string) {
		_, err := c.dyn.Resource(migrate.OrchestraGVR).Namespace("default").List(t.Context(), metav1.ListOptions{})
		return err == nil, fmt.Sprint(err)
	})
	return c
}

func (c *cluster) read(path string) *unstructured.Unstructured {
	c.t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.parse(string(data))
}

func (c *cluster) parse(doc string) *unstructured.Unstructured {
	c.t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		c.t.Fatal(err)
	}
	return u
}

func (c *cluster) eventually(what string, timeout time.Duration, cond func() (bool, string)) {
	c.t.Helper()
	if err := poll.Until(c.t.Context(), timeout, what, poll.Check(cond), poll.Every(200*time.Millisecond)); err != nil {
		c.t.Fatal(err)
	}
}

// startOldOperator runs what the Model Orchestra operator was: the
// helm-operator-plugins reconciler (the library of operator-sdk's Helm
// operators) for ModelOrchestra with the Model Orchestra chart
// (testdata/model-orchestra), so the release, its Secrets, the owner
// references and the finalizer are exactly what such an operator makes.
func startOldOperator(t *testing.T, cfg *rest.Config, log *operatorproc.LogBuffer) (stop func()) {
	chrt, err := loader.Load("testdata/model-orchestra")
	if err != nil {
		t.Fatal(err)
	}
	operatorproc.LogTo(log)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	skip := true // a second run in one test binary (-count) registers the controller again
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: ctrlconfig.Controller{SkipNameValidation: &skip}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := reconciler.New(reconciler.WithChart(*chrt), reconciler.WithGroupVersionKind(orchestraGVK))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	return operatorproc.StartInProcess(t, "the Model Orchestra operator", mgr)
}

// startNewOperator builds this repository's operator (under Bazel: the
// go_binary the BUILD file passes, see operatorproc.Builds) and runs it as
// the v0 operator (a host process with the test's kubeconfig).
func startNewOperator(t *testing.T, kubeconfig string) {
	bin := operatorBinary(t)
	logFile := filepath.Join(t.TempDir(), "operator.log")
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--kubeconfig="+kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=0")
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		f.Close()
		if t.Failed() {
			data, _ := os.ReadFile(logFile)
			lines := strings.Split(string(data), "\n")
			t.Logf("==== the v0 operator (last 60 lines) ====\n%s", strings.Join(lines[max(0, len(lines)-60):], "\n"))
		}
	})
}

func condition(u *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == typ {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

// workloads are the Deployments, ReplicaSets and pods of a namespace, by
// name, with UIDs.
type workloads struct {
	deployments, replicaSets, pods map[string]types.UID
	podNodes                       map[string]string
}

func (c *cluster) workloads(ns string) workloads {
	c.t.Helper()
	ctx := c.t.Context()
	w := workloads{deployments: map[string]types.UID{}, replicaSets: map[string]types.UID{}, pods: map[string]types.UID{}, podNodes: map[string]string{}}
	deps, err := c.cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, d := range deps.Items {
		w.deployments[d.Name] = d.UID
	}
	rss, err := c.cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, rs := range rss.Items {
		w.replicaSets[rs.Name] = rs.UID
	}
	pods, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			w.pods[p.Name] = p.UID
			w.podNodes[p.Name] = p.Spec.NodeName + "/" + string(p.Status.Phase)
		}
	}
	return w
}

// settledWorkloads waits until every Deployment of ns has rolled out all
// its replicas as live pods, then returns the workloads: a snapshot taken
// while the Deployment controller is still creating pods would count those
// pods as changes made by whatever runs next.
func (c *cluster) settledWorkloads(ns string) workloads {
	c.t.Helper()
	ctx := c.t.Context()
	c.eventually("every Deployment in "+ns+" rolled out", 2*time.Minute, func() (bool, string) {
		deps, err := c.cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		want := int32(0)
		for _, d := range deps.Items {
			r := int32(1)
			if d.Spec.Replicas != nil {
				r = *d.Spec.Replicas
			}
			s := d.Status
			if s.ObservedGeneration < d.Generation || s.Replicas != r || s.UpdatedReplicas != r {
				return false, fmt.Sprintf("Deployment %s: generation %d observed %d, replicas %d/%d updated %d", d.Name, d.Generation, s.ObservedGeneration, s.Replicas, r, s.UpdatedReplicas)
			}
			want += r
		}
		w := c.workloads(ns)
		return int32(len(w.pods)) == want, fmt.Sprintf("%d live pods, want %d: %v", len(w.pods), want, w.podNodes)
	})
	return c.workloads(ns)
}

// TestMigrateKeepsPods starts from a ModelOrchestra installed the old way
// — its CRD, the Helm-based reconciler its operator was built on, the
// Model Orchestra chart — with its reader Running on the RTX 3060 node, and
// migrates it while that old operator is still running: the plan says what
// changes, the migration ends with the same Deployments, ReplicaSets and
// pods (UIDs unchanged) owned by an InferenceStack that the v0 operator
// reconciles, and nothing of the old release left behind.
func TestMigrateKeepsPods(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short: starts a cluster and builds the operator")
	}
	c := startCluster(t)
	ctx := t.Context()
	oldLog := &operatorproc.LogBuffer{}
	stopOld := startOldOperator(t, c.cfg, oldLog)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("==== the Model Orchestra operator ====\n%s", oldLog.String())
		}
	})
	mo := c.parse(exampleOrchestra)
	if _, err := c.dyn.Resource(migrate.OrchestraGVR).Namespace("default").Create(ctx, mo, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually("the ModelOrchestra deployed and its pods Running", 2*time.Minute, func() (bool, string) {
		u, err := c.dyn.Resource(migrate.OrchestraGVR).Namespace("default").Get(ctx, "my-model-orchestra", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		w := c.workloads("default")
		running := 0
		for _, v := range w.podNodes {
			if strings.HasSuffix(v, "/Running") {
				running++
			}
		}
		return condition(u, "Deployed") == "True" && running == 2, fmt.Sprintf("Deployed=%s pods %v", condition(u, "Deployed"), w.podNodes)
	})
	before := c.workloads("default")
	for name, where := range before.podNodes {
		if strings.HasPrefix(name, "my-model-orchestra-hello-world-") && where != "gpu-rtx3060/Running" {
			t.Fatalf("the old reader %s is %s, want Running on gpu-rtx3060", name, where)
		}
	}
	t.Logf("installed the old way: Deployments %v, pods %v", slices.Sorted(maps.Keys(before.deployments)), before.podNodes)
	// The rollout case's ModelOrchestra, installed now so that, like any a
	// user migrates, it has long settled when its migration runs.
	c.orchestraIn("rollout", "rolled", "{gateway: {replicaCount: 1}}")
	c.checkOldWay(ctx)

	// The plan, with the old operator still running.
	opts := migrate.Options{Namespace: "default", Name: "my-model-orchestra", OperatorVersion: "v0", Timeout: 3 * time.Minute}
	var log operatorproc.LogBuffer
	opts.Log = &log
	plan, err := migrate.NewPlan(ctx, c.cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	var printed bytes.Buffer
	plan.Print(&printed)
	t.Logf("plan:\n%s", printed.String())
	if len(plan.Blockers) > 0 {
		t.Fatalf("blocked: %v", plan.Blockers)
	}
	for _, want := range []string{"nameOverride: model-orchestra", "gateway.image.tag: 0.21.2-cpu", "applicationTemplate.image.tag: 0.21.2-gpu"} {
		if !slices.ContainsFunc(plan.Changes, func(s string) bool { return strings.HasPrefix(s, want) }) {
			t.Errorf("the plan's value changes %v lack %q", plan.Changes, want)
		}
	}
	if len(plan.Deployments) != 2 {
		t.Fatalf("planned %d Deployments, want the gateway and the reader", len(plan.Deployments))
	}
	for _, d := range plan.Deployments {
		if len(d.Pods) != 1 || d.ReplicaSet == "" {
			t.Errorf("Deployment %s: pods %v in ReplicaSet %q", d.Name, d.Pods, d.ReplicaSet)
		}
		if d.Name == "my-model-orchestra-hello-world" {
			// What the inference-stack chart fixed shows up as pod-template
			// changes: the root init container goes, a config checksum and
			// a hardened security context come, version labels leave.
			for _, want := range []string{"spec.initContainers[volume-permissions] (removed)", `metadata.annotations["checksum/config"] (added)`, `metadata.labels["helm.sh/chart"] (removed)`, "spec.securityContext.fsGroup (added)"} {
				if !slices.Contains(d.TemplateChanges, want) {
					t.Errorf("reader template changes lack %q: %v", want, d.TemplateChanges)
				}
			}
			for _, c := range d.TemplateChanges {
				if strings.Contains(c, ".image:") {
					t.Errorf("the image would change (%s): the running tag should have been pinned", c)
				}
			}
		}
	}
	if !slices.Contains(plan.Created, "Service/my-model-orchestra-hello-world") {
		t.Errorf("created %v: want the reader Service the new chart adds", plan.Created)
	}
	if !strings.Contains(printed.String(), "its pods are kept") || !strings.Contains(printed.String(), "kubectl rollout restart deployment/my-model-orchestra-hello-world") {
		t.Errorf("the printed plan does not say the pods are kept and how to apply the template later:\n%s", printed.String())
	}
	if after := c.workloads("default"); !maps.Equal(before.pods, after.pods) || !maps.Equal(before.deployments, after.deployments) {
		t.Fatalf("planning changed the workloads: %v → %v", before, after)
	}

	t.Run("refusals", func(t *testing.T) { c.checkRefusals(t) })

	startNewOperator(t, c.lc.Kubeconfig())
	res, err := migrate.Run(ctx, c.cfg, plan)
	t.Logf("migration log:\n%s", log.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.KeptPods != 2 || res.ReplacedPods != 0 {
		t.Errorf("kept %d pods, replaced %d", res.KeptPods, res.ReplacedPods)
	}
	c.checkMigrated(ctx, before)

	// The v0 operator reconciles the stack from now on: a change of the
	// stack reaches the Deployment, which keeps its UID and its pod.
	patch := []byte(`{"spec":{"applications":{"hello-world":{"replicaCount":2}}}}`)
	if _, err := c.dyn.Resource(migrate.StackGVR).Namespace("default").Patch(ctx, "my-model-orchestra", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually("the reader scaled to 2 by the v0 operator", time.Minute, func() (bool, string) {
		d, err := c.cs.AppsV1().Deployments("default").Get(ctx, "my-model-orchestra-hello-world", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return *d.Spec.Replicas == 2 && d.UID == before.deployments[d.Name] && d.Status.Replicas == 2, fmt.Sprintf("replicas %d/%d", d.Status.Replicas, *d.Spec.Replicas)
	})
	after := c.workloads("default")
	for name, uid := range before.pods {
		if after.pods[name] != uid {
			t.Errorf("pod %s was replaced when the stack scaled up", name)
		}
	}

	t.Run("rollout", func(t *testing.T) { c.checkRollout(t) })
	t.Run("cut after each step and run again", func(t *testing.T) { c.checkResume(t) })

	// The old operator, stopped at last, left the migrated stack alone.
	stopOld()
	c.checkMigrated(ctx, c.workloads("default"))
}

// orchestraIn creates a ModelOrchestra named name in namespace ns with
// spec and waits until the old operator deployed it.
func (c *cluster) orchestraIn(ns, name, spec string) {
	c.t.Helper()
	ctx := c.t.Context()
	if _, err := c.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if _, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			c.t.Fatal(err)
		}
	}
	mo := c.parse(fmt.Sprintf("apiVersion: models.titanml.co/v1alpha1\nkind: ModelOrchestra\nmetadata: {name: %s, namespace: %s}\nspec: %s\n", name, ns, spec))
	if _, err := c.dyn.Resource(migrate.OrchestraGVR).Namespace(ns).Create(ctx, mo, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.eventually("ModelOrchestra "+ns+"/"+name+" deployed by the old operator", 2*time.Minute, func() (bool, string) {
		u, err := c.dyn.Resource(migrate.OrchestraGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return condition(u, "Deployed") == "True", fmt.Sprint(u.Object["status"])
	})
}

// checkResume migrates one ModelOrchestra per step of a run, with the old
// operator running: each run is cut right after its k-th step (its context
// cancelled the moment it reports the step, so its next request fails, as
// if the command had been killed there), then planned and run again. Every
// Deployment, ReplicaSet and pod keeps its UID, and the stack ends up
// migrated, whatever the step it was cut after.
func (c *cluster) checkResume(t *testing.T) {
	ctx := t.Context()
	for k := 1; k < 30; k++ {
		ns := fmt.Sprintf("cut-%d", k)
		c.orchestraIn(ns, "mo", "{gateway: {replicaCount: 1}}")
		c.eventually("the gateway pod in "+ns, time.Minute, func() (bool, string) {
			w := c.workloads(ns)
			return len(w.pods) == 1, fmt.Sprint(w.podNodes)
		})
		before := c.workloads(ns)
		opts := migrate.Options{Namespace: ns, Name: "mo", OperatorVersion: "v0", Timeout: 2 * time.Minute}
		runCtx, cut := context.WithCancel(ctx)
		var steps []string
		opts.Log = writerFunc(func(p []byte) {
			steps = append(steps, strings.TrimSpace(string(p)))
			if len(steps) >= k {
				cut()
			}
		})
		plan, err := migrate.NewPlan(ctx, c.cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		_, err = migrate.Run(runCtx, c.cfg, plan)
		cut()
		if err == nil {
			// The run reported fewer than k steps: every step has been
			// cut after once.
			t.Logf("a run has %d steps; each was cut after and resumed", k-1)
			return
		}
		var log operatorproc.LogBuffer
		opts.Log = &log
		plan, err = migrate.NewPlan(ctx, c.cfg, opts)
		if err != nil {
			t.Fatalf("cut after step %d (%q): planning again: %v", k, steps[len(steps)-1], err)
		}
		if len(plan.Blockers) > 0 {
			t.Fatalf("cut after step %d (%q): planning again: blocked: %v", k, steps[len(steps)-1], plan.Blockers)
		}
		if _, err := migrate.Run(ctx, c.cfg, plan); err != nil {
			t.Fatalf("cut after step %d (%q): running again: %v\n%s", k, steps[len(steps)-1], err, log.String())
		}
		after := c.workloads(ns)
		if !maps.Equal(before.deployments, after.deployments) || !maps.Equal(before.replicaSets, after.replicaSets) || !maps.Equal(before.pods, after.pods) {
			t.Errorf("cut after step %d (%q): workloads replaced: %v → %v", k, steps[len(steps)-1], before, after)
		}
		stack, err := c.dyn.Resource(migrate.StackGVR).Namespace(ns).Get(ctx, "mo", metav1.GetOptions{})
		if err != nil || stack.GetLabels()["models.takeoff.co/reconciled-by"] != "v0" {
			t.Errorf("cut after step %d: the stack is not claimed by the v0 operator: %v %v", k, err, stack)
		}
		if _, err := c.dyn.Resource(migrate.OrchestraGVR).Namespace(ns).Get(ctx, "mo", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("cut after step %d: the ModelOrchestra is still there (%v)", k, err)
		}
	}
	t.Fatal("a run reported 30 steps or more")
}

type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

// checkRefusals: bad input gets a clear error, and a ModelOrchestra whose
// values the InferenceStack API rejects is not touched.
func (c *cluster) checkRefusals(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		opts migrate.Options
		want string
	}{
		{migrate.Options{Namespace: "default", Name: "nope", OperatorVersion: "v0"}, "no ModelOrchestra default/nope"},
		{migrate.Options{Namespace: "default", Name: "my-model-orchestra", OperatorVersion: "0"}, `operator version "0"`},
		{migrate.Options{Name: "my-model-orchestra", OperatorVersion: "v0"}, "namespace and name"},
	} {
		if _, err := migrate.NewPlan(ctx, c.cfg, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one saying %q", tc.opts, err, tc.want)
		}
	}

	// A name an unrelated InferenceStack already has.
	c.orchestraIn("refusals", "taken", "{applications: {a: {}}}")
	taken := c.parse("apiVersion: models.takeoff.co/v1alpha1\nkind: InferenceStack\nmetadata: {name: taken, namespace: refusals, labels: {operatorVersion: v9}}\nspec: {}\n")
	if _, err := c.dyn.Resource(migrate.StackGVR).Namespace("refusals").Create(ctx, taken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.NewPlan(ctx, c.cfg, migrate.Options{Namespace: "refusals", Name: "taken", OperatorVersion: "v0"}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("planning over an existing InferenceStack: %v", err)
	}

	// Values the old chart took but the InferenceStack API rejects: the
	// plan says why (with the field), and running it changes nothing.
	c.orchestraIn("refusals", "tpu", "{applications: {reader: {readerConfig: {device: tpu}}}}")
	before := c.settledWorkloads("refusals")
	plan, err := migrate.NewPlan(ctx, c.cfg, migrate.Options{Namespace: "refusals", Name: "tpu", OperatorVersion: "v0"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	plan.Print(&out)
	if len(plan.Blockers) != 1 || !strings.Contains(plan.Blockers[0], "device") || !strings.Contains(out.String(), "nothing was changed") {
		t.Errorf("blockers %q; printed:\n%s", plan.Blockers, out.String())
	}
	if _, err := migrate.Run(ctx, c.cfg, plan); err == nil || !strings.Contains(err.Error(), "blocked") {
		t.Errorf("running a blocked plan: %v", err)
	}
	mo, err := c.dyn.Resource(migrate.OrchestraGVR).Namespace("refusals").Get(ctx, "tpu", metav1.GetOptions{})
	if err != nil || !slices.Contains(mo.GetFinalizers(), "uninstall-helm-release") {
		t.Errorf("the refused ModelOrchestra changed: %v %v", err, mo)
	}
	if after := c.workloads("refusals"); !maps.Equal(before.pods, after.pods) || !maps.Equal(before.deployments, after.deployments) {
		t.Errorf("a refused migration changed the workloads: %v → %v", before, after)
	}
	for _, d := range []string{"tpu-model-orchestra-gateway", "tpu-model-orchestra-reader"} {
		if dep, err := c.cs.AppsV1().Deployments("refusals").Get(ctx, d, metav1.GetOptions{}); err != nil || dep.Spec.Paused {
			t.Errorf("Deployment %s after a refused migration: %v (paused %v)", d, err, dep != nil && dep.Spec.Paused)
		}
	}
}

// checkRollout: with Rollout the new pod templates apply at once, through
// one rolling update per Deployment.
func (c *cluster) checkRollout(t *testing.T) {
	ctx := t.Context()
	c.eventually("the old gateway pod", time.Minute, func() (bool, string) {
		w := c.workloads("rollout")
		return len(w.pods) == 1, fmt.Sprint(w.podNodes)
	})
	before := c.workloads("rollout")
	var log operatorproc.LogBuffer
	plan, err := migrate.NewPlan(ctx, c.cfg, migrate.Options{Namespace: "rollout", Name: "rolled", OperatorVersion: "v0", Rollout: true, Timeout: 2 * time.Minute, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	plan.Print(&out)
	if !strings.Contains(out.String(), "--rollout replaces its pods once") {
		t.Errorf("the plan does not say the pods roll:\n%s", out.String())
	}
	res, err := migrate.Run(ctx, c.cfg, plan)
	t.Logf("migration log:\n%s", log.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.ReplacedPods != 1 || res.KeptPods != 0 {
		t.Errorf("kept %d, replaced %d; want the one gateway pod replaced", res.KeptPods, res.ReplacedPods)
	}
	after := c.workloads("rollout")
	if !maps.Equal(before.deployments, after.deployments) {
		t.Errorf("Deployments re-created: %v → %v", before.deployments, after.deployments)
	}
	d, err := c.cs.AppsV1().Deployments("rollout").Get(ctx, "rolled-model-orchestra-gateway", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(d); ref == nil || ref.Kind != "InferenceStack" {
		t.Errorf("owners %v", d.OwnerReferences)
	}
}

// checkOldWay makes sure the starting point is what the old operator
// leaves: the release objects owned by the ModelOrchestra, its finalizer,
// release Secrets owned by it.
func (c *cluster) checkOldWay(ctx context.Context) {
	c.t.Helper()
	mo, err := c.dyn.Resource(migrate.OrchestraGVR).Namespace("default").Get(ctx, "my-model-orchestra", metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	if !slices.Contains(mo.GetFinalizers(), "uninstall-helm-release") {
		c.t.Fatalf("the old operator left no uninstall finalizer: %v", mo.GetFinalizers())
	}
	d, err := c.cs.AppsV1().Deployments("default").Get(ctx, "my-model-orchestra-gateway", metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(d); ref == nil || ref.Kind != "ModelOrchestra" {
		c.t.Fatalf("gateway Deployment owners %v: want the ModelOrchestra", d.OwnerReferences)
	}
	secrets, err := c.cs.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=my-model-orchestra"})
	if err != nil || len(secrets.Items) == 0 {
		c.t.Fatalf("no release Secrets: %v", err)
	}
	if ref := metav1.GetControllerOf(&secrets.Items[0]); ref == nil || ref.Kind != "ModelOrchestra" {
		c.t.Fatalf("release Secret owners %v: want the ModelOrchestra", secrets.Items[0].OwnerReferences)
	}
	// The old operator stores the manifests it rendered, owner references
	// included: what the migration must adopt too.
	if n := c.revisionsNamingOrchestra(ctx); n == 0 {
		c.t.Fatal("no stored manifest of the old release names the ModelOrchestra as an owner: the case under test is missing")
	}
}

// revisionsNamingOrchestra counts the stored revisions of the release whose
// manifest names a ModelOrchestra as an owner: a rollback to one would put
// that owner back.
func (c *cluster) revisionsNamingOrchestra(ctx context.Context) int {
	c.t.Helper()
	records := driver.NewSecrets(c.cs.CoreV1().Secrets("default"))
	revs, err := records.List(func(rel *release.Release) bool { return rel.Name == "my-model-orchestra" })
	if err != nil {
		c.t.Fatal(err)
	}
	n := 0
	for _, rel := range revs {
		if strings.Contains(rel.Manifest, "kind: ModelOrchestra") {
			n++
		}
	}
	return n
}

// chartLabel is the helm.sh/chart label of this repository's
// inference-stack chart, which the v0 operator under test embeds.
func chartLabel(t *testing.T) string {
	t.Helper()
	c, err := stackchart.Load()
	if err != nil {
		t.Fatal(err)
	}
	return c.Name() + "-" + c.Metadata.Version
}

// checkMigrated: same Deployments, ReplicaSets and pods; everything owned
// by the InferenceStack; the release upgraded by the v0 operator; the
// ModelOrchestra gone; nothing paused.
func (c *cluster) checkMigrated(ctx context.Context, before workloads) {
	c.t.Helper()
	after := c.workloads("default")
	if !maps.Equal(before.deployments, after.deployments) {
		c.t.Errorf("Deployments changed: %v → %v", before.deployments, after.deployments)
	}
	if !maps.Equal(before.replicaSets, after.replicaSets) {
		c.t.Errorf("ReplicaSets changed: %v → %v", before.replicaSets, after.replicaSets)
	}
	if !maps.Equal(before.pods, after.pods) {
		c.t.Errorf("pods replaced: %v → %v", before.pods, after.pods)
	}
	if _, err := c.dyn.Resource(migrate.OrchestraGVR).Namespace("default").Get(ctx, "my-model-orchestra", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		c.t.Errorf("the ModelOrchestra still exists: %v", err)
	}
	stack, err := c.dyn.Resource(migrate.StackGVR).Namespace("default").Get(ctx, "my-model-orchestra", metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	if l := stack.GetLabels(); l["operatorVersion"] != "v0" || l["team"] != "ml" || l["models.takeoff.co/reconciled-by"] != "v0" {
		c.t.Errorf("InferenceStack labels %v", l)
	}
	if condition(stack, "Deployed") != "True" {
		c.t.Errorf("InferenceStack not Deployed: %v", stack.Object["status"])
	}
	deps, err := c.cs.AppsV1().Deployments("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, d := range deps.Items {
		if ref := metav1.GetControllerOf(&d); ref == nil || ref.Kind != "InferenceStack" || ref.UID != stack.GetUID() {
			c.t.Errorf("Deployment %s owners %v: want the InferenceStack", d.Name, d.OwnerReferences)
		}
		if slices.ContainsFunc(d.OwnerReferences, func(r metav1.OwnerReference) bool { return r.Kind == "ModelOrchestra" }) {
			c.t.Errorf("Deployment %s still names the ModelOrchestra as owner", d.Name)
		}
		if d.Spec.Paused || d.Annotations[migrate.PausedAnnotation] != "" {
			c.t.Errorf("Deployment %s left paused", d.Name)
		}
		if d.Labels["helm.sh/chart"] != chartLabel(c.t) {
			c.t.Errorf("Deployment %s labelled %s: not upgraded to the inference-stack chart", d.Name, d.Labels["helm.sh/chart"])
		}
		if d.Status.UpdatedReplicas != d.Status.Replicas {
			c.t.Errorf("Deployment %s: %d of %d replicas up to date (the kept ReplicaSet should carry its template)", d.Name, d.Status.UpdatedReplicas, d.Status.Replicas)
		}
		if _, ok := d.Spec.Template.Annotations["checksum/config"]; !ok {
			c.t.Errorf("Deployment %s: its template is not the new chart's", d.Name)
		}
	}
	rss, err := c.cs.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, rs := range rss.Items {
		if len(rs.Spec.Template.Spec.InitContainers) > 0 {
			c.t.Errorf("ReplicaSet %s still carries the old pod template", rs.Name)
		}
	}
	secrets, err := c.cs.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=my-model-orchestra"})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, s := range secrets.Items {
		if ref := metav1.GetControllerOf(&s); ref == nil || ref.UID != stack.GetUID() || s.Labels["models.takeoff.co/reconciled-by"] != "v0" {
			c.t.Errorf("release Secret %s: owners %v, labels %v; want the InferenceStack's and the v0 claim", s.Name, s.OwnerReferences, s.Labels)
		}
	}
	if n := c.revisionsNamingOrchestra(ctx); n != 0 {
		c.t.Errorf("%d stored revisions still name the ModelOrchestra as an owner in their manifests: a rollback to one would bring it back", n)
	}
	// The pods themselves: still running where they ran.
	for name, where := range before.podNodes {
		if after.podNodes[name] != where {
			c.t.Errorf("pod %s: %s → %s", name, where, after.podNodes[name])
		}
	}
}

// operatorBinary is this repository's operator of the source tree's major,
// built into a test directory (or the runfile, under Bazel).
func operatorBinary(t *testing.T) string {
	t.Helper()
	major, err := operatorproc.SourceMajor()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := (&operatorproc.Builds{Dir: t.TempDir()}).Binary(t.Context(), major)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
