package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	inferencestack "github.com/titanml/inference-stack-operator"
	inferencestackchart "github.com/titanml/inference-stack-operator/charts/inference-stack"
	"github.com/titanml/inference-stack-operator/crds"
	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/operatorproc"
	"github.com/titanml/inference-stack-operator/e2e/harness/poll"
	"github.com/titanml/inference-stack-operator/e2e/harness/samples"
	"github.com/titanml/inference-stack-operator/operator/internal/controller"
	"github.com/titanml/inference-stack-operator/operator/internal/watches"
	"github.com/titanml/inference-stack-operator/operator/podsecurity/podsecuritytest"
)

const ns = "default"

// env is one real cluster (etcd, kube-apiserver, controller-manager,
// scheduler, KWOK nodes) with the CRD installed and the v0 operator running
// in this process.
type env struct {
	t   testing.TB
	cl  client.Client
	log *operatorproc.LogBuffer
	// opCfg is the operator's client configuration; stopOperator stops the
	// operator startEnv started.
	opCfg        *rest.Config
	stopOperator func()
	cluster      *localcluster.Cluster
	// requests is every request the operator sent on opCfg.
	requests *requestLog
}

// requestLog records what the operator asks of the API server: each
// request's method and path, a create's with the new object's name, and
// its query.
type requestLog struct {
	mu       sync.Mutex
	requests []string
	queries  []url.Values
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (l *requestLog) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		path := r.URL.Path
		if r.Method == http.MethodPost && r.GetBody != nil {
			if body, err := r.GetBody(); err == nil {
				var obj struct {
					Metadata struct{ Name string } `json:"metadata"`
				}
				if json.NewDecoder(body).Decode(&obj) == nil && obj.Metadata.Name != "" {
					path += "/" + obj.Metadata.Name
				}
			}
		}
		l.mu.Lock()
		l.requests = append(l.requests, r.Method+" "+path)
		l.queries = append(l.queries, r.URL.Query())
		l.mu.Unlock()
		return next.RoundTrip(r)
	})
}

// since returns how many requests were recorded, for about.
func (l *requestLog) since() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.requests)
}

// queriesSince returns the queries of the requests from the from-th on.
func (l *requestLog) queriesSince(from int) []url.Values {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]url.Values(nil), l.queries[from:]...)
}

// about lists the requests from the from-th on that concern a stack
// named name: its own, its objects' (named after it), and lists of its
// release Secrets.
func (l *requestLog) about(from int, name string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for i := from; i < len(l.requests); i++ {
		r := l.requests[i]
		_, path, _ := strings.Cut(r, " ")
		concerns := slices.Contains(strings.Split(l.queries[i].Get("labelSelector"), ","), "name="+name)
		for _, seg := range strings.Split(path, "/") {
			// The stack, its objects, its events, its release Secrets.
			concerns = concerns || seg == name || strings.HasPrefix(seg, name+"-") || strings.HasPrefix(seg, name+".") ||
				strings.HasPrefix(seg, "sh.helm.release.v1."+name+".")
		}
		if concerns {
			out = append(out, r+"?"+l.queries[i].Encode())
		}
	}
	return out
}

// readBeforeCreate lists the objects among paths that were read before
// they were created (each path an object's, as a create's is recorded).
func (l *requestLog) readBeforeCreate(paths ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	created := map[string]bool{}
	var read []string
	for _, r := range l.requests {
		method, path, _ := strings.Cut(r, " ")
		if !slices.Contains(paths, path) {
			continue
		}
		switch {
		case method == http.MethodPost:
			created[path] = true
		case method == http.MethodGet && !created[path]:
			read = append(read, path)
		}
	}
	return read
}

// historyListedBeforeInstall returns the lists of the release Secrets of
// stack name made before the first create of a Secret in its namespace
// (its first revision: Helm's client sends it as protobuf, so the log has
// no name for it).
func (l *requestLog) historyListedBeforeInstall(namespace, name string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	secrets := "/api/v1/namespaces/" + namespace + "/secrets"
	var listed []string
	for i, r := range l.requests {
		if r == "POST "+secrets || r == "POST "+secrets+"/sh.helm.release.v1."+name+".v1" {
			return listed
		}
		if r == "GET "+secrets && slices.Contains(strings.Split(l.queries[i].Get("labelSelector"), ","), "name="+name) {
			listed = append(listed, r+"?"+l.queries[i].Encode())
		}
	}
	return append(listed, "(no create of a Secret in "+namespace+")")
}

// newEnv starts a cluster with the CRD installed and no operator.
func newEnv(t testing.TB) *env {
	c := localcluster.StartForTest(t, localcluster.Options{})
	cfg := c.RESTConfig()
	if err := crds.Install(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, log: &operatorproc.LogBuffer{}, cluster: c}
	e.cl = newClient(t, cfg)
	// Where the majors' operators run, as OLM makes it: each keeps its
	// release-record key there.
	for _, major := range []string{"v0", "v1"} {
		if err := e.cl.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: inferencestack.Namespace(major)}}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// startEnv starts a cluster and the operator of build in this process.
