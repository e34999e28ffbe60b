package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/operator/helmrecord"
)

// Print writes the plan for a person: what is handed over, what changes in
// the values, what happens to every Deployment and its pods, and what
// blocks the migration.
func (p *Plan) Print(w io.Writer) {
	o := p.opts
	ref := o.Namespace + "/" + o.Name
	if p.Resume {
		fmt.Fprintf(w, "Resuming the migration of %s: InferenceStack %s exists (%s), %d Deployment(s) still paused by it.\n",
			ref, ref, p.Stack.GetAnnotations()[MigratedFromAnnotation], len(p.Deployments))
		return
	}
	fmt.Fprintf(w, "ModelOrchestra %s (%s) → InferenceStack %s (%s), labelled %s: %s\n",
		ref, OrchestraGVR.GroupVersion(), ref, StackGVR.GroupVersion(), operatorVersionLabel, o.OperatorVersion)
	if p.StackCreated {
		state := "still exists"
		if p.Orchestra == nil {
			state = "is gone already"
		}
		fmt.Fprintf(w, "Carrying on: an earlier run created InferenceStack %s (not yet handed to an operator); the ModelOrchestra %s.\n", ref, state)
	}
	if p.Release != nil {
		fmt.Fprintf(w, "Helm release %s, revision %d (chart %s, %s): the %s operator upgrades it in place", p.Release.Name, p.Release.Version, chartOf(p), p.Release.Info.Status, o.OperatorVersion)
		if p.Chart != "" {
			fmt.Fprintf(w, " to the inference-stack chart (planned with %s; the operator's own chart decides)", p.Chart)
		}
		fmt.Fprintln(w, ".")
	}
	if len(p.Changes) > 0 {
		fmt.Fprintln(w, "The ModelOrchestra's values are carried over, with these changes:")
		for _, c := range p.Changes {
			fmt.Fprintf(w, "  - %s\n", c)
		}
	} else if p.Stack != nil {
		fmt.Fprintln(w, "The ModelOrchestra's values are carried over unchanged.")
	}
	for _, d := range p.Deployments {
		fmt.Fprintf(w, "Deployment %s (%d pod(s)): ", d.Name, len(d.Pods))
		switch {
		case len(d.TemplateChanges) == 0:
			fmt.Fprintln(w, "same pod template; its pods are kept.")
		case o.Rollout:
			fmt.Fprintf(w, "the pod template changes in %d field(s); --rollout replaces its pods once, under the Deployment's rolling-update strategy:\n", len(d.TemplateChanges))
		default:
			fmt.Fprintf(w, "its pods are kept (same Deployment, same ReplicaSet, same pods). %d pod-template field(s) differ from what the inference-stack chart renders; they cannot reach running pods without restarting them (Kubernetes applies a pod template only by creating pods), so they take effect when these pods are next replaced (a node drain, a later change of the stack, or `kubectl rollout restart deployment/%s` when it suits you):\n", len(d.TemplateChanges), d.Name)
		}
		for _, c := range d.TemplateChanges {
			fmt.Fprintf(w, "      %s\n", c)
		}
	}
	if len(p.Created) > 0 {
		fmt.Fprintf(w, "Created by the upgrade: %s\n", strings.Join(p.Created, ", "))
	}
	if len(p.Removed) > 0 {
		fmt.Fprintf(w, "Deleted by the upgrade: %s\n", strings.Join(p.Removed, ", "))
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "Note: %s\n", n)
	}
	if len(p.Blockers) > 0 {
		fmt.Fprintln(w, "Cannot migrate without deleting or restarting workloads; nothing was changed:")
		for _, b := range p.Blockers {
			fmt.Fprintf(w, "  - %s\n", b)
		}
	}
}

func chartOf(p *Plan) string {
	if p.Release.Chart == nil || p.Release.Chart.Metadata == nil {
		return "unknown"
	}
	return p.Release.Chart.Metadata.Name + "-" + p.Release.Chart.Metadata.Version
}

