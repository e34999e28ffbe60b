package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	inferencestack "github.com/titanml/inference-stack-operator"
	catalogchart "github.com/titanml/inference-stack-operator/charts/catalog"
	"github.com/titanml/inference-stack-operator/e2e/harness/olmv0local"
	"github.com/titanml/inference-stack-operator/e2e/harness/poll"
)

// Where the scenario installs the catalog chart. The names the chart and
// the bundle give to things are the project's (package inferencestack).
const (
	HelmNamespace = "inference-stack-system"
	HelmRelease   = "catalog"
)

var (
	GVRClusterCatalog   = schema.GroupVersionResource{Group: "olm.operatorframework.io", Version: "v1", Resource: "clustercatalogs"}
	GVRClusterExtension = schema.GroupVersionResource{Group: "olm.operatorframework.io", Version: "v1", Resource: "clusterextensions"}
	GVRInferenceStack   = schema.GroupVersionResource{Group: "models.takeoff.co", Version: "v1alpha1", Resource: "inferencestacks"}
	GVRCRD              = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// Mark is a point of the scenario's timeline.
type Mark struct {
	What string
	At   time.Time
}

// Scenario drives one environment through the flow.
type Scenario struct {
	Env *Env
	// Log receives progress lines.
	Log   io.Writer
	Major string
	Helm  catalogchart.Release

	Dyn dynamic.Interface
	CS  kubernetes.Interface

	// Runner stands in for the kubelet for the operator Deployment (local
	// provider).
	Runner Runner
	// Timeline of what happened, in order.
	Timeline []Mark
	// Memory holds the operator containers' memory readings (real node).
	Memory []MemorySample
	// PullTimes are the kubelet's image pull times of the operator pods,
	// by version.
	PullTimes map[string]time.Duration
}

// New prepares a scenario on env for major "v0".
func New(env *Env, log io.Writer) (*Scenario, error) {
	if log == nil {
		log = io.Discard
	}
	dyn, err := dynamic.NewForConfig(env.RESTConfig)
	if err != nil {
		return nil, fmt.Errorf("creating a dynamic client: %w", err)
	}
	cfg := *env.RESTConfig
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		return nil, fmt.Errorf("creating a Kubernetes client: %w", err)
	}
	return &Scenario{
		Env: env, Log: log, Major: "v0", Dyn: dyn, CS: cs,
		Helm: catalogchart.Release{Kubeconfig: env.Kubeconfig, Namespace: HelmNamespace, Name: HelmRelease},
	}, nil
}

func (s *Scenario) logf(format string, args ...any) {
	fmt.Fprintf(s.Log, format+"\n", args...)
}

// Mark records a timeline point.
func (s *Scenario) Mark(what string) time.Time {
	now := time.Now()
	s.Timeline = append(s.Timeline, Mark{What: what, At: now})
	return now
}

// Since returns the time between two marks (0 if either is missing).
func (s *Scenario) Since(from, to string) time.Duration {
	var a, b time.Time
	for _, m := range s.Timeline {
		if m.What == from && a.IsZero() {
			a = m.At
		}
		if m.What == to && b.IsZero() {
			b = m.At
		}
	}
	if a.IsZero() || b.IsZero() {
		return 0
	}
	return b.Sub(a)
}

// ChartValues are the catalog chart's values for catalogRef (by digest)
// with this scenario's major on its stable channel.
func (s *Scenario) ChartValues(catalogRef string) map[string]any {
	return map[string]any{
		"catalog":    map[string]any{"image": map[string]any{"ref": catalogRef}},
		"extensions": map[string]any{s.Major: map[string]any{"enabled": true, "channel": inferencestack.Stable}},
	}
}