func startEnv(t testing.TB, build operatorBuild) *env {
	e := newEnv(t)
	opCfg := rest.CopyConfig(e.cluster.RESTConfig())
	controller.SetClientLimits(opCfg, 0, 0) // the operator's defaults
	e.requests = &requestLog{}
	opCfg.Wrap(e.requests.wrap)
	e.opCfg = opCfg
	e.stopOperator = startOperator(t, opCfg, e.log, build)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("operator log:\n%s", operatorproc.LastLines(e.log.String(), 200))
		}
	})
	return e
}

func newClient(t testing.TB, cfg *rest.Config) client.Client {
	// The tests create hundreds of stacks and poll them: client-go's
	// default of 5 requests per second would make them wait on themselves.
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 200, 400
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

var skipNameValidation = true

// operatorBuild stands for one build of the operator: the chart it embeds
// and its options. The zero value is this source tree's build.
type operatorBuild struct {
	// chart changes the embedded chart, as a later release of it would.
	chart func(*chart.Chart)
	opts  controller.Options
}

// startOperator runs the operator exactly as main wires it: the embedded
// watches.yaml and chart, the restricted cache and the controllers. The
// returned function stops it (as SIGTERM does: in-flight reconciles
// finish first); the test's cleanup stops it too.
func startOperator(t testing.TB, cfg *rest.Config, log *operatorproc.LogBuffer, build operatorBuild) (stop func()) {
	operatorproc.LogTo(log)
	load := inferencestackchart.Load
	if build.chart != nil {
		load = func() (*chart.Chart, error) {
			c, err := inferencestackchart.Load()
			if err == nil {
				build.chart(c)
			}
			return c, err
		}
	}
	ws, err := watches.Load(watches.Default, "v0", watches.Charts{"inference-stack": load})
	if err != nil {
		t.Fatal(err)
	}
	cacheOpts, err := controller.CacheOptions(ws, build.opts)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Several tests start an operator in this process, and one restarts
		// its operator with a new build of the chart: each registers the
		// same controller names.
		Controller: ctrlconfig.Controller{SkipNameValidation: &skipNameValidation},
	})
	if err != nil {
		t.Fatal(err)
	}
	if build.opts.Version == "" {
		build.opts.Version = "test"
	}
	if err := controller.Setup(mgr, ws, build.opts); err != nil {
		t.Fatal(err)
	}
	return operatorproc.StartInProcess(t, "operator", mgr)
}

func (e *env) apply(name, major, spec string) *unstructured.Unstructured {
	e.t.Helper()
	var s map[string]any
	if err := yaml.Unmarshal([]byte(spec), &s); err != nil {
		e.t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "models.takeoff.co/v1alpha1",
		"kind":       "InferenceStack",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec":       s,
	}}
	if major != "" {
		u.SetLabels(map[string]string{"operatorVersion": major})
	}
	if err := e.cl.Create(e.t.Context(), u); err != nil {
		e.t.Fatalf("creating stack %s: %v", name, err)
	}
	return u
}

func (e *env) getStack(name string) *unstructured.Unstructured {
	e.t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("models.takeoff.co/v1alpha1")
	u.SetKind("InferenceStack")
	if err := e.cl.Get(e.t.Context(), types.NamespacedName{Namespace: ns, Name: name}, u); err != nil {
		e.t.Fatalf("getting stack %s: %v", name, err)
	}
	return u
}

// update re-reads the stack, applies mutate and writes it, retrying on
// conflicts with the operator's own writes.
func (e *env) update(name string, mutate func(u *unstructured.Unstructured)) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		u := e.getStack(name)
		mutate(u)
		err := e.cl.Update(ctx, u)
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		e.t.Fatalf("updating stack %s: %v", name, err)
	}
}

func condition(u *unstructured.Unstructured, typ string) (status, reason, message string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			status, _ = m["status"].(string)
			reason, _ = m["reason"].(string)
			message, _ = m["message"].(string)
		}
	}
	return
}