// Result is what a migration did.
type Result struct {
	Stack *unstructured.Unstructured
	// KeptPods and ReplacedPods count the pods of the release's
	// Deployments that are the same after the migration, and those that
	// were replaced (only with Options.Rollout).
	KeptPods, ReplacedPods int
}

// Run carries out the plan. It refuses a plan with blockers. Every step is
// safe to repeat: a run that stops half-way (interrupted, timed out) is
// resumed by planning and running again.
func Run(ctx context.Context, cfg *rest.Config, p *Plan) (*Result, error) {
	if len(p.Blockers) > 0 {
		return nil, fmt.Errorf("the migration of %s/%s is blocked: %s", p.opts.Namespace, p.opts.Name, strings.Join(p.Blockers, "; "))
	}
	c, err := newClients(cfg)
	if err != nil {
		return nil, err
	}
	r := &runner{clients: c, p: p, log: p.opts.Log}
	if r.log == nil {
		r.log = io.Discard
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.timeout())
	defer cancel()
	if !p.Resume {
		if err := r.handOver(ctx); err != nil {
			return nil, err
		}
	}
	if err := r.waitUpgraded(ctx); err != nil {
		return nil, err
	}
	if err := r.adoptRevisions(ctx); err != nil {
		return nil, err
	}
	for _, d := range p.Deployments {
		if p.opts.Rollout && !p.Resume {
			continue
		}
		if err := r.keepPods(ctx, d); err != nil {
			return nil, err
		}
	}
	return r.verify(ctx)
}

type runner struct {
	*clients
	p     *Plan
	log   io.Writer
	stack *unstructured.Unstructured
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.log, format+"\n", args...)
}

func (r *runner) ns() string { return r.p.opts.Namespace }

