package scenario

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	kindv1alpha4 "sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/kind/pkg/cluster"
	kindlog "sigs.k8s.io/kind/pkg/log"
	"sigs.k8s.io/yaml"

	inferencestack "github.com/titanml/inference-stack-operator"
)

// The kind provider's pinned versions: one setting each. Unlike the local
// provider (v1.5.1, the newest that builds from the module proxy here), kind
// machines have internet, so they use the newest OLM release's manifests and
// images. Override with INFERENCE_STACK_E2E_OLM_VERSION.
const (
	KindOLMVersion         = "v1.11.0"
	KindCertManagerVersion = "v1.18.2"
	KindRegistryImage      = "docker.io/library/registry:3"
	// KindPauseImage replaces the Takeoff images of the scenario's stacks
	// on kind: pods really run there, and a GPU reader image cannot start
	// on a fake GPU.
	KindPauseImage = "registry.k8s.io/pause:3.10"

	kindRegistryNamespace = "inference-stack-e2e"
	kindRegistryName      = "docker-registry"
	kindRegistryNodePort  = 30000
)

// The registry's address, for the cluster and for this machine alike, is
// <control-plane node IP>:30000 (the registry Service's NodePort): image
// references in the bundle and catalog name it, OLM's pods and every node's
// containerd reach it, and so does the image build's push on this machine
// (a Linux Docker host routes to kind's node network). Its certificate is
// issued by OLM's CA, which OLM's pods already trust for pulls; containerd
// and the push are given that CA.

// KindOptions configure StartKind.
type KindOptions struct {
	// Name of the kind cluster; default "inference-stack-e2e". An existing
	// cluster of that name is reused.
	Name string
	// Dir holds the kubeconfig, the containerd registry config mounted into
	// the nodes, and the builder's work. Default: a temporary directory.
	Dir string
	// Inputs are what the image builder builds from; default
	// BuildInputs() (when Inputs.Root is empty).
	Inputs Inputs
	// NodeImage overrides kind's default node image.
	NodeImage string
	// Keep leaves the cluster running on Env.Stop (the demo).
	Keep bool
	Log  io.Writer
}

// CheckKind says why the kind provider cannot run here, or nil.
func CheckKind(ctx context.Context) error {
	if err := DockerAvailable(ctx); err != nil {
		return fmt.Errorf("kind needs a Docker engine: %w", err)
	}
	return nil
}

type kindLogger struct{ w io.Writer }

func (l kindLogger) Warn(m string)             { fmt.Fprintln(l.w, m) }
func (l kindLogger) Warnf(f string, a ...any)  { fmt.Fprintf(l.w, f+"\n", a...) }
func (l kindLogger) Error(m string)            { fmt.Fprintln(l.w, m) }
func (l kindLogger) Errorf(f string, a ...any) { fmt.Fprintf(l.w, f+"\n", a...) }
func (l kindLogger) V(level kindlog.Level) kindlog.InfoLogger {
	if level > 0 {
		return kindlog.NoopInfoLogger{}
	}
	return kindInfo(l)
}

type kindInfo kindLogger

func (l kindInfo) Enabled() bool            { return true }
func (l kindInfo) Info(m string)            { fmt.Fprintln(l.w, m) }
func (l kindInfo) Infof(f string, a ...any) { fmt.Fprintf(l.w, f+"\n", a...) }

func kindProvider(log io.Writer) *cluster.Provider {
	return cluster.NewProvider(cluster.ProviderWithDocker(), cluster.ProviderWithLogger(kindLogger{log}))
}

// DeleteKind deletes the kind cluster name (nothing if it does not exist).
func DeleteKind(ctx context.Context, name string) error {
	if err := CheckKind(ctx); err != nil {
		return err
	}
	return kindProvider(io.Discard).Delete(name, "")
}