// eventually polls cond until it holds or the deadline passes, then fails
// with the last explanation cond gave.
func (e *env) eventually(what string, timeout time.Duration, cond func(ctx context.Context) (bool, string)) {
	e.t.Helper()
	err := poll.Until(e.t.Context(), timeout, what, func(ctx context.Context) (bool, string, error) {
		ok, why := cond(ctx)
		return ok, why, nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) waitDeployed(name string) *unstructured.Unstructured {
	e.t.Helper()
	var u *unstructured.Unstructured
	e.eventually(name+" Deployed=True", 90*time.Second, func(ctx context.Context) (bool, string) {
		u = e.getStack(name)
		s, r, m := condition(u, "Deployed")
		f, _, fm := condition(u, "ReleaseFailed")
		return s == "True", fmt.Sprintf("Deployed=%s (%s: %s), ReleaseFailed=%s %s", s, r, m, f, fm)
	})
	return u
}

// waitDeployedAtGeneration waits until the stack's latest generation is
// deployed.
func (e *env) waitDeployedAtGeneration(name string) {
	e.t.Helper()
	e.eventually(name+" deployed at its generation", 90*time.Second, func(ctx context.Context) (bool, string) {
		u := e.getStack(name)
		observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		s, r, m := condition(u, "Deployed")
		return observed == u.GetGeneration() && s == "True", fmt.Sprintf("observed %d of %d, Deployed=%s %s: %s", observed, u.GetGeneration(), s, r, m)
	})
}

// waitCondition waits for the stack's condition typ to have status and
// reason.
func (e *env) waitCondition(name, typ, status, reason string) {
	e.t.Helper()
	e.eventually(fmt.Sprintf("%s %s=%s (%s)", name, typ, status, reason), 60*time.Second, func(ctx context.Context) (bool, string) {
		s, r, m := condition(e.getStack(name), typ)
		return s == status && r == reason, fmt.Sprintf("%s=%s (%s: %s)", typ, s, r, m)
	})
}

// podUIDs waits until the Deployment's rollout is complete and returns the
// UIDs of its pods.
func (e *env) podUIDs(deployment string) map[types.UID]bool {
	e.t.Helper()
	var uids map[types.UID]bool
	e.eventually(deployment+" rolled out", 60*time.Second, func(ctx context.Context) (bool, string) {
		d := e.deployment(deployment)
		want := *d.Spec.Replicas
		if d.Status.ObservedGeneration != d.Generation || d.Status.UpdatedReplicas != want || d.Status.Replicas != want {
			return false, fmt.Sprintf("generation %d observed %d, replicas %d updated %d of %d",
				d.Generation, d.Status.ObservedGeneration, d.Status.Replicas, d.Status.UpdatedReplicas, want)
		}
		var pods corev1.PodList
		if err := e.cl.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
			return false, err.Error()
		}
		uids = map[types.UID]bool{}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				uids[p.UID] = true
			}
		}
		return int32(len(uids)) == want && len(uids) == len(pods.Items), fmt.Sprintf("%d pods, want %d", len(pods.Items), want)
	})
	return uids
}

// samePods fails unless the Deployment's pods are exactly before.
func (e *env) samePods(deployment string, before map[types.UID]bool) {
	e.t.Helper()
	if after := e.podUIDs(deployment); !maps.Equal(after, before) {
		e.t.Errorf("%s: pods were replaced: %v -> %v", deployment, slices.Collect(maps.Keys(before)), slices.Collect(maps.Keys(after)))
	}
}

// deleteAndWait deletes the stack and waits until it is gone.
func (e *env) deleteAndWait(name string) {
	e.t.Helper()
	if err := e.cl.Delete(e.t.Context(), e.getStack(name)); err != nil {
		e.t.Fatal(err)
	}
	e.eventually(name+" deleted", 60*time.Second, func(ctx context.Context) (bool, string) {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("models.takeoff.co/v1alpha1")
		u.SetKind("InferenceStack")
		err := e.cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, u)
		return apierrors.IsNotFound(err), fmt.Sprintf("finalizers %v (%v)", u.GetFinalizers(), err)
	})
}

func (e *env) deployment(name string) *appsv1.Deployment {
	e.t.Helper()
	d := &appsv1.Deployment{}
	if err := e.cl.Get(e.t.Context(), types.NamespacedName{Namespace: ns, Name: name}, d); err != nil {
		e.t.Fatalf("getting deployment %s: %v", name, err)
	}
	return d
}

func (e *env) events(object string) []corev1.Event {
	e.t.Helper()
	var list corev1.EventList
	if err := e.cl.List(e.t.Context(), &list, client.InNamespace(ns)); err != nil {
		e.t.Fatal(err)
	}
	var out []corev1.Event
	for _, ev := range list.Items {
		if ev.InvolvedObject.Name == object && ev.InvolvedObject.Kind == "InferenceStack" {
			out = append(out, ev)
		}
	}
	return out
}

func hasEvent(evs []corev1.Event, reason string) (corev1.Event, bool) {
	for _, ev := range evs {
		if ev.Reason == reason {
			return ev, true
		}
	}
	return corev1.Event{}, false
}

func exists(ctx context.Context, cl client.Client, obj client.Object, name string) bool {
	err := cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj)
	return err == nil
}