// InstallCatalog installs (or, if installed, upgrades) the catalog chart
// serving catalogRef and waits until OLM serves exactly it (OLM v1: the
// ClusterCatalog; OLM v0: the CatalogSource's registry pod and OLM's
// connection to it).
func (s *Scenario) InstallCatalog(ctx context.Context, catalogRef string) error {
	if s.Env.OLMv0 != nil {
		return s.installCatalogV0(ctx, catalogRef)
	}
	installed, err := s.Helm.Installed()
	if err != nil {
		return err
	}
	if installed {
		s.Mark("helm upgrade")
		if _, err := s.Helm.Upgrade(s.ChartValues(catalogRef)); err != nil {
			return err
		}
		s.logf("helm upgrade %s: ClusterCatalog %s → %s", HelmRelease, inferencestack.CatalogName, catalogRef)
	} else {
		// Creates the ClusterExtension.
		s.Mark("helm install")
		if _, err := s.Helm.Install(s.ChartValues(catalogRef)); err != nil {
			return err
		}
		s.logf("helm install %s: ClusterCatalog %s (%s), ClusterExtension %s (channel %s)", HelmRelease, inferencestack.CatalogName, catalogRef, inferencestack.ExtensionName(s.Major), inferencestack.Channel(inferencestack.Stable, s.Major))
	}
	return s.WaitCatalogServing(ctx, catalogRef)
}

// UpgradeCatalog points the catalog at catalogRef with helm upgrade.
func (s *Scenario) UpgradeCatalog(ctx context.Context, catalogRef string) error {
	if s.Env.OLMv0 != nil {
		return s.installCatalogV0(ctx, catalogRef)
	}
	s.Mark("helm upgrade catalog")
	if _, err := s.Helm.Upgrade(s.ChartValues(catalogRef)); err != nil {
		return err
	}
	s.logf("helm upgrade %s: ClusterCatalog %s → %s", HelmRelease, inferencestack.CatalogName, catalogRef)
	return s.WaitCatalogServing(ctx, catalogRef)
}