// StartKind creates (or reuses) a kind cluster with a control-plane node, a
// worker that acts as an RTX 3060 GPU node (labelled, tainted
// nvidia.com/gpu=present:NoSchedule, with nvidia.com/gpu capacity patched
// into its status) and a CPU worker, installs cert-manager and OLM v1 from
// the pinned release manifests, and runs a TLS registry inside the cluster
// (certificate from OLM's CA, as OLM's own e2e does), reachable at the
// control-plane node's IP and the Service's NodePort. Images are built and
// pushed there by the Builder, like on the local provider.
func StartKind(ctx context.Context, o KindOptions) (_ *Env, err error) {
	if err := CheckKind(ctx); err != nil {
		return nil, err
	}
	own, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(o.Dir, "kubeconfig")
	certsD := filepath.Join(o.Dir, "containerd-certs.d")
	if err := os.MkdirAll(certsD, 0o755); err != nil {
		return nil, fmt.Errorf("creating the containerd registry configuration: %w", err)
	}

	p := kindProvider(o.Log)
	created, err := createKindCluster(p, o, kubeconfig, certsD)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && created && !o.Keep {
			_ = p.Delete(o.Name, kubeconfig)
		}
	}()
	restCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading the kind kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("creating a Kubernetes client: %w", err)
	}
	if err := installKindOLM(ctx, restCfg, cs, o.Log); err != nil {
		return nil, err
	}
	registry, caFile, err := startKindRegistry(ctx, restCfg, cs, o.Dir, certsD)
	if err != nil {
		return nil, err
	}
	gpuNode, err := makeKindGPUNode(ctx, cs)
	if err != nil {
		return nil, err
	}

	b := o.Inputs.builder(filepath.Join(o.Dir, "images"), o.Log)
	b.Registry, b.RegistryCAFile = registry+"/tytn", caFile
	return &Env{
		Provider:       "kind",
		Kubeconfig:     kubeconfig,
		RESTConfig:     restCfg,
		Builder:        b,
		GPUNodes:       map[string]string{"NVIDIA-GeForce-RTX-3060": gpuNode},
		StackOverrides: map[string]any{"gateway": map[string]any{"image": pauseImage()}, "applicationTemplate": map[string]any{"image": pauseImage()}},
		Dump: func(w io.Writer) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, ns := range []string{"olmv1-system", kindRegistryNamespace, inferencestack.Namespace("v0")} {
				podLogs(ctx, cs, ns, w)
			}
		},
		Stop: func(ctx context.Context) error {
			var errs []error
			if !o.Keep {
				errs = append(errs, p.Delete(o.Name, kubeconfig))
				if own {
					errs = append(errs, os.RemoveAll(o.Dir))
				}
			}
			return errors.Join(errs...)
		},
	}, nil
}

// withDefaults fills in the log, cluster name, work directory (own reports
// that it was created here, so Stop removes it) and repository root.
func (o *KindOptions) withDefaults() (own bool, err error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Name == "" {
		o.Name = "inference-stack-e2e"
	}
	if o.Dir == "" {
		if o.Dir, err = os.MkdirTemp("", "e2e-kind-"); err != nil {
			return false, fmt.Errorf("creating the work directory: %w", err)
		}
		own = true
	}
	if o.Inputs.Root == "" {
		if o.Inputs, err = BuildInputs(); err != nil {
			return own, err
		}
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return own, fmt.Errorf("creating the work directory: %w", err)
	}
	return own, nil
}

