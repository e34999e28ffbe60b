package olmlocal

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/poll"
)

// OLM as pods: on a cluster with a real node, catalogd and
// operator-controller run from images the harness builds from the pinned
// binaries and pushes to its registry, deployed from the release manifest
// itself. What cert-manager would do, the harness does: it issues the two
// serving certificates into the Secrets the Deployments mount and puts its
// CA into the webhook configuration.

// Names in the release manifest.
const (
	catalogdDeployment           = "catalogd-controller-manager"
	operatorControllerDeployment = "operator-controller-controller-manager"
	catalogdService              = "catalogd-service"
	catalogdCertSecret           = "catalogd-service-cert-git-version"
	operatorControllerCertSecret = "olmv1-cert"
)

// podKinds are the release manifest's kinds applied as they are in pod
// mode, besides appliedKinds. (cert-manager's Issuers and Certificates are
// replaced by the harness.)
var podKinds = map[string]schema.GroupVersionResource{
	"Service":       {Version: "v1", Resource: "services"},
	"Deployment":    {Group: "apps", Version: "v1", Resource: "deployments"},
	"NetworkPolicy": {Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"},
}

// pushControllerImage builds the image of one controller binary and
// pushes it to the registry; it returns the reference by digest.
func (o *OLM) pushControllerImage(ctx context.Context, bin, path string) (string, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	img, err := localcluster.AssembleImage([]localcluster.ImageFile{{Path: path, Mode: 0o755, Data: data}},
		localcluster.ImageSpec{Entrypoint: []string{path}, WorkingDir: "/", User: fmt.Sprintf("%d:%d", NonRootID, NonRootID)})
	if err != nil {
		return "", fmt.Errorf("image of %s: %w", bin, err)
	}
	tag, err := name.NewTag(fmt.Sprintf("%s/olm%s:%s", o.Registry.Addr, path, Version), name.StrictValidation)
	if err != nil {
		return "", err
	}
	if err := remote.Write(tag, img, remote.WithContext(ctx), remote.WithTransport(o.Registry.Transport())); err != nil {
		return "", fmt.Errorf("pushing %s: %w", tag, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return tag.Context().Digest(d.String()).String(), nil
}

// startPods deploys catalogd and operator-controller from the release
// manifest m as pods and waits until both are available and catalogd's
// webhook answers.
func (o *OLM) startPods(ctx context.Context, m *Manifests, bins *Binaries) error {
	images, err := o.pushControllerImages(ctx, bins)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(o.cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(o.cfg)
	if err != nil {
		return err
	}
	if err := o.createServingSecrets(ctx, cs); err != nil {
		return err
	}
	if err := applyPodObjects(ctx, cs, dyn, m.Pods, images); err != nil {
		return err
	}
	if err := o.applyPodWebhook(ctx, dyn, m.Webhook); err != nil {
		return err
	}
	return o.waitPods(ctx, cs)
}

// pushControllerImages pushes the images of both controllers; it returns
// their references by digest, by the name of the Deployment that runs them.
func (o *OLM) pushControllerImages(ctx context.Context, bins *Binaries) (map[string]string, error) {
	images := map[string]string{}
	for dep, b := range map[string]struct{ bin, path string }{
		catalogdDeployment:           {bins.Catalogd, "/catalogd"},
		operatorControllerDeployment: {bins.OperatorController, "/operator-controller"},
	} {
		ref, err := o.pushControllerImage(ctx, b.bin, b.path)
		if err != nil {
			return nil, err
		}
		images[dep] = ref
	}
	fmt.Fprintf(o.log, "OLM images pushed: %s, %s\n", images[catalogdDeployment], images[operatorControllerDeployment])
	return images, nil
}

// createServingSecrets creates (or updates) the Secrets cert-manager's
// Certificates would produce.
func (o *OLM) createServingSecrets(ctx context.Context, cs kubernetes.Interface) error {
	for secret, hosts := range map[string][]string{
		catalogdCertSecret:           {"localhost", catalogdService + "." + SystemNamespace + ".svc", catalogdService + "." + SystemNamespace + ".svc.cluster.local"},
		operatorControllerCertSecret: {"operator-controller-service." + SystemNamespace + ".svc", "operator-controller-service." + SystemNamespace + ".svc.cluster.local"},
	} {
		crt, key, err := o.CA.Serving(hosts...)
		if err != nil {
			return err
		}
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: secret, Namespace: SystemNamespace},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": o.CA.CertPEM},
		}
		if _, err := cs.CoreV1().Secrets(SystemNamespace).Create(ctx, s, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			_, err = cs.CoreV1().Secrets(SystemNamespace).Update(ctx, s, metav1.UpdateOptions{})
			if err != nil {
				return err
			}
		} else if err != nil {
			return fmt.Errorf("creating Secret %s: %w", secret, err)
		}
	}
	return nil
}

// applyPodObjects applies the release manifest's pod-mode objects, the
// Services first: catalogd's ClusterIP is what operator-controller's pod
// resolves catalogd's host name to. The Deployments run images.
func applyPodObjects(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, objs []*unstructured.Unstructured, images map[string]string) error {
	var deployments []*unstructured.Unstructured
	for _, u := range objs {
		if u.GetKind() == "Deployment" {
			deployments = append(deployments, u)
			continue
		}
		if err := applyObject(ctx, dyn, podKinds[u.GetKind()], u); err != nil {
			return err
		}
	}
	svc, err := cs.CoreV1().Services(SystemNamespace).Get(ctx, catalogdService, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, u := range deployments {
		nu, err := podDeployment(u, images, svc.Spec.ClusterIP)
		if err != nil {
			return err
		}
		if err := applyObject(ctx, dyn, podKinds["Deployment"], nu); err != nil {
			return err
		}
	}
	return nil
}

// podDeployment is the release manifest's Deployment u running its image
// from images, with catalogd's host name resolving to catalogIP.
func podDeployment(u *unstructured.Unstructured, images map[string]string, catalogIP string) (*unstructured.Unstructured, error) {
	d := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, d); err != nil {
		return nil, err
	}
	ref, ok := images[d.Name]
	if !ok {
		return nil, fmt.Errorf("release manifest has an unexpected Deployment %s", d.Name)
	}
	for i := range d.Spec.Template.Spec.Containers {
		if d.Spec.Template.Spec.Containers[i].Name == "manager" {
			d.Spec.Template.Spec.Containers[i].Image = ref
		}
	}
	// The cluster has no DNS: the catalog server's host name (in the
	// catalogs' status.urls, from catalogd's --external-address)
	// resolves through /etc/hosts to its Service instead.
	d.Spec.Template.Spec.HostAliases = []corev1.HostAlias{{
		IP:        catalogIP,
		Hostnames: []string{catalogdService + "." + SystemNamespace + ".svc", catalogdService + "." + SystemNamespace + ".svc.cluster.local"},
	}}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(d)
	if err != nil {
		return nil, err
	}
	nu := &unstructured.Unstructured{Object: obj}
	nu.SetAPIVersion("apps/v1")
	nu.SetKind("Deployment")
	unstructured.RemoveNestedField(nu.Object, "status")
	unstructured.RemoveNestedField(nu.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(nu.Object, "spec", "template", "metadata", "creationTimestamp")
	return nu, nil
}

// applyPodWebhook applies the webhook configuration as the release has it
// (calling the Service), with the CA cert-manager's CA injector would add.
func (o *OLM) applyPodWebhook(ctx context.Context, dyn dynamic.Interface, webhook *unstructured.Unstructured) error {
	wh := webhook.DeepCopy()
	hooks, _, _ := unstructured.NestedSlice(wh.Object, "webhooks")
	for i, h := range hooks {
		hm := h.(map[string]any)
		if err := unstructured.SetNestedField(hm, base64.StdEncoding.EncodeToString(o.CA.CertPEM), "clientConfig", "caBundle"); err != nil {
			return err
		}
		hooks[i] = hm
	}
	if err := unstructured.SetNestedSlice(wh.Object, hooks, "webhooks"); err != nil {
		return err
	}
	return applyObject(ctx, dyn, webhookGVR, wh)
}

// waitPods waits until both Deployments are available and, on a cluster
// with a real node, operator-controller's pod reaches catalogd's Service.
func (o *OLM) waitPods(ctx context.Context, cs kubernetes.Interface) error {
	for _, name := range []string{catalogdDeployment, operatorControllerDeployment} {
		if err := waitAvailable(ctx, cs, name); err != nil {
			return fmt.Errorf("%w\n%s", err, o.podLogs(context.WithoutCancel(ctx), 40))
		}
	}
	// operator-controller fetches catalogs from catalogd's Service: pod →
	// ClusterIP → pod across the node's bridge.
	if o.cluster != nil {
		pod, err := ReadyPod(ctx, cs, SystemNamespace, operatorControllerDeployment)
		if err != nil {
			return err
		}
		if err := o.cluster.WaitService(ctx, localcluster.ServiceCheck{Namespace: SystemNamespace, Name: catalogdService, FromNamespace: SystemNamespace, FromPod: pod}, time.Minute); err != nil {
			return fmt.Errorf("operator-controller's path to catalogd: %w", err)
		}
	}
	return nil
}

func applyObject(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, u *unstructured.Unstructured) error {
	data, err := u.MarshalJSON()
	if err != nil {
		return err
	}
	var ri dynamic.ResourceInterface = dyn.Resource(gvr)
	if ns := u.GetNamespace(); ns != "" {
		ri = dyn.Resource(gvr).Namespace(ns)
	}
	force := true
	if _, err := ri.Patch(ctx, u.GetName(), "application/apply-patch+yaml", data, metav1.PatchOptions{FieldManager: fieldManager, Force: &force}); err != nil {
		return fmt.Errorf("applying %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

// waitAvailable waits until the Deployment's pods are up to date and
// Ready (through their readiness probes).
func waitAvailable(ctx context.Context, cs kubernetes.Interface, name string) error {
	what := fmt.Sprintf("Deployment %s/%s to be available", SystemNamespace, name)
	return poll.Until(ctx, 3*time.Minute, what, func(ctx context.Context) (bool, string, error) {
		d, err := cs.AppsV1().Deployments(SystemNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		if d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want && d.Status.ReadyReplicas == want && d.Status.Replicas == want {
			return true, "", nil
		}
		why := fmt.Sprintf("updated %d ready %d of %d", d.Status.UpdatedReplicas, d.Status.ReadyReplicas, want)
		if pods, err := cs.CoreV1().Pods(SystemNamespace).List(ctx, metav1.ListOptions{}); err == nil {
			for _, p := range pods.Items {
				for _, st := range p.Status.ContainerStatuses {
					if st.State.Waiting != nil {
						why += fmt.Sprintf("; %s: %s %s", p.Name, st.State.Waiting.Reason, st.State.Waiting.Message)
					}
				}
			}
		}
		return false, why, nil
	}, poll.Every(200*time.Millisecond))
}

// ReadyPod names a Ready pod of Deployment namespace/deployment that is
// not being deleted (the pod a check calls from).
func ReadyPod(ctx context.Context, cs kubernetes.Interface, namespace, deployment string) (string, error) {
	d, err := cs.AppsV1().Deployments(namespace).Get(ctx, deployment, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return "", err
	}
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return p.Name, nil
			}
		}
	}
	return "", fmt.Errorf("Deployment %s/%s has no Ready pod", namespace, deployment)
}

// podLogs returns the last lines of every OLM pod's logs.
func (o *OLM) podLogs(ctx context.Context, lines int) string {
	cs, err := kubernetes.NewForConfig(o.cfg)
	if err != nil {
		return err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	pods, err := cs.CoreV1().Pods(SystemNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	n := int64(lines)
	for _, p := range pods.Items {
		data, err := cs.CoreV1().Pods(SystemNamespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &n}).DoRaw(ctx)
		fmt.Fprintf(&b, "==== pod %s/%s on %s (%s, last %d lines) ====\n", SystemNamespace, p.Name, p.Spec.NodeName, p.Status.Phase, lines)
		if err != nil {
			fmt.Fprintf(&b, "(logs: %v)\n", err)
			continue
		}
		b.Write(data)
	}
	return b.String()
}

// podsAlive fails if an OLM pod has restarted or is not Ready.
func (o *OLM) podsAlive(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(o.cfg)
	if err != nil {
		return err
	}
	for _, name := range []string{catalogdDeployment, operatorControllerDeployment} {
		d, err := cs.AppsV1().Deployments(SystemNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if isUnreachable(err) {
				return err
			}
			continue // transient
		}
		if d.Status.ReadyReplicas == 0 {
			return fmt.Errorf("OLM Deployment %s has no Ready pod", name)
		}
	}
	return nil
}