// releaseKeys are the release-record keys as the operators find them:
// where the CRD's annotation says each major's operator runs, else the
// major's default namespace.
func (r *runner) releaseKeys() *helmrecord.Keys {
	listed := func(ctx context.Context) (map[string]string, error) {
		crd, err := r.dyn.Resource(crdGVR).Get(ctx, StackGVR.GroupResource().String(), metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading where the operators run (the CRD %s): %w", StackGVR.GroupResource(), err)
		}
		return inferencestack.OperatorNamespaces(crd.GetAnnotations()[inferencestack.OperatorNamespacesAnnotation])
	}
	return &helmrecord.Keys{
		Own: r.p.opts.OperatorVersion,
		Namespace: func(ctx context.Context, major string) (string, error) {
			namespaces, err := listed(ctx)
			if err != nil {
				return "", err
			}
			if ns := namespaces[major]; ns != "" {
				return ns, nil
			}
			return inferencestack.Namespace(major), nil
		},
		Majors: func(ctx context.Context) ([]string, error) {
			namespaces, err := listed(ctx)
			return slices.Sorted(maps.Keys(namespaces)), err
		},
		Secrets: func(ns string) corev1client.SecretInterface { return r.cs.CoreV1().Secrets(ns) },
	}
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// pause stops every Deployment from rolling out a new pod template, and
// records on it the ReplicaSet that holds its pods.
func (r *runner) pause(ctx context.Context) error {
	for _, d := range r.p.Deployments {
		patch, _ := json.Marshal(map[string]any{
			"metadata": map[string]any{"annotations": map[string]string{PausedAnnotation: d.ReplicaSet}},
			"spec":     map[string]any{"paused": true},
		})
		dep, err := r.cs.AppsV1().Deployments(r.ns()).Patch(ctx, d.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			return fmt.Errorf("pausing Deployment %s/%s: %w", r.ns(), d.Name, err)
		}
		if dep.UID != d.UID {
			return fmt.Errorf("Deployment %s/%s was re-created since the plan was made (UID %s, planned %s): plan again", r.ns(), d.Name, dep.UID, d.UID)
		}
		r.logf("paused Deployment %s (its pods stay in ReplicaSet %s)", d.Name, d.ReplicaSet)
	}
	return nil
}

// handOver moves the release from the ModelOrchestra to the stack, in
// steps a later run can carry on from (NewPlan finds where it stopped):
//
//  1. the InferenceStack is created without an operatorVersion label, so
//     no operator reconciles it yet: it records the migration and is the
//     owner the release's objects move to;
//  2. every object of the release and every release Secret gets the stack
//     as controller owner in place of the ModelOrchestra (adopt);
//  3. the ModelOrchestra is taken from its operator and deleted without
//     uninstalling anything (removeOrchestra), and step 2 runs again;
//  4. the Deployments are paused (unless Rollout), so that the operator's
//     upgrade changes their templates without replacing a pod;
//  5. the stack is labelled for its major, whose operator takes it over.
//
// Step 2 before step 3 is what makes the migration safe while the Model
// Orchestra operator runs. Until its cache shows the ModelOrchestra gone,
// that operator repairs the release's objects from its stored manifest,
// owner reference to the ModelOrchestra included; a reference put back
// after the ModelOrchestra is deleted dangles, and the garbage collector
// deletes an object whose owners are all gone, pods and all. With the
// stack as controller owner, the operator's repair cannot add its own
// (an object has at most one controller: the API server refuses the
// patch), and an object that has a live owner is never collected (the
// collector only removes dangling references from it).
func (r *runner) handOver(ctx context.Context) error {
	if r.p.StackCreated {
		r.stack = r.p.Stack
	} else if err := r.createStack(ctx); err != nil {
		return err
	}
	if err := r.adopt(ctx); err != nil {
		return err
	}
	if r.p.Orchestra != nil {
		if err := r.removeOrchestra(ctx); err != nil {
			return err
		}
	}
	if !r.p.opts.Rollout {
		if err := r.pause(ctx); err != nil {
			return err
		}
	}
	if err := r.signRevisions(ctx); err != nil {
		return err
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{operatorVersionLabel: r.p.opts.OperatorVersion}}})
	s, err := r.dyn.Resource(StackGVR).Namespace(r.ns()).Patch(ctx, r.stack.GetName(), types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("labelling InferenceStack %s/%s %s: %s: %w (the workloads keep running; run the migration again to carry on)", r.ns(), r.stack.GetName(), operatorVersionLabel, r.p.opts.OperatorVersion, err)
	}
	r.stack = s
	r.logf("labelled InferenceStack %s/%s %s: %s: its operator takes it over", r.ns(), s.GetName(), operatorVersionLabel, r.p.opts.OperatorVersion)
	return nil
}