// WaitCatalogServing waits for Serving=True with resolvedSource = ref.
func (s *Scenario) WaitCatalogServing(ctx context.Context, ref string) error {
	err := s.waitFor(ctx, 2*time.Minute, "ClusterCatalog "+inferencestack.CatalogName+" serving "+ref, func(ctx context.Context) (bool, string, error) {
		u, err := s.Dyn.Resource(GVRClusterCatalog).Get(ctx, inferencestack.CatalogName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		st, reason, msg := Condition(u, "Serving")
		resolved, _, _ := unstructured.NestedString(u.Object, "status", "resolvedSource", "image", "ref")
		pst, preason, pmsg := Condition(u, "Progressing")
		why := fmt.Sprintf("Serving=%s %s %q; Progressing=%s %s %q; resolved %s", st, reason, msg, pst, preason, pmsg, resolved)
		return st == "True" && resolved == ref, why, nil
	})
	if err == nil {
		s.Mark("catalog serving " + ref)
	}
	return err
}

// WaitInstalled waits until OLM has installed the operator at version
// from operatorImage (OLM v1: the ClusterExtension; OLM v0: the
// Subscription's CSV) and the operator runs and holds its lease.
func (s *Scenario) WaitInstalled(ctx context.Context, version, operatorImage string) error {
	wait := s.waitExtensionInstalled
	if s.Env.OLMv0 != nil {
		wait = s.waitCSVSucceeded
	}
	if err := wait(ctx, version, operatorImage); err != nil {
		return err
	}
	s.Mark("installed " + version)
	return nil
}

// waitExtensionInstalled waits until the ClusterExtension reports
// Installed=True with version and the bundle Deployment pins
// operatorImage; on the local provider it makes sure the operator runs
// from that image, and it waits until the operator holds its lease.
func (s *Scenario) waitExtensionInstalled(ctx context.Context, version, operatorImage string) error {
	name := inferencestack.ExtensionName(s.Major)
	ns, deployment := inferencestack.Namespace(s.Major), inferencestack.InstanceName(s.Major)
	err := s.waitFor(ctx, 3*time.Minute, fmt.Sprintf("ClusterExtension %s Installed=True at %s", name, version), func(ctx context.Context) (bool, string, error) {
		u, err := s.Dyn.Resource(GVRClusterExtension).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		st, reason, msg := Condition(u, "Installed")
		pst, preason, pmsg := Condition(u, "Progressing")
		got, _, _ := unstructured.NestedString(u.Object, "status", "install", "bundle", "version")
		return st == "True" && got == version, fmt.Sprintf("Installed=%s %s %q; Progressing=%s %s %q; bundle %s", st, reason, msg, pst, preason, pmsg, got), nil
	})
	if err != nil {
		return err
	}
	s.Mark("extension installed " + version)
	s.logf("ClusterExtension %s: Installed=True, bundle %s.v%s", name, inferencestack.PackageName, version)

	if err := s.waitPinned(ctx, ns, deployment, operatorImage); err != nil {
		return err
	}
	s.logf("Deployment %s/%s pins %s", ns, deployment, operatorImage)

	if s.Env.RunDeployment != nil {
		if s.Runner == nil {
			s.Runner = s.Env.RunDeployment(context.WithoutCancel(ctx), ns, deployment)
		}
		err = s.waitFor(ctx, 2*time.Minute, "the operator process running "+operatorImage, func(ctx context.Context) (bool, string, error) {
			var why string
			if e := s.Runner.Err(); e != nil {
				why = e.Error()
			}
			return s.Runner.Image() == operatorImage, fmt.Sprintf("running %q; %s", s.Runner.Image(), why), nil
		})
		if err != nil {
			return err
		}
		s.logf("operator running as a host process (pid %d), extracted from %s", s.Runner.PID(), operatorImage)
	} else {
		// The pods really run: the kubelet pulls the image by digest and
		// reports Ready once the readiness probe answers.
		pods, err := s.waitOperatorPods(ctx, ns, deployment, operatorImage)
		if err != nil {
			return err
		}
		s.Mark("operator pod ready " + version)
		pull := s.PullTime(ctx, &pods[0])
		if s.PullTimes == nil {
			s.PullTimes = map[string]time.Duration{}
		}
		s.PullTimes[version] = pull
		s.logf("operator pod %s Ready on node %s (image pulled by digest in %s)", pods[0].Name, pods[0].Spec.NodeName, pull)
	}
	return s.waitLeaseHeld(ctx, ns, version)
}

// waitPinned waits until the operator Deployment OLM made pins
// operatorImage.
func (s *Scenario) waitPinned(ctx context.Context, ns, deployment, operatorImage string) error {
	return s.waitFor(ctx, time.Minute, "operator Deployment pinning "+operatorImage, func(ctx context.Context) (bool, string, error) {
		d, err := s.CS.AppsV1().Deployments(ns).Get(ctx, deployment, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		img := d.Spec.Template.Spec.Containers[0].Image
		return img == operatorImage, "image " + img, nil
	})
}

// waitOperatorPods waits until as many operator pods as the Deployment
// asks for run operatorImage and are Ready.
func (s *Scenario) waitOperatorPods(ctx context.Context, ns, deployment, operatorImage string) ([]corev1.Pod, error) {
	d, err := s.CS.AppsV1().Deployments(ns).Get(ctx, deployment, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	replicas := 1
	if d.Spec.Replicas != nil {
		replicas = int(*d.Spec.Replicas)
	}
	return s.WaitOperatorReady(ctx, operatorImage, replicas)
}

// waitLeaseHeld waits until an operator in namespace ns renews its major's
// leader lease from now on: a leader that reconciles, not only a Ready pod.
func (s *Scenario) waitLeaseHeld(ctx context.Context, ns, version string) error {
	since := time.Now()
	err := s.waitFor(ctx, time.Minute, "the operator to hold lease "+inferencestack.LeaseID(s.Major), func(ctx context.Context) (bool, string, error) {
		l, err := s.CS.CoordinationV1().Leases(ns).Get(ctx, inferencestack.LeaseID(s.Major), metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return leaseHeldSince(l, since), fmt.Sprintf("holder %v renewed %v", deref(l.Spec.HolderIdentity), l.Spec.RenewTime), nil
	})
	if err == nil {
		s.Mark("operator running " + version)
	}
	return err
}

func leaseHeldSince(l *coordinationv1.Lease, since time.Time) bool {
	return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" && l.Spec.RenewTime != nil &&
		!l.Spec.RenewTime.Time.Before(since.Add(-time.Second))
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// Apply creates (or replaces the spec of) the InferenceStack in doc.
func (s *Scenario) Apply(ctx context.Context, doc string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		return nil, fmt.Errorf("parsing the stack: %w", err)
	}
	if len(s.Env.StackOverrides) > 0 {
		spec, _ := u.Object["spec"].(map[string]any)
		u.Object["spec"] = mergeMaps(deepCopyMap(s.Env.StackOverrides), spec)
	}
	data, err := json.Marshal(u.Object)
	if err != nil {
		return nil, fmt.Errorf("encoding the stack: %w", err)
	}
	force := true
	return s.Dyn.Resource(GVRInferenceStack).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), "application/apply-patch+yaml", data,
		metav1.PatchOptions{FieldManager: "e2e", Force: &force})
}

// WaitDeployed waits for the stack's Deployed=True.
func (s *Scenario) WaitDeployed(ctx context.Context, namespace, name string) error {
	return s.waitFor(ctx, 2*time.Minute, fmt.Sprintf("InferenceStack %s/%s Deployed=True", namespace, name), func(ctx context.Context) (bool, string, error) {
		u, err := s.Dyn.Resource(GVRInferenceStack).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		st, reason, msg := Condition(u, "Deployed")
		return st == "True", fmt.Sprintf("Deployed=%s %s %q", st, reason, msg), nil
	})
}

// WaitReady waits for the stack's Ready condition to say status with
// reason (for status True, of the stack's current generation) and returns
// the stack.
func (s *Scenario) WaitReady(ctx context.Context, namespace, name, status, reason string) (*unstructured.Unstructured, error) {
	var stack *unstructured.Unstructured
	err := s.waitFor(ctx, 3*time.Minute, fmt.Sprintf("InferenceStack %s/%s Ready=%s/%s", namespace, name, status, reason), func(ctx context.Context) (bool, string, error) {
		u, err := s.Dyn.Resource(GVRInferenceStack).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		stack = u
		st, r, msg := Condition(u, "Ready")
		observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		ok := st == status && r == reason && (status != "True" || observed == u.GetGeneration())
		return ok, fmt.Sprintf("Ready=%s %s %q (generation %d, applied %d)", st, r, msg, u.GetGeneration(), observed), nil
	})
	return stack, err
}

// DeleteStack deletes the stack and waits until it is gone (the operator
// has uninstalled its release).
func (s *Scenario) DeleteStack(ctx context.Context, namespace, name string) error {
	err := s.Dyn.Resource(GVRInferenceStack).Namespace(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting InferenceStack %s/%s: %w", namespace, name, err)
	}
	return s.waitFor(ctx, 2*time.Minute, fmt.Sprintf("InferenceStack %s/%s gone", namespace, name), func(ctx context.Context) (bool, string, error) {
		_, err := s.Dyn.Resource(GVRInferenceStack).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, fmt.Sprintf("still there (%v)", err), nil
	})
}

// StackStatus is what `kubectl get inferencestacks` tells of a stack.
type StackStatus struct {
	Name, Operator, Ready, Available, Endpoint, Reason, Message string
}

// Stacks reads the namespace's stacks' readiness.
func (s *Scenario) Stacks(ctx context.Context, namespace string) ([]StackStatus, error) {
	list, err := s.Dyn.Resource(GVRInferenceStack).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the stacks of %s: %w", namespace, err)
	}
	var out []StackStatus
	for i := range list.Items {
		u := &list.Items[i]
		ready, reason, msg := Condition(u, "Ready")
		available, _, _ := unstructured.NestedString(u.Object, "status", "available")
		endpoint, _, _ := unstructured.NestedString(u.Object, "status", "endpoint")
		out = append(out, StackStatus{Name: u.GetName(), Operator: u.GetLabels()["operatorVersion"], Ready: ready,
			Available: available, Endpoint: endpoint, Reason: reason, Message: msg})
	}
	return out, nil
}

// PrintStacks prints the stacks as `kubectl get inferencestacks` does,
// with the reason's message for those not ready.
func PrintStacks(w io.Writer, stacks []StackStatus) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STACK\tOPERATOR\tREADY\tAVAILABLE\tENDPOINT\tREASON")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, st := range stacks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", st.Name, dash(st.Operator), dash(st.Ready), dash(st.Available), dash(st.Endpoint), dash(st.Reason))
	}
	tw.Flush()
	for _, st := range stacks {
		if st.Ready == "False" && st.Message != "" {
			fmt.Fprintf(w, "%s: %s\n", st.Name, st.Message)
		}
	}
}