func TestOperatorOnRealAPIServer(t *testing.T) {
	e := startEnv(t, operatorBuild{opts: controller.Options{UnclaimedGrace: 2 * time.Second}})
	const stack, reader, gateway = "my-inference-stack", "my-inference-stack-hello-world", "my-inference-stack-gateway"

	t.Run("documented example deploys a gateway and a GPU-placed reader", func(t *testing.T) {
		e.t = t
		e.apply(stack, "v0", samples.ExampleSpec)
		e.waitDeployed(stack)

		d := e.deployment(reader)
		pod := d.Spec.Template.Spec
		if got := pod.NodeSelector["nvidia.com/gpu.product"]; got != "NVIDIA-GeForce-RTX-3060" {
			t.Errorf("reader nodeSelector = %v", pod.NodeSelector)
		}
		if q := pod.Containers[0].Resources.Limits["nvidia.com/gpu"]; q.String() != "1" {
			t.Errorf("reader GPU limit = %q, want 1", q.String())
		}
		if len(pod.ImagePullSecrets) != 1 || pod.ImagePullSecrets[0].Name != "regcred" {
			t.Errorf("imagePullSecrets = %v", pod.ImagePullSecrets)
		}
		e.deployment(gateway)
		// Helm checks that none of a new release's objects exists before
		// it creates them; the operator's cache answers that, so the
		// install reads none of them.
		objects := []string{
			"/api/v1/namespaces/" + ns + "/serviceaccounts/" + stack,
			"/api/v1/namespaces/" + ns + "/configmaps/" + reader, "/api/v1/namespaces/" + ns + "/configmaps/" + gateway,
			"/api/v1/namespaces/" + ns + "/services/" + reader, "/api/v1/namespaces/" + ns + "/services/" + gateway,
			"/apis/apps/v1/namespaces/" + ns + "/deployments/" + reader, "/apis/apps/v1/namespaces/" + ns + "/deployments/" + gateway,
		}
		if read := e.requests.readBeforeCreate(objects...); len(read) > 0 {
			t.Errorf("the install read objects it then created: %v", read)
		}
		// Nor did it list the history of a release the operator's cache
		// of release Secrets has never seen.
		if listed := e.requests.historyListedBeforeInstall(ns, stack); len(listed) > 0 {
			t.Errorf("the install listed the history of a new release: %v", listed)
		}
		for _, obj := range []struct {
			o    client.Object
			name string
		}{{&corev1.ConfigMap{}, reader}, {&corev1.ConfigMap{}, gateway}, {&corev1.Service{}, reader}, {&corev1.Service{}, gateway}, {&corev1.ServiceAccount{}, stack}} {
			if !exists(t.Context(), e.cl, obj.o, obj.name) {
				t.Errorf("%T %s was not created", obj.o, obj.name)
			}
		}

		// The real scheduler places the reader on the only RTX 3060 node.
		e.eventually("reader pod Running on the RTX 3060 node", 60*time.Second, func(ctx context.Context) (bool, string) {
			var pods corev1.PodList
			if err := e.cl.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
				return false, err.Error()
			}
			for _, p := range pods.Items {
				if p.Spec.NodeName == "gpu-rtx3060" && p.Status.Phase == corev1.PodRunning {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d pods, none Running on gpu-rtx3060", len(pods.Items))
		})
	})

	t.Run("editing readerConfig updates the config and rolls the pods", func(t *testing.T) {
		e.t = t
		before := e.deployment(reader).Spec.Template.Annotations["checksum/config"]
		if before == "" {
			t.Fatal("reader pod template has no checksum/config annotation")
		}
		e.update(stack, func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "unsloth/Llama-3.2-3B-Instruct", "spec", "applications", "hello-world", "readerConfig", "modelName")
		})
		e.eventually("ConfigMap and checksum updated", 60*time.Second, func(ctx context.Context) (bool, string) {
			cm := &corev1.ConfigMap{}
			if err := e.cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: reader}, cm); err != nil {
				return false, err.Error()
			}
			after := e.deployment(reader).Spec.Template.Annotations["checksum/config"]
			ok := strings.Contains(cm.Data["config.yaml"], "Llama-3.2-3B-Instruct") && after != before
			return ok, fmt.Sprintf("config.yaml=%q checksum %s -> %s", cm.Data["config.yaml"], before, after)
		})
	})

	t.Run("release records keep the manifest, values and chart metadata, not the templates", func(t *testing.T) {
		e.t = t
		secrets := driver.NewSecrets(kubernetes.NewForConfigOrDie(e.cluster.RESTConfig()).CoreV1().Secrets(ns))
		var rels []*release.Release
		e.eventually("revision 2 deployed, revision 1 superseded", 60*time.Second, func(context.Context) (bool, string) {
			var err error
			if rels, err = secrets.Query(map[string]string{"name": stack, "owner": "helm"}); err != nil {
				return false, err.Error()
			}
			var got []string
			for _, r := range rels {
				got = append(got, fmt.Sprintf("v%d %s", r.Version, r.Info.Status))
			}
			slices.Sort(got)
			return slices.Equal(got, []string{"v1 superseded", "v2 deployed"}), fmt.Sprint(got)
		})
		for _, r := range rels {
			if n := len(r.Chart.Templates); n != 0 {
				t.Errorf("revision %d stores %d chart templates", r.Version, n)
			}
			if r.Chart.Metadata == nil || r.Chart.Metadata.Name != "inference-stack" || len(r.Chart.Values) == 0 {
				t.Errorf("revision %d lost its chart's metadata or values: %+v", r.Version, r.Chart.Metadata)
			}
			if !strings.Contains(r.Manifest, "name: "+reader) || len(r.Config) == 0 {
				t.Errorf("revision %d lost its manifest or values: %d bytes of manifest, config %v", r.Version, len(r.Manifest), r.Config)
			}
		}
	})

	t.Run("a deleted Deployment is recreated", func(t *testing.T) {
		e.t = t
		old := e.deployment(reader)
		if err := e.cl.Delete(t.Context(), old); err != nil {
			t.Fatal(err)
		}
		e.eventually("reader Deployment recreated", 60*time.Second, func(ctx context.Context) (bool, string) {
			d := &appsv1.Deployment{}
			if err := e.cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: reader}, d); err != nil {
				return false, err.Error()
			}
			return d.UID != old.UID && d.DeletionTimestamp == nil, "still the old object"
		})
	})

	t.Run("a stack labelled for another major is never touched", func(t *testing.T) {
		e.t = t
		foreign := e.apply("foreign", "v1", samples.ExampleSpec)
		// Its "own" dependents change: a Helm-managed Deployment owned by it,
		// which the v0 operator's dependent watches see.
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{
				Name: "foreign-dependent", Namespace: ns,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "Helm", "app": "foreign"},
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "models.takeoff.co/v1alpha1", Kind: "InferenceStack", Name: "foreign", UID: foreign.GetUID(),
				}},
			},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "foreign"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "foreign"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
				},
			},
		}
		if err := e.cl.Create(t.Context(), dep); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"template":{"metadata":{"annotations":{"touch":"%d"}}}}}`, i))
			if err := e.cl.Patch(t.Context(), dep, patch); err != nil {
				t.Fatal(err)
			}
		}
		// A barrier: a v0 stack created after those events is deployed, so the
		// operator has processed its queue past them.
		e.apply("barrier", "v0", `{applications: {a: {}}}`)
		e.waitDeployed("barrier")

		got := e.getStack("foreign")
		if len(got.GetFinalizers()) != 0 {
			t.Errorf("foreign stack got finalizers %v", got.GetFinalizers())
		}
		// Its status may only say that no v1 operator has claimed it (none
		// runs here).
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] != "Managed" || m["reason"] != "NoOperatorClaimed" {
				t.Errorf("foreign stack got condition %v", m)
			}
		}
		var secrets corev1.SecretList
		if err := e.cl.List(t.Context(), &secrets, client.InNamespace(ns), client.MatchingLabels{"owner": "helm", "name": "foreign"}); err != nil {
			t.Fatal(err)
		}
		if len(secrets.Items) != 0 {
			t.Errorf("foreign stack got %d release Secrets", len(secrets.Items))
		}
		if exists(t.Context(), e.cl, &appsv1.Deployment{}, "foreign-inference-stack-gateway") {
			t.Error("the v0 operator created the foreign stack's gateway")
		}
		for _, ev := range e.events("foreign") {
			if ev.Reason != "NoOperatorClaimed" {
				t.Errorf("foreign stack got event %s: %s", ev.Reason, ev.Message)
			}
		}
	})

	t.Run("relabelling hands the stack over without deleting workloads", func(t *testing.T) {
		e.t = t
		e.apply("moving", "v0", `{applications: {a: {}}}`)
		e.waitDeployed("moving")
		if got := e.getStack("moving").GetLabels()[controller.ReconciledByLabel]; got != "v0" {
			t.Errorf("claim label = %q, want v0", got)
		}
		e.waitCondition("moving", "Managed", "True", "Reconciling")
		pods := e.podUIDs("moving-inference-stack-gateway")

		e.update("moving", func(u *unstructured.Unstructured) {
			u.SetLabels(map[string]string{"operatorVersion": "v1"})
		})
		e.eventually("finalizer and claim released", 60*time.Second, func(ctx context.Context) (bool, string) {
			u := e.getStack("moving")
			return len(u.GetFinalizers()) == 0 && u.GetLabels()[controller.ReconciledByLabel] == "",
				fmt.Sprintf("finalizers %v labels %v", u.GetFinalizers(), u.GetLabels())
		})
		// No v1 operator runs here: the stack says nobody reconciles it.
		e.waitCondition("moving", "Managed", "False", "NoOperatorClaimed")
		e.waitCondition("moving", "Deployed", "Unknown", "NotManaged")
		if _, ok := hasEvent(e.events("moving"), "Released"); !ok {
			t.Error("no Released event on the relabelled stack")
		}
		e.samePods("moving-inference-stack-gateway", pods)

		// Labelled back, v0 claims it again and adopts the existing release.
		e.update("moving", func(u *unstructured.Unstructured) {
			u.SetLabels(map[string]string{"operatorVersion": "v0"})
		})
		e.eventually("claimed again", 60*time.Second, func(ctx context.Context) (bool, string) {
			u := e.getStack("moving")
			return len(u.GetFinalizers()) == 1 && u.GetLabels()[controller.ReconciledByLabel] == "v0",
				fmt.Sprintf("finalizers %v labels %v", u.GetFinalizers(), u.GetLabels())
		})
		e.waitDeployed("moving")
		e.waitCondition("moving", "Managed", "True", "Reconciling")
		e.samePods("moving-inference-stack-gateway", pods)
	})

	t.Run("a stack no operator can reconcile says why", func(t *testing.T) {
		e.t = t
		e.apply("unlabelled", "", `{applications: {a: {}}}`)
		e.apply("mistyped", "V0", `{applications: {a: {}}}`)
		e.apply("absent-major", "v7", `{applications: {a: {}}}`)
		e.waitCondition("unlabelled", "Managed", "False", "NoOperatorVersionLabel")
		e.waitCondition("mistyped", "Managed", "False", "InvalidOperatorVersionLabel")
		e.waitCondition("absent-major", "Managed", "False", "NoOperatorClaimed")
		for _, name := range []string{"unlabelled", "mistyped", "absent-major"} {
			u := e.getStack(name)
			if len(u.GetFinalizers()) != 0 || u.GetLabels()[controller.ReconciledByLabel] != "" {
				t.Errorf("%s: finalizers %v labels %v", name, u.GetFinalizers(), u.GetLabels())
			}
			if exists(t.Context(), e.cl, &appsv1.Deployment{}, name+"-inference-stack-gateway") {
				t.Errorf("%s was installed", name)
			}
		}
	})

	t.Run("an unlabelled stack never keeps a finalizer nobody removes", func(t *testing.T) {
		e.t = t
		// As an operator version without claims could leave it.
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "models.takeoff.co/v1alpha1", "kind": "InferenceStack",
			"metadata": map[string]any{"name": "legacy", "namespace": ns, "finalizers": []any{"uninstall-helm-release"}},
			"spec":     map[string]any{"applications": map[string]any{"a": map[string]any{}}},
		}}
		if err := e.cl.Create(t.Context(), u); err != nil {
			t.Fatal(err)
		}
		e.eventually("legacy finalizer removed", 30*time.Second, func(ctx context.Context) (bool, string) {
			got := e.getStack("legacy")
			return len(got.GetFinalizers()) == 0, fmt.Sprintf("finalizers %v", got.GetFinalizers())
		})
		e.deleteAndWait("legacy")
	})

	t.Run("an edited Deployment is repaired", func(t *testing.T) {
		e.t = t
		d := e.deployment(gateway)
		if err := e.cl.Patch(t.Context(), d, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":3}}`))); err != nil {
			t.Fatal(err)
		}
		e.eventually("replicas restored", 60*time.Second, func(ctx context.Context) (bool, string) {
			got := e.deployment(gateway)
			return *got.Spec.Replicas == 1, fmt.Sprintf("replicas %d", *got.Spec.Replicas)
		})
	})

	t.Run("a deleted release Secret is reinstated without touching pods", func(t *testing.T) {
		e.t = t
		pods := e.podUIDs(reader)
		var secrets corev1.SecretList
		if err := e.cl.List(t.Context(), &secrets, client.InNamespace(ns), client.MatchingLabels{"owner": "helm", "name": stack}); err != nil {
			t.Fatal(err)
		}
		for i := range secrets.Items {
			if err := e.cl.Delete(t.Context(), &secrets.Items[i]); err != nil {
				t.Fatal(err)
			}
		}
		e.eventually("release recorded again", 60*time.Second, func(ctx context.Context) (bool, string) {
			var now corev1.SecretList
			if err := e.cl.List(ctx, &now, client.InNamespace(ns), client.MatchingLabels{"owner": "helm", "name": stack, "status": "deployed"}); err != nil {
				return false, err.Error()
			}
			return len(now.Items) == 1, fmt.Sprintf("%d deployed release Secrets", len(now.Items))
		})
		e.waitDeployed(stack)
		e.samePods(reader, pods)
	})

	t.Run("a release failure is a condition and an event, not a crash", func(t *testing.T) {
		e.t = t
		// The schema accepts any quantities; the API server rejects a request
		// above its limit when the Deployment is created.
		e.apply("broken", "v0", `{applications: {a: {resources: {limits: {cpu: "1"}, requests: {cpu: "2"}}}}}`)
		e.eventually("ReleaseFailed=True", 90*time.Second, func(ctx context.Context) (bool, string) {
			s, r, m := condition(e.getStack("broken"), "ReleaseFailed")
			return s == "True" && m != "", fmt.Sprintf("ReleaseFailed=%s %s %s", s, r, m)
		})
		_, _, msg := condition(e.getStack("broken"), "ReleaseFailed")
		if !strings.Contains(msg, "must be less than or equal to cpu limit") {
			t.Errorf("ReleaseFailed message does not explain the failure: %s", msg)
		}
		e.eventually("InstallFailed event", 30*time.Second, func(ctx context.Context) (bool, string) {
			_, ok := hasEvent(e.events("broken"), "InstallFailed")
			return ok, "no InstallFailed event yet"
		})
		// Other stacks keep reconciling.
		e.apply("healthy", "v0", `{applications: {b: {}}}`)
		e.waitDeployed("healthy")
	})

	t.Run("a stack whose pods break Pod Security is refused and creates nothing", func(t *testing.T) {
		e.t = t
		// No admission policy here (only the CRD is installed): the
		// operator's own check is all that stands between the spec and
		// the node. The namespace has no Pod Security label: baseline.
		var names []string
		for i, c := range podsecuritytest.Cases {
			if !c.Baseline {
				continue
			}
			spec, err := c.YAML()
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("refused-%d", i)
			names = append(names, name)
			e.apply(name, "v0", spec)
		}
		for _, name := range names {
			e.eventually(name+" refused", 90*time.Second, func(ctx context.Context) (bool, string) {
				s, r, m := condition(e.getStack(name), "ReleaseFailed")
				return s == "True" && strings.Contains(m, "refused by Pod Security"), fmt.Sprintf("ReleaseFailed=%s %s %s", s, r, m)
			})
			e.eventually(name+" PodSecurityViolation event", 30*time.Second, func(ctx context.Context) (bool, string) {
				_, ok := hasEvent(e.events(name), "PodSecurityViolation")
				return ok, "no PodSecurityViolation event yet"
			})
		}
		for _, list := range []client.ObjectList{&appsv1.DeploymentList{}, &corev1.ServiceList{}, &corev1.ConfigMapList{}, &corev1.ServiceAccountList{}, &corev1.SecretList{}} {
			if err := e.cl.List(t.Context(), list, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			items, _ := meta.ExtractList(list)
			for _, item := range items {
				o := item.(client.Object)
				for _, name := range names {
					if o.GetLabels()["app.kubernetes.io/instance"] == name || o.GetLabels()["name"] == name && o.GetLabels()["owner"] == "helm" {
						t.Errorf("refused stack %s created %T %s", name, o, o.GetName())
					}
				}
			}
		}
		_, _, msg := condition(e.getStack(names[0]), "ReleaseFailed")
		t.Logf("%d stacks refused; the first says: %s", len(names), msg)
		for _, name := range names {
			e.deleteAndWait(name)
		}
	})

	t.Run("deleting a stack removes everything it created", func(t *testing.T) {
		e.t = t
		u := e.getStack(stack)
		if err := e.cl.Delete(t.Context(), u); err != nil {
			t.Fatal(err)
		}
		e.eventually("stack and its objects gone", 90*time.Second, func(ctx context.Context) (bool, string) {
			var left []string
			check := func(o client.Object, name string) {
				if exists(ctx, e.cl, o, name) {
					left = append(left, fmt.Sprintf("%T/%s", o, name))
				}
			}
			check(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "models.takeoff.co/v1alpha1", "kind": "InferenceStack"}}, stack)
			check(&appsv1.Deployment{}, reader)
			check(&appsv1.Deployment{}, gateway)
			check(&corev1.ConfigMap{}, reader)
			check(&corev1.ConfigMap{}, gateway)
			check(&corev1.Service{}, reader)
			check(&corev1.Service{}, gateway)
			check(&corev1.ServiceAccount{}, stack)
			var secrets corev1.SecretList
			if err := e.cl.List(ctx, &secrets, client.InNamespace(ns), client.MatchingLabels{"owner": "helm", "name": stack}); err == nil && len(secrets.Items) > 0 {
				left = append(left, fmt.Sprintf("%d release secrets", len(secrets.Items)))
			}
			return len(left) == 0, strings.Join(left, ", ")
		})
	})
}

