// Package migrate moves a ModelOrchestra (models.titanml.co/v1alpha1, the
// resource of the Model Orchestra operator this project replaces) onto an
// InferenceStack (models.takeoff.co/v1alpha1) without restarting its model
// servers: the InferenceStack of the same name takes over the Helm release
// of the same name and every object in it, and the running pods stay.
//
// Both operators are Helm-based and name a stack's release after the
// resource, in its namespace, so the release (Secrets
// sh.helm.release.v1.<name>.v<N>) and its objects can change hands:
//
//  1. Plan reads everything and changes nothing: the ModelOrchestra, its
//     deployed release, the live Deployments and the ReplicaSets holding
//     their pods; it writes the InferenceStack's spec (the same values,
//     with what the new chart reads differently rewritten, the old chart's
//     names and image tags kept), has the API server validate it, renders
//     the inference-stack chart with it and compares: Deployments the new
//     chart would not render by the same name and selector, or that are
//     mid-rollout, block the migration; every pod-template field that
//     differs is listed, because Kubernetes applies a pod template only by
//     replacing pods.
//  2. Run pauses the Deployments (so no template change rolls them), takes
//     the ModelOrchestra away from the old operator without an uninstall
//     (its uninstall-helm-release finalizer removed, then deleted with the
//     orphan propagation policy, so the garbage collector keeps everything
//     it owned), creates the InferenceStack labelled operatorVersion: <major>,
//     waits for that major's operator to upgrade the release to the
//     inference-stack chart, gives the old revisions' Secrets the
//     InferenceStack as owner, then makes each Deployment's current
//     ReplicaSet carry the new pod template (a ReplicaSet's template only
//     shapes the pods it creates later) and resumes the Deployment, which
//     then finds its pod template in that ReplicaSet and replaces nothing.
//
// With Options.Rollout the Deployments are not paused: the pod template
// changes roll out once, under each Deployment's own strategy.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	inferencestack "github.com/titanml/inference-stack-operator"
	stackchart "github.com/titanml/inference-stack-operator/charts/inference-stack"
	"github.com/titanml/inference-stack-operator/operator/helmrecord"
)

var (
	// OrchestraGVR is the Model Orchestra operator's resource.
	OrchestraGVR = schema.GroupVersionResource{Group: "models.titanml.co", Version: "v1alpha1", Resource: "modelorchestras"}
	// StackGVR is this project's resource.
	StackGVR = schema.GroupVersionResource{Group: inferencestack.Group, Version: "v1alpha1", Resource: "inferencestacks"}
)

const (
	// MigratedFromAnnotation on the InferenceStack records the
	// ModelOrchestra it replaced ("ModelOrchestra/<uid>"); a migration that
	// stopped half-way resumes on a stack carrying it.
	MigratedFromAnnotation = inferencestack.Group + "/migrated-from"
	// PausedAnnotation marks a Deployment this migration paused, so that a
	// resumed run resumes exactly those.
	PausedAnnotation = inferencestack.Group + "/migration-paused"

	operatorVersionLabel = "operatorVersion"
	// reconciledByLabel and uninstallFinalizer are the operator's claim on
	// a stack and on its release revisions (operator/internal/controller).
	reconciledByLabel  = inferencestack.Group + "/reconciled-by"
	uninstallFinalizer = "uninstall-helm-release"
	podTemplateHash    = appsv1.DefaultDeploymentUniqueLabelKey
	// revisionAnnotation numbers a Deployment's ReplicaSets.
	revisionAnnotation = "deployment.kubernetes.io/revision"
)

// majorPattern is what an operatorVersion label must look like.
var majorPattern = regexp.MustCompile(`^v(0|[1-9][0-9]*)$`)