// Placement is where one pod of a stack went.
type Placement struct {
	Stack, Deployment, Pod, Node, Product, Phase string
	GPUs                                         string
	// Why is the scheduler's message for a pod that is not scheduled.
	Why string
}

// Placements lists the pods of the stack's Deployments (all stacks of the
// namespace when name is "").
func (s *Scenario) Placements(ctx context.Context, namespace, name string) ([]Placement, error) {
	deps, err := s.CS.AppsV1().Deployments(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Deployments in %s: %w", namespace, err)
	}
	nodes, err := s.CS.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	product := map[string]string{}
	for _, n := range nodes.Items {
		product[n.Name] = n.Labels["nvidia.com/gpu.product"]
	}
	var out []Placement
	for _, d := range deps.Items {
		owner := stackOwner(&d)
		if owner == "" || (name != "" && owner != name) {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil {
			return nil, fmt.Errorf("the selector of Deployment %s: %w", d.Name, err)
		}
		pods, err := s.CS.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return nil, fmt.Errorf("listing the pods of Deployment %s: %w", d.Name, err)
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			q := p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]
			pl := Placement{Stack: owner, Deployment: d.Name, Pod: p.Name, Node: p.Spec.NodeName, Product: product[p.Spec.NodeName], Phase: string(p.Status.Phase), GPUs: q.String()}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
					pl.Why = c.Message
				}
			}
			out = append(out, pl)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out, nil
}