// TestUpgradeKeepsPods runs three builds of the operator in turn over the
// same stacks, as OLM upgrades would: N+1 embeds a chart with another
// version that renders the same pod specs, so no pod may be replaced; N+2
// changes a default one application's config relies on, so exactly that
// application's pods roll.
func TestUpgradeKeepsPods(t *testing.T) {
	e := startEnv(t, operatorBuild{})
	// App "pinned" sets consumerGroup itself; app "defaulted" takes the
	// chart's default.
	const spec = `
applications:
  pinned: {readerConfig: {consumerGroup: primary}}
  defaulted: {}
`
	e.apply("upgraded", "v0", spec)
	e.apply("plain", "v0", `{applications: {a: {}}}`)
	deployments := []string{"upgraded-inference-stack-gateway", "upgraded-inference-stack-pinned",
		"upgraded-inference-stack-defaulted", "plain-inference-stack-gateway", "plain-inference-stack-a"}
	pods := map[string]map[types.UID]bool{}
	for _, s := range []string{"upgraded", "plain"} {
		e.waitDeployed(s)
	}
	for _, d := range deployments {
		pods[d] = e.podUIDs(d)
	}
	chartVersion := func(d string) string { return e.deployment(d).Labels["helm.sh/chart"] }
	before := chartVersion("upgraded-inference-stack-gateway")

	upgrade := func(t *testing.T, version string, change func(*chart.Chart)) {
		e.t = t
		e.stopOperator()
		e.stopOperator = startOperator(t, e.opCfg, e.log, operatorBuild{chart: func(c *chart.Chart) {
			c.Metadata.Version = version
			if change != nil {
				change(c)
			}
		}})
		for _, d := range deployments {
			e.eventually(d+" relabelled for chart "+version, 90*time.Second, func(ctx context.Context) (bool, string) {
				got := chartVersion(d)
				return got == "inference-stack-"+version, "helm.sh/chart=" + got
			})
		}
		for _, s := range []string{"upgraded", "plain"} {
			e.waitDeployed(s)
		}
	}

	t.Run("a chart version bump replaces no pod", func(t *testing.T) {
		upgrade(t, "9.0.0", nil)
		if chartVersion("plain-inference-stack-a") == before {
			t.Fatal("the chart version did not change")
		}
		for _, d := range deployments {
			e.samePods(d, pods[d])
		}
	})

	t.Run("a changed default rolls exactly the applications that use it", func(t *testing.T) {
		upgrade(t, "9.1.0", func(c *chart.Chart) {
			template := c.Values["applicationTemplate"].(map[string]any)
			template["readerConfig"].(map[string]any)["consumerGroup"] = "secondary"
		})
		rolled := []string{"upgraded-inference-stack-defaulted", "plain-inference-stack-a"}
		for _, d := range deployments {
			if !slices.Contains(rolled, d) {
				e.samePods(d, pods[d])
				continue
			}
			e.eventually(d+" rolled", 90*time.Second, func(ctx context.Context) (bool, string) {
				now := e.podUIDs(d)
				for uid := range now {
					if pods[d][uid] {
						return false, fmt.Sprintf("old pod %s still there", uid)
					}
				}
				return true, ""
			})
		}
	})
}