// createKindCluster reuses the cluster o.Name when it exists (exporting its
// kubeconfig), else creates it: a control plane, the GPU worker and a CPU
// worker, every node's containerd reading registry settings from certsD.
// created reports whether it created the cluster.
func createKindCluster(p *cluster.Provider, o KindOptions, kubeconfig, certsD string) (created bool, err error) {
	existing, err := p.List()
	if err != nil {
		return false, fmt.Errorf("listing kind clusters: %w", err)
	}
	if contains(existing, o.Name) {
		fmt.Fprintf(o.Log, "reusing kind cluster %s\n", o.Name)
		if err := p.ExportKubeConfig(o.Name, kubeconfig, false); err != nil {
			return false, fmt.Errorf("exporting the kubeconfig of kind cluster %s: %w", o.Name, err)
		}
		return false, nil
	}
	mount := kindv1alpha4.Mount{HostPath: certsD, ContainerPath: "/etc/containerd/certs.d", Readonly: true}
	cfg := &kindv1alpha4.Cluster{
		TypeMeta: kindv1alpha4.TypeMeta{Kind: "Cluster", APIVersion: "kind.x-k8s.io/v1alpha4"},
		Nodes: []kindv1alpha4.Node{
			{
				Role:        kindv1alpha4.ControlPlaneRole,
				Image:       o.NodeImage,
				ExtraMounts: []kindv1alpha4.Mount{mount},
			},
			// The GPU node, then a CPU node (the GPU node is tainted,
			// like many real GPU pools: gateways and the operator go to
			// the CPU node).
			{Role: kindv1alpha4.WorkerRole, Image: o.NodeImage, ExtraMounts: []kindv1alpha4.Mount{mount}},
			{Role: kindv1alpha4.WorkerRole, Image: o.NodeImage, ExtraMounts: []kindv1alpha4.Mount{mount}},
		},
		ContainerdConfigPatches: []string{"[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"/etc/containerd/certs.d\"\n"},
	}
	fmt.Fprintf(o.Log, "creating kind cluster %s (control plane + a worker acting as the GPU node)\n", o.Name)
	if err := p.Create(o.Name, cluster.CreateWithV1Alpha4Config(cfg), cluster.CreateWithWaitForReady(5*time.Minute),
		cluster.CreateWithKubeconfigPath(kubeconfig), cluster.CreateWithDisplayUsage(false), cluster.CreateWithDisplaySalutation(false)); err != nil {
		return false, fmt.Errorf("kind create cluster: %w", err)
	}
	return true, nil
}

// installKindOLM applies cert-manager, then OLM (KindOLMVersion, or
// $INFERENCE_STACK_E2E_OLM_VERSION), from their pinned release manifests
// and waits for their Deployments.
func installKindOLM(ctx context.Context, restCfg *rest.Config, cs kubernetes.Interface, log io.Writer) error {
	olmVersion := KindOLMVersion
	if v := os.Getenv("INFERENCE_STACK_E2E_OLM_VERSION"); v != "" {
		olmVersion = v
	}
	for _, m := range []struct{ url, ns string }{
		{fmt.Sprintf("https://github.com/cert-manager/cert-manager/releases/download/%s/cert-manager.yaml", KindCertManagerVersion), "cert-manager"},
		{fmt.Sprintf("https://github.com/operator-framework/operator-controller/releases/download/%s/operator-controller.yaml", olmVersion), "olmv1-system"},
	} {
		fmt.Fprintf(log, "applying %s\n", m.url)
		if err := applyURL(ctx, restCfg, m.url); err != nil {
			return err
		}
		if err := waitDeploymentsAvailable(ctx, cs, m.ns, 5*time.Minute); err != nil {
			return err
		}
	}
	return nil
}