// Options select what to migrate and how.
type Options struct {
	Namespace, Name string
	// OperatorVersion is the major ("v0") whose operator takes the stack
	// over: the operatorVersion label of the new InferenceStack.
	OperatorVersion string
	// Rollout applies the new pod templates now, with one rolling update
	// per Deployment, instead of keeping the running pods.
	Rollout bool
	// Timeout bounds the wait for the operator and the garbage collector;
	// default 5 minutes.
	Timeout time.Duration
	// Log receives progress; nil discards it.
	Log io.Writer
}

func (o Options) timeout() time.Duration {
	if o.Timeout <= 0 {
		return 5 * time.Minute
	}
	return o.Timeout
}

// Plan is what a migration will do, found without changing anything.
type Plan struct {
	opts Options
	// Orchestra is the ModelOrchestra (nil when a previous run already
	// removed it and this one resumes).
	Orchestra *unstructured.Unstructured
	// Resume says an earlier run handed the InferenceStack over to its
	// operator (labelled it) and stopped before it finished.
	Resume bool
	// StackCreated says an earlier run created the InferenceStack (not yet
	// labelled for an operator, so none reconciles it) and stopped before
	// handing it over: this run carries on from there. The ModelOrchestra
	// may be gone already.
	StackCreated bool
	// Release is the deployed revision of the release being handed over.
	Release *release.Release
	// Stack is the InferenceStack to create (or the existing one, when
	// resuming).
	Stack *unstructured.Unstructured
	// Changes are the differences between the ModelOrchestra's values and
	// the InferenceStack's spec, each with its reason.
	Changes     []string
	Deployments []*DeploymentPlan
	// Created and Removed are the other objects the upgrade to the
	// inference-stack chart creates and deletes ("Kind/name").
	Created, Removed []string
	// Notes are effects worth knowing that do not touch the pods.
	Notes []string
	// Blockers are why the workloads cannot be handed over in place; Run
	// refuses while there are any.
	Blockers []string
	// Chart is the inference-stack chart the plan rendered ("name-version").
	Chart string
}

// DeploymentPlan is one Deployment of the release.
type DeploymentPlan struct {
	Name string
	UID  types.UID
	// ReplicaSet holds the Deployment's current pods; its template is the
	// Deployment's.
	ReplicaSet    string
	ReplicaSetUID types.UID
	// Pods are the running pods (UID to name).
	Pods map[types.UID]string
	// TemplateChanges are the pod-template fields the inference-stack
	// chart renders differently.
	TemplateChanges []string
}

type clients struct {
	cfg *rest.Config
	dyn dynamic.Interface
	cs  kubernetes.Interface
}

func newClients(cfg *rest.Config) (*clients, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating a dynamic client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating a Kubernetes client: %w", err)
	}
	return &clients{cfg: cfg, dyn: dyn, cs: cs}, nil
}