// TestRestartOverSettledStacks restarts the operator over settled stacks,
// with drift made while it was down: an unchanged stack costs no request at
// all (not even a read of the stack), while every change is found from the
// caches and repaired.
func TestRestartOverSettledStacks(t *testing.T) {
	e := startEnv(t, operatorBuild{})
	const spec = `{applications: {a: {}}}`
	stacks := []string{"calm", "scaled", "relabelled", "cut", "rewritten"}
	for _, s := range stacks {
		e.apply(s, "v0", spec)
	}
	digests := map[string]string{}
	for _, s := range stacks {
		e.waitDeployed(s)
		e.eventually(s+" has a verified digest", 60*time.Second, func(ctx context.Context) (bool, string) {
			d, _, _ := unstructured.NestedString(e.getStack(s).Object, "status", "verifiedDigest")
			digests[s] = d
			return d != "", "no status.verifiedDigest"
		})
	}
	// Ready too, so that no readiness write is due when the operator
	// restarts.
	for _, s := range stacks {
		e.waitCondition(s, "Ready", "True", "Available")
	}
	calmPods := e.podUIDs("calm-inference-stack-gateway")
	e.stopOperator()

	// Drift while no operator watches.
	gateway := func(s string) string { return s + "-inference-stack-gateway" }
	if err := e.cl.Patch(t.Context(), e.deployment(gateway("scaled")), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":3}}`))); err != nil {
		t.Fatal(err)
	}
	if err := e.cl.Patch(t.Context(), e.deployment(gateway("relabelled")), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"app.kubernetes.io/name":"other"}}}`))); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cut-inference-stack-a"}}
	if err := e.cl.Delete(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	cm = &corev1.ConfigMap{}
	if err := e.cl.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "rewritten-inference-stack-a"}, cm); err != nil {
		t.Fatal(err)
	}
	original := maps.Clone(cm.Data)
	for k := range cm.Data {
		cm.Data[k] = "rewritten"
	}
	if err := e.cl.Update(t.Context(), cm); err != nil {
		t.Fatal(err)
	}

	from := e.requests.since()
	e.stopOperator = startOperator(t, e.opCfg, e.log, operatorBuild{})
	e.eventually("scaled repaired", 90*time.Second, func(ctx context.Context) (bool, string) {
		r := *e.deployment(gateway("scaled")).Spec.Replicas
		return r == 1, fmt.Sprintf("replicas %d", r)
	})
	e.eventually("relabelled repaired", 90*time.Second, func(ctx context.Context) (bool, string) {
		l := e.deployment(gateway("relabelled")).Labels["app.kubernetes.io/name"]
		return l == "inference-stack", "app.kubernetes.io/name=" + l
	})
	e.eventually("cut repaired", 90*time.Second, func(ctx context.Context) (bool, string) {
		return exists(ctx, e.cl, &corev1.ConfigMap{}, "cut-inference-stack-a"), "ConfigMap missing"
	})
	e.eventually("rewritten repaired", 90*time.Second, func(ctx context.Context) (bool, string) {
		got := &corev1.ConfigMap{}
		if err := e.cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rewritten-inference-stack-a"}, got); err != nil {
			return false, err.Error()
		}
		return maps.Equal(got.Data, original), fmt.Sprintf("data %v", got.Data)
	})
	// Each repaired stack records what it verified: a new digest where
	// the repair left an object at a new version (a new generation, a new
	// object, a write to a ConfigMap); the relabelled Deployment is back
	// to the version verified before. The unchanged stack was found
	// settled.
	for _, s := range []string{"scaled", "cut", "rewritten"} {
		e.eventually(s+" has a new verified digest", 60*time.Second, func(ctx context.Context) (bool, string) {
			d, _, _ := unstructured.NestedString(e.getStack(s).Object, "status", "verifiedDigest")
			return d != "" && d != digests[s], "status.verifiedDigest " + d
		})
	}
	e.eventually("calm found settled", 60*time.Second, func(ctx context.Context) (bool, string) {
		for _, line := range strings.Split(e.log.String(), "\n") {
			if strings.Contains(line, "settled: nothing changed") && strings.Contains(line, `"calm"`) {
				return true, ""
			}
		}
		return false, "no log line of calm settled"
	})
	if got := e.requests.about(from, "calm"); len(got) > 0 {
		t.Errorf("the restarted operator sent %d requests about the settled stack:\n%s", len(got), strings.Join(got, "\n"))
	}
	if d, _, _ := unstructured.NestedString(e.getStack("calm").Object, "status", "verifiedDigest"); d != digests["calm"] {
		t.Errorf("the settled stack's digest changed: %s -> %s", digests["calm"], d)
	}
	e.samePods("calm-inference-stack-gateway", calmPods)
}