// startKindRegistry runs the registry with a certificate from OLM's CA for
// the control-plane node's IP, makes every node's containerd trust that CA
// for it (certsD), and returns its address and the CA's file in dir.
func startKindRegistry(ctx context.Context, restCfg *rest.Config, cs kubernetes.Interface, dir, certsD string) (registry, caFile string, err error) {
	nodeIP, err := kindControlPlaneIP(ctx, cs)
	if err != nil {
		return "", "", err
	}
	registry = fmt.Sprintf("%s:%d", nodeIP, kindRegistryNodePort)
	regDocs := fmt.Sprintf(kindRegistryManifest, kindRegistryNamespace, kindRegistryName, KindRegistryImage, kindRegistryNodePort, nodeIP)
	if err := applyYAML(ctx, restCfg, []byte(regDocs)); err != nil {
		return "", "", err
	}
	if err := waitDeploymentsAvailable(ctx, cs, kindRegistryNamespace, 5*time.Minute); err != nil {
		return "", "", err
	}
	sec, err := cs.CoreV1().Secrets(kindRegistryNamespace).Get(ctx, kindRegistryName+"-tls", metav1.GetOptions{})
	if err != nil {
		return "", "", fmt.Errorf("reading the registry's certificate: %w", err)
	}
	caPEM := sec.Data["ca.crt"]
	if len(caPEM) == 0 {
		return "", "", fmt.Errorf("secret %s/%s-tls has no ca.crt", kindRegistryNamespace, kindRegistryName)
	}
	caFile = filepath.Join(dir, "registry-ca.crt")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		return "", "", fmt.Errorf("writing the registry's CA: %w", err)
	}
	// Every node's containerd (mounted certs.d, read at each pull) trusts
	// the CA for that host.
	hostDir := filepath.Join(certsD, registry)
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		return "", "", fmt.Errorf("writing the containerd registry configuration: %w", err)
	}
	if err := os.WriteFile(filepath.Join(hostDir, "ca.crt"), caPEM, 0o644); err != nil {
		return "", "", fmt.Errorf("writing the containerd registry configuration: %w", err)
	}
	hosts := fmt.Sprintf("server = \"https://%[1]s\"\n\n[host.\"https://%[1]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = \"/etc/containerd/certs.d/%[1]s/ca.crt\"\n", registry)
	if err := os.WriteFile(filepath.Join(hostDir, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		return "", "", fmt.Errorf("writing the containerd registry configuration: %w", err)
	}
	return registry, caFile, nil
}

// kindNodes lists the cluster's control-plane and worker nodes.
func kindNodes(ctx context.Context, cs kubernetes.Interface) (controlPlane, workers []corev1.Node, err error) {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing nodes: %w", err)
	}
	for _, n := range nodes.Items {
		if _, cp := n.Labels["node-role.kubernetes.io/control-plane"]; cp {
			controlPlane = append(controlPlane, n)
		} else {
			workers = append(workers, n)
		}
	}
	return controlPlane, workers, nil
}

func kindControlPlaneIP(ctx context.Context, cs kubernetes.Interface) (string, error) {
	controlPlane, _, err := kindNodes(ctx, cs)
	if err != nil {
		return "", err
	}
	nodeIP := ""
	for _, n := range controlPlane {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				nodeIP = a.Address
			}
		}
	}
	if nodeIP == "" {
		return "", errors.New("kind control-plane node has no InternalIP")
	}
	return nodeIP, nil
}

// makeKindGPUNode turns the first worker (by name) into an RTX 3060 GPU
// node: labelled like NVIDIA's GPU feature discovery does, tainted
// nvidia.com/gpu=present:NoSchedule, with one nvidia.com/gpu in its status.
func makeKindGPUNode(ctx context.Context, cs kubernetes.Interface) (string, error) {
	_, workers, err := kindNodes(ctx, cs)
	if err != nil {
		return "", err
	}
	gpuNode := ""
	for _, n := range workers {
		if gpuNode == "" || n.Name < gpuNode {
			gpuNode = n.Name
		}
	}
	if gpuNode == "" {
		return "", errors.New("kind cluster has no worker node")
	}
	labels := map[string]any{
		"metadata": map[string]any{"labels": map[string]string{
			"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-3060", "nvidia.com/gpu.count": "1",
		}},
		"spec": map[string]any{"taints": []map[string]string{{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}}},
	}
	data, _ := json.Marshal(labels)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, gpuNode, "application/merge-patch+json", data, metav1.PatchOptions{}); err != nil {
		return "", fmt.Errorf("labelling and tainting %s as a GPU node: %w", gpuNode, err)
	}
	capacity := []byte(`{"status":{"capacity":{"nvidia.com/gpu":"1"},"allocatable":{"nvidia.com/gpu":"1"}}}`)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, gpuNode, "application/merge-patch+json", capacity, metav1.PatchOptions{}, "status"); err != nil {
		return "", fmt.Errorf("giving %s a fake GPU: %w", gpuNode, err)
	}
	return gpuNode, nil
}

func pauseImage() map[string]any {
	repo, tag, _ := strings.Cut(KindPauseImage, ":")
	return map[string]any{"repository": repo, "tag": tag}
}