func stackOwner(d *appsv1.Deployment) string {
	for _, o := range d.OwnerReferences {
		if o.Kind == "InferenceStack" {
			return o.Name
		}
	}
	return ""
}

// WaitPlaced waits until every pod of the stack is either Running on a
// node or reported unschedulable, and returns the placements.
func (s *Scenario) WaitPlaced(ctx context.Context, namespace, name string, wantPods int) ([]Placement, error) {
	var pls []Placement
	err := s.waitFor(ctx, 2*time.Minute, fmt.Sprintf("pods of %s/%s placed", namespace, name), func(ctx context.Context) (bool, string, error) {
		var err error
		pls, err = s.Placements(ctx, namespace, name)
		if err != nil {
			return false, err.Error(), nil
		}
		if len(pls) < wantPods {
			return false, fmt.Sprintf("%d of %d pods", len(pls), wantPods), nil
		}
		for _, p := range pls {
			if !(p.Phase == string(corev1.PodRunning) || p.Why != "") {
				return false, fmt.Sprintf("%s: %s on %q", p.Pod, p.Phase, p.Node), nil
			}
		}
		return true, "", nil
	})
	return pls, err
}

// PodUIDs maps the pods of the stacks' Deployments in namespace to their
// Deployment, so an upgrade can be checked to have replaced none.
func (s *Scenario) PodUIDs(ctx context.Context, namespace string) (map[string]string, error) {
	deps, err := s.DeploymentUIDs(ctx, namespace)
	if err != nil {
		return nil, err
	}
	pods, err := s.CS.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing pods in %s: %w", namespace, err)
	}
	rss, err := s.CS.AppsV1().ReplicaSets(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing ReplicaSets in %s: %w", namespace, err)
	}
	owner := map[types.UID]string{} // ReplicaSet UID → Deployment name
	for _, rs := range rss.Items {
		if ref := metav1.GetControllerOf(&rs); ref != nil && ref.Kind == "Deployment" && deps[ref.Name] == string(ref.UID) {
			owner[rs.UID] = ref.Name
		}
	}
	m := map[string]string{}
	for _, p := range pods.Items {
		if ref := metav1.GetControllerOf(&p); ref != nil && owner[ref.UID] != "" && p.DeletionTimestamp == nil {
			m[string(p.UID)] = owner[ref.UID] + "/" + p.Name
		}
	}
	return m, nil
}