// removeOrchestra takes the ModelOrchestra away from its operator without
// letting it uninstall anything:
//
//  1. its uninstall finalizer goes, so its operator has nothing to run
//     when it is deleted;
//  2. it is deleted with the orphan propagation policy, on the condition
//     that it did not change since step 1: a running old operator that
//     wrote to it meanwhile (its finalizer back) makes the delete fail, and
//     both steps are retried. Once deletion has started no finalizer can be
//     added to it, and its operator no longer touches the release: it
//     neither uninstalls nor repairs it;
//  3. the release's objects are adopted again (an object its operator
//     created meanwhile, say).
func (r *runner) removeOrchestra(ctx context.Context) error {
	ri := r.dyn.Resource(OrchestraGVR).Namespace(r.ns())
	name := r.p.opts.Name
	uid := r.p.Orchestra.GetUID()
	err := retry.OnError(wait.Backoff{Steps: 10, Duration: 100 * time.Millisecond, Factor: 2}, func(err error) bool {
		return apierrors.IsConflict(err)
	}, func() error {
		mo, err := ri.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if mo.GetUID() != uid {
			return fmt.Errorf("ModelOrchestra %s/%s was re-created since the plan was made: plan again", r.ns(), name)
		}
		if mo.GetDeletionTimestamp() != nil {
			if hasFinalizer(mo, uninstallFinalizer) {
				return fmt.Errorf("ModelOrchestra %s/%s is being deleted by someone else with its operator's finalizer on: its operator may be uninstalling the release", r.ns(), name)
			}
			return nil
		}
		if hasFinalizer(mo, uninstallFinalizer) {
			var keep []string
			for _, f := range mo.GetFinalizers() {
				if f != uninstallFinalizer {
					keep = append(keep, f)
				}
			}
			mo.SetFinalizers(keep)
			if mo, err = ri.Update(ctx, mo, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		rv := mo.GetResourceVersion()
		orphan := metav1.DeletePropagationOrphan
		return ri.Delete(ctx, name, metav1.DeleteOptions{
			PropagationPolicy: &orphan,
			Preconditions:     &metav1.Preconditions{ResourceVersion: &rv},
		})
	})
	if err == nil {
		err = r.adopt(ctx)
	}
	if err != nil {
		return fmt.Errorf("removing ModelOrchestra %s/%s without uninstalling it: %w", r.ns(), name, err)
	}
	r.logf("removed ModelOrchestra %s/%s from its operator (finalizer removed, deleted with orphan propagation)", r.ns(), name)
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := ri.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for ModelOrchestra %s/%s to be gone (the garbage collector removes the orphan finalizer; is kube-controller-manager running?): %w", r.ns(), name, err)
	}
	r.logf("ModelOrchestra %s/%s is gone; its workloads stay", r.ns(), name)
	return nil
}

// orchestraUID is the UID of the ModelOrchestra being migrated, from the
// stack's record of it (the ModelOrchestra itself may be gone).
func (r *runner) orchestraUID() types.UID {
	from := r.stack.GetAnnotations()[MigratedFromAnnotation]
	return types.UID(strings.TrimPrefix(from, "ModelOrchestra/"))
}

// adopt makes the stack the controller owner of every object of the old
// release and of the release's Secrets, in place of the ModelOrchestra,
// in one update per object. An object controlled by something else is left
// alone.
func (r *runner) adopt(ctx context.Context) error {
	objs, err := manifestObjects(r.p.Release.Manifest)
	if err != nil {
		return err
	}
	m, err := newMapper(r.cfg)
	if err != nil {
		return err
	}
	var targets []dynamic.ResourceInterface
	var names []string
	for _, key := range sortedKeys(objs) {
		u := objs[key]
		ri, err := m.resource(r.dyn, u, r.ns())
		if err != nil {
			return err
		}
		targets, names = append(targets, ri), append(names, u.GetName())
	}
	secrets, err := r.cs.CoreV1().Secrets(r.ns()).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + r.p.opts.Name})
	if err != nil {
		return fmt.Errorf("listing the revisions of release %s/%s: %w", r.ns(), r.p.opts.Name, err)
	}
	for _, s := range secrets.Items {
		targets, names = append(targets, r.dyn.Resource(corev1.SchemeGroupVersion.WithResource("secrets")).Namespace(r.ns())), append(names, s.Name)
	}
	old := r.orchestraUID()
	owner := r.stackOwner()
	adopted := 0
	for i, ri := range targets {
		changed := false
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			u, err := ri.Get(ctx, names[i], metav1.GetOptions{})
			if err != nil {
				return err
			}
			refs, ok := adoptedRefs(u.GetOwnerReferences(), old, owner)
			if !ok {
				return nil
			}
			u.SetOwnerReferences(refs)
			_, err = ri.Update(ctx, u, metav1.UpdateOptions{})
			changed = err == nil
			return err
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("making InferenceStack %s/%s the owner of %s: %w", r.ns(), r.stack.GetName(), names[i], err)
		}
		if changed {
			adopted++
		}
	}
	if adopted > 0 {
		r.logf("gave %d object(s) of the release InferenceStack %s/%s as controller owner in place of the ModelOrchestra", adopted, r.ns(), r.stack.GetName())
	}
	return nil
}