// NewPlan finds out what migrating the ModelOrchestra opts.Namespace/
// opts.Name would do. It changes nothing in the cluster. An error means the
// migration cannot even be planned (bad input, missing objects); problems
// that stop the migration itself are the plan's Blockers.
func NewPlan(ctx context.Context, cfg *rest.Config, opts Options) (*Plan, error) {
	if opts.Namespace == "" || opts.Name == "" {
		return nil, errors.New("the namespace and name of the ModelOrchestra are required")
	}
	if !majorPattern.MatchString(opts.OperatorVersion) {
		return nil, fmt.Errorf("operator version %q: want the major of the operator that takes the stack over, such as v0", opts.OperatorVersion)
	}
	c, err := newClients(cfg)
	if err != nil {
		return nil, err
	}
	p := &Plan{opts: opts}
	ref := opts.Namespace + "/" + opts.Name

	stack, err := c.getIfExists(ctx, StackGVR, opts.Namespace, opts.Name)
	if err != nil {
		return nil, fmt.Errorf("reading InferenceStack %s (is the InferenceStack CRD installed?): %w", ref, err)
	}
	orchestra, err := c.getIfExists(ctx, OrchestraGVR, opts.Namespace, opts.Name)
	if err != nil {
		return nil, fmt.Errorf("reading ModelOrchestra %s (is the models.titanml.co CRD installed?): %w", ref, err)
	}
	if stack != nil {
		from := stack.GetAnnotations()[MigratedFromAnnotation]
		if from == "" || (orchestra != nil && from != "ModelOrchestra/"+string(orchestra.GetUID())) {
			return nil, fmt.Errorf("InferenceStack %s already exists and was not created by migrating this ModelOrchestra: delete or rename one of them first", ref)
		}
		if stack.GetLabels()[operatorVersionLabel] != "" {
			// An earlier run stopped after handing the stack over: finish it.
			p.Resume, p.Stack, p.Orchestra = true, stack, orchestra
			return p, c.planResume(ctx, p)
		}
		// An earlier run stopped after creating the stack, before handing
		// it over: plan the rest from the stack it created.
		p.StackCreated, p.Stack = true, stack
	}
	if orchestra == nil && !p.StackCreated {
		return nil, fmt.Errorf("no ModelOrchestra %s", ref)
	}
	p.Orchestra = orchestra
	if orchestra != nil && orchestra.GetDeletionTimestamp() != nil && hasFinalizer(orchestra, uninstallFinalizer) {
		p.Blockers = append(p.Blockers, fmt.Sprintf("ModelOrchestra %s is being deleted with its operator's finalizer on: its operator may be uninstalling the release", ref))
	}

	if p.Release, err = deployedRelease(c.cs, opts.Namespace, opts.Name); err != nil {
		return nil, err
	}
	if p.Release.Info.Status != release.StatusDeployed {
		p.Blockers = append(p.Blockers, fmt.Sprintf("the last revision (%d) of Helm release %s is %s, not deployed: let the Model Orchestra operator finish (or repair the release) before migrating", p.Release.Version, ref, p.Release.Info.Status))
		return p, nil
	}
	oldObjs, err := manifestObjects(p.Release.Manifest)
	if err != nil {
		return nil, fmt.Errorf("reading release %s revision %d: %w", ref, p.Release.Version, err)
	}

	old, err := describeOld(p.Release, oldObjs)
	if err != nil {
		return nil, err
	}
	newSpec, valid, err := c.planSpec(ctx, p, old)
	if err != nil {
		return nil, err
	}
	if !valid {
		return p, nil
	}

	newObjs, chartName, err := c.render(ctx, opts, newSpec)
	if err != nil {
		p.Blockers = append(p.Blockers, fmt.Sprintf("the inference-stack chart does not render with the carried-over values: %v", err))
		return p, nil
	}
	p.Chart = chartName
	if err := c.compare(ctx, p, oldObjs, newObjs); err != nil {
		return nil, err
	}
	return p, nil
}

// getIfExists reads the object namespace/name of resource gvr; it is nil
// if the object does not exist.
func (c *clients) getIfExists(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, error) {
	u, err := c.dyn.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return u, err
}

// planSpec returns the InferenceStack's spec: the one an earlier run
// carried over, or the ModelOrchestra's carried over now (setting
// p.Changes and p.Stack). It reports false, with a blocker added, when the
// API server rejects the carried-over spec.
func (c *clients) planSpec(ctx context.Context, p *Plan, old oldRelease) (map[string]any, bool, error) {
	if p.StackCreated {
		// The spec was carried over (and validated) by the run that created
		// the stack.
		newSpec, _ := p.Stack.Object["spec"].(map[string]any)
		return newSpec, true, nil
	}
	spec, _ := p.Orchestra.Object["spec"].(map[string]any)
	newSpec, changes, err := stackSpec(spec, old)
	if err != nil {
		return nil, false, fmt.Errorf("carrying the spec of ModelOrchestra %s/%s over: %w", p.opts.Namespace, p.opts.Name, err)
	}
	p.Changes = changes
	p.Stack = newStack(p.Orchestra, newSpec, p.opts.OperatorVersion)
	// The API server validates the spec with the InferenceStack CRD's
	// schema and rules (field paths in its message).
	if _, err := c.dyn.Resource(StackGVR).Namespace(p.opts.Namespace).Create(ctx, p.Stack, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		p.Blockers = append(p.Blockers, fmt.Sprintf("the InferenceStack's spec, carried over from the ModelOrchestra, is not valid: %v", err))
		return nil, false, nil
	}
	return newSpec, true, nil
}