// DeploymentUIDs maps the stack's Deployments to their UIDs.
func (s *Scenario) DeploymentUIDs(ctx context.Context, namespace string) (map[string]string, error) {
	deps, err := s.CS.AppsV1().Deployments(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Deployments in %s: %w", namespace, err)
	}
	m := map[string]string{}
	for _, d := range deps.Items {
		if stackOwner(&d) != "" {
			m[d.Name] = string(d.UID)
		}
	}
	return m, nil
}

// unclaimedReason is the Managed condition's reason for a stack whose
// major's operator has not claimed it.
const unclaimedReason = "NoOperatorClaimed"

// Untouched fails if anything reconciled the stack: a finalizer, a status,
// a Deployment it owns, or an event about it. The one thing another major's
// operator may say about it is that no operator of its major has claimed
// it (the Managed=False condition and its event), which it does once the
// stack has gone unclaimed for a minute.
func (s *Scenario) Untouched(ctx context.Context, namespace, name string) error {
	u, err := s.Dyn.Resource(GVRInferenceStack).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading InferenceStack %s/%s: %w", namespace, name, err)
	}
	var problems []string
	if f := u.GetFinalizers(); len(f) > 0 {
		problems = append(problems, fmt.Sprintf("finalizers %v", f))
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] != "Managed" || m["reason"] != unclaimedReason {
			problems = append(problems, fmt.Sprintf("condition %v", m))
		}
	}
	if st, _ := u.Object["status"].(map[string]any); len(st) > 1 || (len(st) == 1 && len(conds) == 0) {
		problems = append(problems, fmt.Sprintf("status %v", st))
	}
	pls, err := s.Placements(ctx, namespace, name)
	if err != nil {
		return err
	}
	if len(pls) > 0 {
		problems = append(problems, fmt.Sprintf("%d pods", len(pls)))
	}
	evs, err := s.CS.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",involvedObject.kind=InferenceStack"})
	if err != nil {
		return fmt.Errorf("reading the events of %s/%s: %w", namespace, name, err)
	}
	for _, e := range evs.Items {
		if e.Reason != unclaimedReason {
			problems = append(problems, fmt.Sprintf("event %s %s: %s", e.Reason, e.Source.Component, e.Message))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("InferenceStack %s/%s (operatorVersion=%s) was touched: %s", namespace, name, u.GetLabels()["operatorVersion"], strings.Join(problems, "; "))
	}
	return nil
}

// Teardown removes everything in the documented order (charts/catalog
// README): stacks first (their operator removes their finalizers), then
// the chart (extensions, catalog, namespaces, RBAC); the CRD stays. It
// fails if anything is left or stuck.
func (s *Scenario) Teardown(ctx context.Context) error {
	if s.Env.OLMv0 != nil {
		return s.teardownV0(ctx)
	}
	s.Mark("teardown")
	if err := s.deleteStacks(ctx); err != nil {
		return err
	}
	if installed, err := s.Helm.Installed(); err != nil {
		return err
	} else if installed {
		if _, err := s.Helm.Uninstall(); err != nil {
			return err
		}
		s.logf("helm uninstall %s", HelmRelease)
	}
	ns := inferencestack.Namespace(s.Major)
	err := s.waitFor(ctx, 2*time.Minute, "extensions, catalog and their namespace gone", func(ctx context.Context) (bool, string, error) {
		var left []string
		for _, gvr := range []schema.GroupVersionResource{GVRClusterExtension, GVRClusterCatalog} {
			l, err := s.Dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			for _, u := range l.Items {
				left = append(left, fmt.Sprintf("%s %s finalizers %v", gvr.Resource, u.GetName(), u.GetFinalizers()))
			}
		}
		if n, err := s.CS.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil {
			left = append(left, fmt.Sprintf("namespace %s (%s, finalizers %v)", ns, n.Status.Phase, n.Spec.Finalizers))
		}
		crs, err := s.CS.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, cr := range crs.Items {
			if strings.HasPrefix(cr.Name, inferencestack.PackageName) {
				left = append(left, "clusterrole "+cr.Name)
			}
		}
		return len(left) == 0, strings.Join(left, ", "), nil
	})
	if err != nil {
		return err
	}
	return s.teardownDone(ctx)
}