// adoptedRefs is refs without references to the ModelOrchestra (UID old)
// and with owner as controller, unless another controller remains; false
// when nothing changes.
func adoptedRefs(refs []metav1.OwnerReference, old types.UID, owner metav1.OwnerReference) ([]metav1.OwnerReference, bool) {
	var kept []metav1.OwnerReference
	controlled, changed := false, false
	for _, ref := range refs {
		switch {
		case ref.UID == old:
			changed = true
			continue
		case ref.UID == owner.UID:
			controlled = true
		case ref.Controller != nil && *ref.Controller:
			controlled = true
		}
		kept = append(kept, ref)
	}
	if !controlled {
		kept = append(kept, owner)
		changed = true
	}
	return kept, changed
}

// stackOwner is the controller reference to the stack the operator gives
// the objects of its release.
func (r *runner) stackOwner() metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{
		APIVersion: StackGVR.GroupVersion().String(), Kind: "InferenceStack",
		Name: r.stack.GetName(), UID: r.stack.GetUID(),
		Controller: &yes, BlockOwnerDeletion: &yes,
	}
}

func hasFinalizer(u *unstructured.Unstructured, f string) bool {
	for _, x := range u.GetFinalizers() {
		if x == f {
			return true
		}
	}
	return false
}

// createStack creates the stack without its operatorVersion label: no
// operator reconciles it until handOver labels it.
func (r *runner) createStack(ctx context.Context) error {
	stack := r.p.Stack.DeepCopy()
	labels := stack.GetLabels()
	delete(labels, operatorVersionLabel)
	stack.SetLabels(labels)
	s, err := r.dyn.Resource(StackGVR).Namespace(r.ns()).Create(ctx, stack, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating InferenceStack %s/%s: %w (nothing was changed)", r.ns(), r.p.opts.Name, err)
	}
	r.stack = s
	r.logf("created InferenceStack %s/%s, not yet labelled for an operator (it records the migration; a later run carries on from it)", r.ns(), s.GetName())
	return nil
}

// waitUpgraded waits until the stack's major's operator has claimed it and
// upgraded its release: Deployed=True and a deployed revision written by
// that operator (its claim label is on the revision).
func (r *runner) waitUpgraded(ctx context.Context) error {
	major := r.p.opts.OperatorVersion
	st := releaseStorage(r.cs, r.ns())
	var last string
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		s, err := r.dyn.Resource(StackGVR).Namespace(r.ns()).Get(ctx, r.p.opts.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		r.stack = s
		status, reason, msg := conditionOf(s, "Deployed")
		rel, err := st.Last(r.p.opts.Name)
		if err != nil {
			last = fmt.Sprintf("Deployed=%s %s; release: %v", status, reason, err)
			return false, nil
		}
		last = fmt.Sprintf("claimed by %q; Deployed=%s %s %q; release revision %d %s by %q", s.GetLabels()[reconciledByLabel], status, reason, msg, rel.Version, rel.Info.Status, rel.Labels[reconciledByLabel])
		return s.GetLabels()[reconciledByLabel] == major && status == "True" &&
			rel.Info.Status == "deployed" && rel.Labels[reconciledByLabel] == major, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the %s operator to take InferenceStack %s/%s over (is it installed and running? the workloads keep running meanwhile; run the migration again to resume): %w (last: %s)", major, r.ns(), r.p.opts.Name, err, last)
	}
	r.logf("the %s operator claimed the stack and upgraded the release (%s)", major, last)
	return nil
}