// newStack is the InferenceStack replacing orchestra: same name and
// namespace, its labels (operatorVersion set to major) and annotations, the
// carried-over spec.
func newStack(orchestra *unstructured.Unstructured, spec map[string]any, major string) *unstructured.Unstructured {
	labels := map[string]string{}
	for k, v := range orchestra.GetLabels() {
		labels[k] = v
	}
	labels[operatorVersionLabel] = major
	annotations := map[string]string{}
	for k, v := range orchestra.GetAnnotations() {
		if k != "kubectl.kubernetes.io/last-applied-configuration" {
			annotations[k] = v
		}
	}
	annotations[MigratedFromAnnotation] = "ModelOrchestra/" + string(orchestra.GetUID())
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(StackGVR.GroupVersion().String())
	u.SetKind("InferenceStack")
	u.SetNamespace(orchestra.GetNamespace())
	u.SetName(orchestra.GetName())
	u.SetLabels(labels)
	u.SetAnnotations(annotations)
	return u
}

// releaseStorage is Helm's Secrets storage of one namespace.
func releaseStorage(cs kubernetes.Interface, namespace string) *storage.Storage {
	return storage.Init(helmrecord.NewSecrets(cs.CoreV1().Secrets(namespace), nil))
}

// deployedRelease returns the latest revision of release name.
func deployedRelease(cs kubernetes.Interface, namespace, name string) (*release.Release, error) {
	rel, err := releaseStorage(cs, namespace).Last(name)
	if errors.Is(err, driver.ErrReleaseNotFound) || (err == nil && rel == nil) {
		return nil, fmt.Errorf("no Helm release %s in namespace %s (no Secret sh.helm.release.v1.%s.v<N>): the ModelOrchestra's workloads were never installed, or not by a Helm-based operator; nothing to hand over", name, namespace, name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading Helm release %s/%s: %w", namespace, name, err)
	}
	return rel, nil
}

// manifestObjects parses a release manifest into objects keyed "Kind/name".
func manifestObjects(manifest string) (map[string]*unstructured.Unstructured, error) {
	out := map[string]*unstructured.Unstructured{}
	for _, doc := range releaseutil.SplitManifests(manifest) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		out[u.GetKind()+"/"+u.GetName()] = u
	}
	return out, nil
}

// describeOld reads the old release's names: the fullname from its gateway
// Deployment, the name label from that Deployment's selector.
func describeOld(rel *release.Release, objs map[string]*unstructured.Unstructured) (oldRelease, error) {
	old := oldRelease{ReleaseName: rel.Name}
	if rel.Chart != nil && rel.Chart.Metadata != nil {
		old.AppVersion = rel.Chart.Metadata.AppVersion
	}
	for _, u := range objs {
		if u.GetKind() != "Deployment" || !strings.HasSuffix(u.GetName(), "-gateway") {
			continue
		}
		sel, _, _ := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
		if sel["app.kubernetes.io/component"] != "gateway" {
			continue
		}
		old.Fullname = strings.TrimSuffix(u.GetName(), "-gateway")
		old.NameLabel = sel["app.kubernetes.io/name"]
		return old, nil
	}
	return old, fmt.Errorf("release %s has no gateway Deployment (<fullname>-gateway with component gateway): it was not made by the Model Orchestra chart", rel.Name)
}