// waitFor waits as poll.Until does, failing at once if the environment
// dies.
func (s *Scenario) waitFor(ctx context.Context, timeout time.Duration, what string, cond poll.Cond) error {
	opts := []poll.Option{poll.Every(200 * time.Millisecond)}
	if s.Env.Alive != nil {
		opts = append(opts, poll.While(s.Env.Alive))
	}
	return poll.Until(ctx, timeout, what, cond, opts...)
}

// Condition returns status, reason and message of a condition of u.
func Condition(u *unstructured.Unstructured, typ string) (status, reason, message string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != typ {
			continue
		}
		status, _ = m["status"].(string)
		reason, _ = m["reason"].(string)
		message, _ = m["message"].(string)
		return
	}
	return "-", "", ""
}

// Diagnose writes what explains a failure: OLM's objects and conditions,
// the stacks, Deployments, pods and events, then the components' logs.
func (s *Scenario) Diagnose(w io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fmt.Fprintln(w, "======== diagnostics ========")
	for _, m := range s.Timeline {
		fmt.Fprintf(w, "timeline %s %s\n", m.At.Format("15:04:05.000"), m.What)
	}
	olmObjects, olmNamespace := []schema.GroupVersionResource{GVRClusterCatalog, GVRClusterExtension}, "olmv1-system"
	if s.Env.OLMv0 != nil {
		olmObjects, olmNamespace = []schema.GroupVersionResource{GVRCatalogSource, GVRSubscription, GVRInstallPlan, GVRCSV}, olmv0local.Namespace
	}
	for _, gvr := range append(olmObjects, GVRInferenceStack) {
		l, err := s.Dyn.Resource(gvr).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			fmt.Fprintf(w, "%s: %v\n", gvr.Resource, err)
			continue
		}
		for _, u := range l.Items {
			st, _ := yaml.Marshal(map[string]any{"labels": u.GetLabels(), "finalizers": u.GetFinalizers(), "spec": u.Object["spec"], "status": u.Object["status"]})
			fmt.Fprintf(w, "---- %s %s/%s\n%s", gvr.Resource, u.GetNamespace(), u.GetName(), st)
		}
	}
	for _, ns := range []string{metav1.NamespaceDefault, inferencestack.Namespace(s.Major), olmNamespace} {
		if deps, err := s.CS.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{}); err == nil {
			for _, d := range deps.Items {
				fmt.Fprintf(w, "deployment %s/%s image %s ready %d/%d uid %s\n", ns, d.Name, d.Spec.Template.Spec.Containers[0].Image, d.Status.ReadyReplicas, deref(d.Spec.Replicas), d.UID)
			}
		}
		if pods, err := s.CS.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
			for _, p := range pods.Items {
				var conds []string
				for _, c := range p.Status.Conditions {
					conds = append(conds, fmt.Sprintf("%s=%s %s", c.Type, c.Status, c.Message))
				}
				fmt.Fprintf(w, "pod %s/%s node %q phase %s [%s]\n", ns, p.Name, p.Spec.NodeName, p.Status.Phase, strings.Join(conds, "; "))
			}
		}
		if evs, err := s.CS.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
			items := evs.Items
			sort.Slice(items, func(i, j int) bool { return eventTime(items[i]).Before(eventTime(items[j])) })
			if len(items) > 40 {
				items = items[len(items)-40:]
			}
			for _, e := range items {
				fmt.Fprintf(w, "event %s %s %s/%s %s: %s\n", eventTime(e).Format("15:04:05"), e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
	}
	if s.Env.RealNode != "" {
		// The operator's own logs, through the kubelet (the previous
		// container's too, if it restarted).
		ns := inferencestack.Namespace(s.Major)
		lines := int64(60)
		if pods, err := s.CS.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
			for _, p := range pods.Items {
				for _, previous := range []bool{true, false} {
					data, err := s.CS.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &lines, Previous: previous}).DoRaw(ctx)
					if err != nil {
						continue
					}
					fmt.Fprintf(w, "==== operator pod %s/%s (previous %v, last %d lines) ====\n%s\n", ns, p.Name, previous, lines, data)
				}
			}
		}
	}
	if s.Env.Dump != nil {
		s.Env.Dump(w)
	}
}