const kindRegistryManifest = `
apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: %[2]s
  namespace: %[1]s
spec:
  secretName: %[2]s-tls
  dnsNames:
    - %[2]s.%[1]s.svc
    - %[2]s.%[1]s.svc.cluster.local
  ipAddresses:
    - %[5]s
  privateKey: {algorithm: ECDSA, size: 256}
  issuerRef: {name: olmv1-ca, kind: ClusterIssuer, group: cert-manager.io}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[2]s
  namespace: %[1]s
spec:
  replicas: 1
  selector: {matchLabels: {app: %[2]s}}
  template:
    metadata: {labels: {app: %[2]s}}
    spec:
      containers:
        - name: registry
          image: %[3]s
          env:
            - {name: REGISTRY_HTTP_TLS_CERTIFICATE, value: /certs/tls.crt}
            - {name: REGISTRY_HTTP_TLS_KEY, value: /certs/tls.key}
          volumeMounts: [{name: certs, mountPath: /certs}]
      volumes:
        - name: certs
          secret: {secretName: %[2]s-tls}
---
apiVersion: v1
kind: Service
metadata:
  name: %[2]s
  namespace: %[1]s
spec:
  type: NodePort
  selector: {app: %[2]s}
  ports:
    - {name: https, port: 5000, targetPort: 5000, nodePort: %[4]d}
`

// applyURL server-side applies the multi-document YAML at url.
func applyURL(ctx context.Context, cfg *rest.Config, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("downloading %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("downloading %s: %s", url, resp.Status)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", url, err)
	}
	return applyYAML(ctx, cfg, data)
}

// applyYAML server-side applies every document, retrying while new CRDs
// become discoverable and webhooks start.
func applyYAML(ctx context.Context, cfg *rest.Config, data []byte) error {
	var docs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("splitting the manifests: %w", err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return fmt.Errorf("parsing a manifest: %w", err)
		}
		if len(u.Object) > 0 {
			docs = append(docs, u)
		}
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating a dynamic client: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating a discovery client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	deadline := time.Now().Add(3 * time.Minute)
	pending := docs
	for len(pending) > 0 {
		var retry []*unstructured.Unstructured
		var lastErr error
		for _, u := range pending {
			if err := applyOne(ctx, dyn, mapper, u); err != nil {
				retry, lastErr = append(retry, u), err
			}
		}
		if len(retry) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("applying %d objects: %w", len(retry), lastErr)
		}
		mapper.Reset()
		pending = retry
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	return nil
}

func applyOne(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, u *unstructured.Unstructured) error {
	gvk := u.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("mapping %s: %w", gvk, err)
	}
	var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := u.GetNamespace()
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		ri = dyn.Resource(m.Resource).Namespace(ns)
	}
	data, err := json.Marshal(u.Object)
	if err != nil {
		return fmt.Errorf("encoding %s %s: %w", gvk.Kind, u.GetName(), err)
	}
	force := true
	_, err = ri.Patch(ctx, u.GetName(), "application/apply-patch+yaml", data, metav1.PatchOptions{FieldManager: "e2e", Force: &force})
	return err
}

func waitDeploymentsAvailable(ctx context.Context, cs kubernetes.Interface, ns string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	for {
		l, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err == nil && len(l.Items) > 0 {
			var waiting []string
			for _, d := range l.Items {
				if !available(&d) {
					waiting = append(waiting, d.Name)
				}
			}
			if len(waiting) == 0 {
				return nil
			}
			last = "waiting for " + strings.Join(waiting, ", ")
		} else if err != nil && !apierrors.IsNotFound(err) {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("deployments in %s not available: %w (%s)", ns, ctx.Err(), last)
		case <-time.After(time.Second):
		}
	}
}

func available(d *appsv1.Deployment) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func podLogs(ctx context.Context, cs kubernetes.Interface, ns string, w io.Writer) {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	lines := int64(60)
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			data, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: &lines}).DoRaw(ctx)
			if err != nil {
				continue
			}
			fmt.Fprintf(w, "==== %s/%s %s (last %d lines) ====\n%s\n", ns, p.Name, c.Name, lines, data)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