// render renders the inference-stack chart for the stack as the operator
// would: release name and namespace of the stack, the spec as values, the
// cluster's version and APIs (for .Capabilities).
func (c *clients) render(ctx context.Context, opts Options, spec map[string]any) (map[string]*unstructured.Unstructured, string, error) {
	chrt, err := stackchart.Load()
	if err != nil {
		return nil, "", fmt.Errorf("loading the inference-stack chart: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(c.cfg)
	if err != nil {
		return nil, "", fmt.Errorf("creating a discovery client: %w", err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return nil, "", fmt.Errorf("reading the server version: %w", err)
	}
	apis, err := action.GetVersionSet(dc)
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		return nil, "", fmt.Errorf("reading the server's APIs: %w", err)
	}
	in := action.NewInstall(&action.Configuration{})
	in.ClientOnly, in.DryRun, in.Replace = true, true, true
	in.ReleaseName, in.Namespace = opts.Name, opts.Namespace
	in.KubeVersion = &chartutil.KubeVersion{Version: v.GitVersion, Major: v.Major, Minor: v.Minor}
	in.APIVersions = apis
	rel, err := in.RunWithContext(ctx, chrt, runtime.DeepCopyJSON(spec))
	if err != nil {
		return nil, "", err
	}
	objs, err := manifestObjects(rel.Manifest)
	return objs, chrt.Name() + "-" + chrt.Metadata.Version, err
}

// compare fills the plan's Deployments, Created, Removed, Notes and
// Blockers from the old release's objects and the new chart's.
func (c *clients) compare(ctx context.Context, p *Plan, oldObjs, newObjs map[string]*unstructured.Unstructured) error {
	ns := p.opts.Namespace
	for _, key := range sortedKeys(oldObjs) {
		if _, ok := newObjs[key]; !ok {
			p.Removed = append(p.Removed, key)
		}
	}
	for _, key := range sortedKeys(newObjs) {
		if _, ok := oldObjs[key]; !ok {
			p.Created = append(p.Created, key)
		}
	}
	for _, key := range sortedKeys(oldObjs) {
		o := oldObjs[key]
		if o.GetKind() != "Deployment" {
			continue
		}
		name := o.GetName()
		n, ok := newObjs[key]
		if !ok {
			p.Blockers = append(p.Blockers, fmt.Sprintf("Deployment %s: the inference-stack chart renders no Deployment of that name, so the upgrade would delete it and its pods (an application name it rejects, or names it cannot reproduce)", name))
			continue
		}
		live, err := c.cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			p.Notes = append(p.Notes, fmt.Sprintf("Deployment %s of the release does not exist (deleted by hand?): the upgrade creates it", name))
			continue
		}
		if err != nil {
			return fmt.Errorf("reading Deployment %s/%s: %w", ns, name, err)
		}
		dp, blockers, err := c.planDeployment(ctx, live, n)
		if err != nil {
			return err
		}
		p.Blockers = append(p.Blockers, blockers...)
		if dp != nil {
			p.Deployments = append(p.Deployments, dp)
		}
	}
	for _, key := range p.Created {
		if n := newObjs[key]; n.GetKind() == "Deployment" {
			p.Notes = append(p.Notes, fmt.Sprintf("Deployment %s is new: its pods start with the upgrade", n.GetName()))
		}
	}
	for _, key := range p.Removed {
		p.Notes = append(p.Notes, fmt.Sprintf("%s is not rendered by the inference-stack chart: the upgrade deletes it", key))
	}
	// A Service selecting the kept pods by a port name they do not declare
	// has no endpoints for them until they are replaced.
	for _, key := range sortedKeys(newObjs) {
		svc := newObjs[key]
		if svc.GetKind() != "Service" {
			continue
		}
		for _, dp := range p.Deployments {
			if missing := missingTargetPorts(svc, oldObjs["Deployment/"+dp.Name], newObjs["Deployment/"+dp.Name]); len(missing) > 0 && !p.opts.Rollout {
				p.Notes = append(p.Notes, fmt.Sprintf("Service %s targets port(s) %s, which the kept pods of %s do not declare: no endpoints for them until they are replaced", svc.GetName(), strings.Join(missing, ", "), dp.Name))
			}
		}
	}
	return nil
}

// planDeployment compares a live Deployment with the one the new chart
// renders: the selector must be the same (Kubernetes does not let it
// change) and the pods must all belong to the ReplicaSet of the current pod
// template (not mid-rollout). The pod-template changes are found by asking
// the API server to default the rendered template (a dry-run update), so
// defaults do not count as changes.
func (c *clients) planDeployment(ctx context.Context, live *appsv1.Deployment, rendered *unstructured.Unstructured) (*DeploymentPlan, []string, error) {
	ns, name := live.Namespace, live.Name
	want := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(rendered.Object, want); err != nil {
		return nil, nil, fmt.Errorf("reading the rendered Deployment %s: %w", name, err)
	}
	var blockers []string
	if want.Spec.Selector == nil || !equality.Semantic.DeepEqual(live.Spec.Selector, want.Spec.Selector) {
		blockers = append(blockers, fmt.Sprintf("Deployment %s: selector %v, but the inference-stack chart renders %v; a Deployment's selector cannot change, so it would have to be re-created with new pods", name, labelsOf(live.Spec.Selector), labelsOf(want.Spec.Selector)))
		return nil, blockers, nil
	}
	dp := &DeploymentPlan{Name: name, UID: live.UID, Pods: map[types.UID]string{}}

	rss, err := c.cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(live.Spec.Selector)})
	if err != nil {
		return nil, nil, fmt.Errorf("listing the ReplicaSets of Deployment %s/%s: %w", ns, name, err)
	}
	var current *appsv1.ReplicaSet
	var owned []*appsv1.ReplicaSet
	var withPods []string
	for i := range rss.Items {
		rs := &rss.Items[i]
		if ref := metav1.GetControllerOf(rs); ref == nil || ref.UID != live.UID {
			continue
		}
		owned = append(owned, rs)
		if sameTemplate(&rs.Spec.Template, &live.Spec.Template) {
			current = rs
		}
		if rs.Status.Replicas > 0 || (rs.Spec.Replicas != nil && *rs.Spec.Replicas > 0) {
			withPods = append(withPods, rs.Name)
		}
	}
	switch {
	case current == nil:
		blockers = append(blockers, fmt.Sprintf("Deployment %s: no ReplicaSet carries its current pod template (a rollout has not started or is paused): let it finish before migrating", name))
	case len(withPods) > 1 || (len(withPods) == 1 && withPods[0] != current.Name):
		blockers = append(blockers, fmt.Sprintf("Deployment %s is mid-rollout (pods in ReplicaSets %s): let the rollout finish before migrating", name, strings.Join(withPods, ", ")))
	default:
		dp.ReplicaSet, dp.ReplicaSetUID = current.Name, current.UID
	}
	pods, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(live.Spec.Selector)})
	if err != nil {
		return nil, nil, fmt.Errorf("listing the pods of Deployment %s/%s: %w", ns, name, err)
	}
	for _, pod := range pods.Items {
		if ref := metav1.GetControllerOf(&pod); ref != nil && current != nil && ref.UID == current.UID && pod.DeletionTimestamp == nil {
			dp.Pods[pod.UID] = pod.Name
		}
	}

	// The rendered template, defaulted by the API server.
	trial := live.DeepCopy()
	trial.Spec.Template = want.Spec.Template
	// Unconditional: a dry run asks what the template would become, not
	// whether the Deployment moved since it was read (an operator may be
	// writing to it, as when a migration is resumed).
	trial.ResourceVersion = ""
	defaulted, err := c.cs.AppsV1().Deployments(ns).Update(ctx, trial, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		blockers = append(blockers, fmt.Sprintf("Deployment %s: the API server rejects the pod template the inference-stack chart renders: %v", name, err))
		return dp, blockers, nil
	}
	from, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&live.Spec.Template)
	if err != nil {
		return nil, nil, err
	}
	to, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&defaulted.Spec.Template)
	if err != nil {
		return nil, nil, err
	}
	dp.TemplateChanges = fieldChanges(from, to)
	// The Deployment controller takes the oldest ReplicaSet of a template
	// as the template's own: an older one in the revision history that
	// already runs the new template would be scaled up when the Deployment
	// resumes, and the pods handed over scaled down.
	if current == nil || len(dp.TemplateChanges) == 0 {
		return dp, blockers, nil
	}
	for _, rs := range owned {
		if rs.UID != current.UID && sameTemplate(&rs.Spec.Template, &defaulted.Spec.Template) {
			blockers = append(blockers, fmt.Sprintf("Deployment %s: its older ReplicaSet %s (revision %s) already has the pod template the inference-stack chart renders; "+
				"resumed, the Deployment would scale it up and replace the running pods: delete that ReplicaSet before migrating", name, rs.Name, rs.Annotations[revisionAnnotation]))
		}
	}
	return dp, blockers, nil
}