func eventTime(e corev1.Event) time.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// PrintPlacements writes the pods→GPU nodes table.
func PrintPlacements(w io.Writer, pls []Placement) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STACK\tPOD\tGPUS\tNODE\tGPU PRODUCT\tPHASE")
	for _, p := range pls {
		node, product, phase, gpus := p.Node, p.Product, p.Phase, p.GPUs
		if node == "" {
			node = "-"
		}
		if product == "" {
			product = "-"
		}
		if gpus == "" || gpus == "0" {
			gpus = "-"
		}
		if p.Why != "" {
			phase += ": " + p.Why
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Stack, p.Pod, gpus, node, product, phase)
	}
	tw.Flush()
}

// CatalogBundles lists the bundle versions in a build's rendered catalog
// (<out>/catalog/configs).
func CatalogBundles(out string) ([]string, error) {
	dir := filepath.Join(out, "catalog", "configs")
	cfg, err := declcfg.LoadFS(context.Background(), os.DirFS(dir))
	if err != nil {
		return nil, fmt.Errorf("loading the catalog in %s: %w", dir, err)
	}
	var versions []string
	for _, b := range cfg.Bundles {
		props, err := property.Parse(b.Properties)
		if err != nil {
			return nil, fmt.Errorf("bundle %s: %w", b.Name, err)
		}
		for _, p := range props.Packages {
			versions = append(versions, p.Version)
		}
	}
	slices.Sort(versions)
	return versions, nil
}

// mergeMaps merges src into dst (src wins; maps merge key by key).
func mergeMaps(dst, src map[string]any) map[string]any {
	if dst == nil {
		dst = map[string]any{}
	}
	for k, v := range src {
		if sv, ok := v.(map[string]any); ok {
			if dv, ok := dst[k].(map[string]any); ok {
				dst[k] = mergeMaps(dv, sv)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}

func deepCopyMap(m map[string]any) map[string]any {
	return runtime.DeepCopyJSON(m)
}

// teardownDone is the end of both teardowns: everything of the operator is
// gone, the InferenceStack CRD stays.
func (s *Scenario) teardownDone(ctx context.Context) error {
	if _, err := s.Dyn.Resource(GVRCRD).Get(ctx, "inferencestacks."+inferencestack.Group, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("the InferenceStack CRD should survive helm uninstall (resource policy keep): %w", err)
	}
	s.Mark("teardown done")
	s.logf("teardown complete: nothing left, no finalizer stuck; the InferenceStack CRD stays")
	return nil
}

// deleteStacks deletes every InferenceStack (none when the CRD is absent)
// and waits until they are gone: their operator removes their finalizers.
func (s *Scenario) deleteStacks(ctx context.Context) error {
	stacks, err := s.Dyn.Resource(GVRInferenceStack).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, u := range stacks.Items {
		if err := s.Dyn.Resource(GVRInferenceStack).Namespace(u.GetNamespace()).Delete(ctx, u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	err = s.waitFor(ctx, 2*time.Minute, "every InferenceStack deleted (the operator removes its finalizers)", func(ctx context.Context) (bool, string, error) {
		l, err := s.Dyn.Resource(GVRInferenceStack).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		var left []string
		for _, u := range l.Items {
			left = append(left, fmt.Sprintf("%s/%s finalizers %v", u.GetNamespace(), u.GetName(), u.GetFinalizers()))
		}
		return len(left) == 0, strings.Join(left, ", "), nil
	})
	if err == nil {
		s.logf("deleted %d InferenceStacks", len(stacks.Items))
	}
	return err
}