func conditionOf(u *unstructured.Unstructured, typ string) (status, reason, message string) {
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

// signRevisions signs the old operator's release revisions as the
// operator taking the stack over signs its own, before it reads them: it
// refuses a record created since the operators began signing that none of
// them signed. The old operator no longer writes them (its ModelOrchestra
// is gone). A Secret that is not a revision Helm wrote (its name, labels
// and payload disagree, or it is newer than the revision the plan read) is
// not signed: the migration stops and names it.
func (r *runner) signRevisions(ctx context.Context) error {
	secrets, err := r.cs.CoreV1().Secrets(r.ns()).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + r.p.opts.Name})
	if err != nil {
		return fmt.Errorf("listing the revisions of release %s/%s: %w", r.ns(), r.p.opts.Name, err)
	}
	keys := r.releaseKeys()
	for _, s := range secrets.Items {
		if err := r.isRevision(&s); err != nil {
			return fmt.Errorf("release Secret %s/%s: %w; delete it if nobody needs it and run the migration again (the workloads keep running)", r.ns(), s.Name, err)
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := r.cs.CoreV1().Secrets(r.ns()).Get(ctx, s.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if err := r.isRevision(cur); err != nil {
				return err
			}
			if err := keys.Sign(ctx, cur); err != nil {
				return fmt.Errorf("signing it: %w", err)
			}
			_, err = r.cs.CoreV1().Secrets(r.ns()).Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("signing release revision %s/%s (the workloads keep running; run the migration again to carry on): %w", r.ns(), s.Name, err)
		}
	}
	r.logf("signed %d revision(s) of release %s/%s with the %s operator's key", len(secrets.Items), r.ns(), r.p.opts.Name, r.p.opts.OperatorVersion)
	return nil
}

// isRevision checks that s is a revision of the release Helm could have
// written: named and labelled for the release and revision its payload
// holds, and no newer than the revision the plan read.
func (r *runner) isRevision(s *corev1.Secret) error {
	rel, err := decodeRecord(s.Data["release"])
	if err != nil {
		return err
	}
	switch {
	case rel.Name != r.p.opts.Name || s.Name != fmt.Sprintf("sh.helm.release.v1.%s.v%d", rel.Name, rel.Version) ||
		s.Labels["version"] != strconv.Itoa(rel.Version):
		return fmt.Errorf("it holds revision %d of release %q, which Helm would not store under that name and labels", rel.Version, rel.Name)
	case rel.Version > r.p.Release.Version:
		return fmt.Errorf("it holds revision %d, newer than revision %d the migration was planned from", rel.Version, r.p.Release.Version)
	}
	return nil
}