// sameTemplate is the Deployment controller's test for "this ReplicaSet
// runs that template": equal but for the pod-template-hash label.
func sameTemplate(a, b *corev1.PodTemplateSpec) bool {
	x, y := a.DeepCopy(), b.DeepCopy()
	delete(x.Labels, podTemplateHash)
	delete(y.Labels, podTemplateHash)
	return equality.Semantic.DeepEqual(x, y)
}

func labelsOf(s *metav1.LabelSelector) string {
	if s == nil {
		return "{}"
	}
	return metav1.FormatLabelSelector(s)
}

// missingTargetPorts returns the named target ports of svc (when it selects
// the pods of the Deployment rendered as dep) that the old template's
// containers do not declare.
func missingTargetPorts(svc, oldDep, dep *unstructured.Unstructured) []string {
	if oldDep == nil || dep == nil {
		return nil
	}
	sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	podLabels, _, _ := unstructured.NestedStringMap(dep.Object, "spec", "template", "metadata", "labels")
	if len(sel) == 0 {
		return nil
	}
	for k, v := range sel {
		if podLabels[k] != v {
			return nil
		}
	}
	declared := map[string]bool{}
	containers, _, _ := unstructured.NestedSlice(oldDep.Object, "spec", "template", "spec", "containers")
	for _, ci := range containers {
		c, _ := ci.(map[string]any)
		ports, _ := c["ports"].([]any)
		for _, pi := range ports {
			if p, ok := pi.(map[string]any); ok {
				if n, ok := p["name"].(string); ok {
					declared[n] = true
				}
			}
		}
	}
	var missing []string
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	for _, pi := range ports {
		p, _ := pi.(map[string]any)
		if tp, ok := p["targetPort"].(string); ok && !declared[tp] {
			missing = append(missing, tp)
		}
	}
	return missing
}

// planResume finds what an interrupted run left to do: the Deployments it
// paused.
func (c *clients) planResume(ctx context.Context, p *Plan) error {
	deps, err := c.cs.AppsV1().Deployments(p.opts.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Deployments in %s: %w", p.opts.Namespace, err)
	}
	for i := range deps.Items {
		d := &deps.Items[i]
		if d.Annotations[PausedAnnotation] == "" {
			continue
		}
		// The annotation names the ReplicaSet that held the pods.
		dp := &DeploymentPlan{Name: d.Name, UID: d.UID, ReplicaSet: d.Annotations[PausedAnnotation], Pods: map[types.UID]string{}}
		pods, err := c.cs.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
		if err != nil {
			return fmt.Errorf("listing the pods of Deployment %s: %w", d.Name, err)
		}
		for _, pod := range pods.Items {
			if pod.DeletionTimestamp == nil {
				dp.Pods[pod.UID] = pod.Name
			}
		}
		p.Deployments = append(p.Deployments, dp)
	}
	return nil
}