// adoptRevisions gives the old operator's release revisions what this
// operator's carry: the stack as controller owner (so deleting the stack
// removes them, and the operator is told when one disappears), its claim
// label (so it caches them and recognises them as its own) and the
// signature of its major.
func (r *runner) adoptRevisions(ctx context.Context) error {
	secrets, err := r.cs.CoreV1().Secrets(r.ns()).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + r.p.opts.Name})
	if err != nil {
		return fmt.Errorf("listing the revisions of release %s/%s: %w", r.ns(), r.p.opts.Name, err)
	}
	owner, old := r.stackOwner(), r.orchestraUID()
	keys := r.releaseKeys()
	n := 0
	for i := range secrets.Items {
		s := &secrets.Items[i]
		if s.Labels[reconciledByLabel] != "" && metav1.GetControllerOf(s) != nil && (old == "" || !strings.Contains(manifestOf(s), string(old))) &&
			s.Annotations[helmrecord.SignatureAnnotation] != "" {
			continue
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := r.cs.CoreV1().Secrets(r.ns()).Get(ctx, s.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cur.Labels == nil {
				cur.Labels = map[string]string{}
			}
			if cur.Labels[reconciledByLabel] == "" {
				cur.Labels[reconciledByLabel] = r.p.opts.OperatorVersion
			}
			if metav1.GetControllerOf(cur) == nil {
				cur.OwnerReferences = append(cur.OwnerReferences, owner)
			}
			payload, _, err := adoptManifest(cur.Data["release"], old, owner)
			if err != nil {
				return fmt.Errorf("adopting the stored manifest: %w", err)
			}
			cur.Data["release"] = payload
			// Signed as the operator signs its own: it refuses a record
			// created since it began signing that no operator signed.
			if err := keys.Sign(ctx, cur); err != nil {
				return fmt.Errorf("signing the revision: %w", err)
			}
			_, err = r.cs.CoreV1().Secrets(r.ns()).Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if apierrors.IsNotFound(err) {
			continue // pruned by the operator's history limit meanwhile
		}
		if err != nil {
			return fmt.Errorf("adopting release revision %s: %w", s.Name, err)
		}
		n++
	}
	if n > 0 {
		r.logf("gave %d revision(s) of the old operator the %s operator's claim, their stored manifests owned by the InferenceStack", n, r.p.opts.OperatorVersion)
	}
	return nil
}

// keepPods hands a paused Deployment's pods to its new pod template: the
// ReplicaSet holding them gets the Deployment's template (keeping its
// pod-template-hash label, which its pods and selector carry), so that the
// Deployment, resumed, finds its template in that ReplicaSet and creates no
// other. A ReplicaSet's template only shapes pods it creates later, so the
// running pods are untouched. The resume is an update of the Deployment as
// it was read: if anything changed it since (another template, say), the
// update conflicts and the whole step starts over on the fresh Deployment,
// so the template that is resumed is always the one the ReplicaSet got.
func (r *runner) keepPods(ctx context.Context, d *DeploymentPlan) error {
	var rsName string
	again := wait.Backoff{Steps: 10, Duration: 100 * time.Millisecond, Factor: 1.5, Jitter: 0.1}
	err := retry.RetryOnConflict(again, func() error {
		dep, err := r.observedDeployment(ctx, d)
		if err != nil {
			return err
		}
		if rsName = dep.Annotations[PausedAnnotation]; rsName == "" {
			rsName = d.ReplicaSet
		}
		if rsName == "" {
			return fmt.Errorf("Deployment %s/%s: no record of the ReplicaSet holding its pods", r.ns(), d.Name)
		}
		if err := r.giveTemplate(ctx, dep, rsName); err != nil {
			return err
		}
		resumed := dep.DeepCopy()
		delete(resumed.Annotations, PausedAnnotation)
		resumed.Spec.Paused = false
		if _, err := r.cs.AppsV1().Deployments(r.ns()).Update(ctx, resumed, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("resuming Deployment %s/%s: %w", r.ns(), d.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.logf("Deployment %s: ReplicaSet %s carries the new pod template; resumed without replacing a pod", d.Name, rsName)
	return nil
}

// observedDeployment waits until the Deployment controller has seen the
// Deployment's latest generation (the operator's upgrade has reached it:
// its template is the new chart's) and returns the Deployment.
func (r *runner) observedDeployment(ctx context.Context, d *DeploymentPlan) (*appsv1.Deployment, error) {
	var dep *appsv1.Deployment
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var err error
		dep, err = r.cs.AppsV1().Deployments(r.ns()).Get(ctx, d.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return dep.Status.ObservedGeneration >= dep.Generation, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for Deployment %s/%s: %w", r.ns(), d.Name, err)
	}
	if dep.UID != d.UID {
		return nil, fmt.Errorf("Deployment %s/%s was re-created during the migration (UID %s, was %s)", r.ns(), d.Name, dep.UID, d.UID)
	}
	return dep, nil
}

// giveTemplate gives ReplicaSet rsName of dep dep's pod template and waits
// until kube-controller-manager has seen it.
func (r *runner) giveTemplate(ctx context.Context, dep *appsv1.Deployment, rsName string) error {
	rss := r.cs.AppsV1().ReplicaSets(r.ns())
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rs, err := rss.Get(ctx, rsName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ref := metav1.GetControllerOf(rs); ref == nil || ref.UID != dep.UID {
			return fmt.Errorf("ReplicaSet %s does not belong to Deployment %s", rsName, dep.Name)
		}
		if sameTemplate(&rs.Spec.Template, &dep.Spec.Template) {
			return nil
		}
		tmpl := dep.Spec.Template.DeepCopy()
		tmpl.Labels = maps.Clone(tmpl.Labels)
		if hash := rs.Spec.Template.Labels[podTemplateHash]; hash != "" {
			if tmpl.Labels == nil {
				tmpl.Labels = map[string]string{}
			}
			tmpl.Labels[podTemplateHash] = hash
		}
		rs.Spec.Template = *tmpl
		_, err = rss.Update(ctx, rs, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("giving ReplicaSet %s/%s the new pod template: %w", r.ns(), rsName, err)
	}
	// The Deployment must not be resumed before the Deployment controller's
	// cache holds the new template of the ReplicaSet: the two reach
	// kube-controller-manager by separate watches, and a resumed Deployment
	// that finds no ReplicaSet with its template creates one, whose pods
	// start and are deleted again a moment later (the older ReplicaSet wins
	// once its template arrives). The ReplicaSet controller reads the same
	// shared cache and records the generation it saw, so once it has
	// observed the ReplicaSet's generation, the Deployment controller sees
	// the template too.
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		rs, err := rss.Get(ctx, rsName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return rs.Status.ObservedGeneration >= rs.Generation, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the ReplicaSet controller to observe ReplicaSet %s/%s (is kube-controller-manager running?): %w", r.ns(), rsName, err)
	}
	return nil
}

// verify waits until every Deployment has settled on its template and
// reports which of the planned pods are still there.
func (r *runner) verify(ctx context.Context) (*Result, error) {
	res := &Result{Stack: r.stack}
	var problems []string
	for _, d := range r.p.Deployments {
		var last string
		err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			dep, err := r.cs.AppsV1().Deployments(r.ns()).Get(ctx, d.Name, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			want := int32(1)
			if dep.Spec.Replicas != nil {
				want = *dep.Spec.Replicas
			}
			s := dep.Status
			last = fmt.Sprintf("generation %d observed %d, updated %d of %d, replicas %d", dep.Generation, s.ObservedGeneration, s.UpdatedReplicas, want, s.Replicas)
			return s.ObservedGeneration >= dep.Generation && s.UpdatedReplicas == want && s.Replicas == want && !dep.Spec.Paused, nil
		})
		if err != nil {
			problems = append(problems, fmt.Sprintf("Deployment %s did not settle: %v (last: %s)", d.Name, err, last))
			continue
		}
		pods, err := r.cs.CoreV1().Pods(r.ns()).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing pods in %s: %w", r.ns(), err)
		}
		alive := map[types.UID]bool{}
		for _, pod := range pods.Items {
			if pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodFailed {
				alive[pod.UID] = true
			}
		}
		for uid, name := range d.Pods {
			if alive[uid] {
				res.KeptPods++
			} else {
				res.ReplacedPods++
				if !r.p.opts.Rollout {
					problems = append(problems, fmt.Sprintf("pod %s of Deployment %s was replaced", name, d.Name))
				}
			}
		}
	}
	if len(problems) > 0 {
		return res, errors.New(strings.Join(problems, "; "))
	}
	r.logf("done: InferenceStack %s/%s runs the release; %d pod(s) kept, %d replaced", r.ns(), r.p.opts.Name, res.KeptPods, res.ReplacedPods)
	return res, nil
}

// manifestOf returns the manifest a release Secret records, or "" if it
// cannot be read (the adoption then rewrites the record and says why).
func manifestOf(s *corev1.Secret) string {
	rel, err := decodeRecord(s.Data["release"])
	if err != nil {
		return "unreadable"
	}
	return rel.Manifest
}
