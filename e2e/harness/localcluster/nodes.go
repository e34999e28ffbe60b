package localcluster

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Well-known keys used on simulated nodes.
const (
	// KwokNodeAnnotation marks a Node as simulated: the KWOK controller
	// started by kwokctl manages exactly the nodes carrying it (value "fake").
	KwokNodeAnnotation = "kwok.x-k8s.io/node"

	// GPUResource is the extended resource advertised by NVIDIA's device
	// plugin.
	GPUResource corev1.ResourceName = "nvidia.com/gpu"
	// GPU labels written by NVIDIA's GPU feature discovery.
	GPUPresentLabel = "nvidia.com/gpu.present"
	GPUProductLabel = "nvidia.com/gpu.product"
	GPUCountLabel   = "nvidia.com/gpu.count"
	// GPUTaintKey is the taint many GPU clusters (GKE, EKS GPU node groups,
	// the NVIDIA GPU operator's examples) put on GPU nodes so that only pods
	// that tolerate it land there.
	GPUTaintKey = "nvidia.com/gpu"

	// ControlPlaneLabel and its NoSchedule taint are set by kubeadm on
	// control-plane nodes; OLM's Deployments select the label.
	ControlPlaneLabel = "node-role.kubernetes.io/control-plane"
)

// DefaultCPUNode is the simulated CPU node of DefaultNodes; a cluster with
// a real node leaves it out (the real node takes its place).
const DefaultCPUNode = "cpu-1"

// Products of the default GPU nodes.
const (
	ProductRTX3060 = "NVIDIA-GeForce-RTX-3060"
	ProductH100    = "NVIDIA-H100-80GB-HBM3"
)

// Node describes a simulated node. Zero fields get defaults (16 CPUs,
// 64Gi memory, 110 pods).
type Node struct {
	Name   string
	CPU    string // capacity, e.g. "16"
	Memory string // capacity, e.g. "64Gi"
	Pods   int    // capacity
	Labels map[string]string
	Taints []corev1.Taint
	// GPU, if set, makes this a GPU node.
	GPU *GPU
	// ControlPlane adds the control-plane label and its NoSchedule taint, so
	// ordinary workloads avoid the node while workloads that select and
	// tolerate it (like OLM's controllers) can run there.
	ControlPlane bool
}

// GPU describes the NVIDIA GPUs of a node, as the device plugin and GPU
// feature discovery would advertise them.
type GPU struct {
	Product string // value of nvidia.com/gpu.product
	Count   int    // nvidia.com/gpu capacity and allocatable
	// Untainted leaves off the nvidia.com/gpu=present:NoSchedule taint.
	// GPU nodes are tainted by default, as on many real GPU clusters, so
	// tests see that a pod needs a toleration (which the chart adds for cuda
	// readers) as well as a GPU request to land there.
	Untainted bool
}

// GPUToleration tolerates the taint that tainted GPU nodes carry.
func GPUToleration() corev1.Toleration {
	return corev1.Toleration{Key: GPUTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
}

// DefaultNodes returns the default simulated nodes:
//   - gpu-rtx3060: 1 × NVIDIA-GeForce-RTX-3060, tainted nvidia.com/gpu=present:NoSchedule
//   - gpu-h100: 8 × NVIDIA-H100-80GB-HBM3, tainted likewise
//   - cpu-1: no GPU, no taint
//   - control-plane: control-plane label and NoSchedule taint
func DefaultNodes() []Node {
	return []Node{
		{Name: "gpu-rtx3060", CPU: "8", Memory: "32Gi", GPU: &GPU{Product: ProductRTX3060, Count: 1}},
		{Name: "gpu-h100", CPU: "96", Memory: "1Ti", GPU: &GPU{Product: ProductH100, Count: 8}},
		{Name: DefaultCPUNode, CPU: "16", Memory: "64Gi"},
		{Name: "control-plane", CPU: "4", Memory: "16Gi", ControlPlane: true},
	}
}

// object renders n as a Node object; capacity and allocatable are equal.
func (n Node) object() (*corev1.Node, error) {
	cpu, mem, pods := n.CPU, n.Memory, n.Pods
	if cpu == "" {
		cpu = "16"
	}
	if mem == "" {
		mem = "64Gi"
	}
	if pods == 0 {
		pods = 110
	}
	res := corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(int64(pods), resource.DecimalSI)}
	for name, v := range map[corev1.ResourceName]string{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem} {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, err
		}
		res[name] = q
	}
	labels := map[string]string{
		"kubernetes.io/hostname": n.Name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		"type":                   "kwok",
	}
	for k, v := range n.Labels {
		labels[k] = v
	}
	taints := append([]corev1.Taint(nil), n.Taints...)
	if n.ControlPlane {
		labels[ControlPlaneLabel] = ""
		taints = append(taints, corev1.Taint{Key: ControlPlaneLabel, Effect: corev1.TaintEffectNoSchedule})
	}
	if g := n.GPU; g != nil {
		labels[GPUPresentLabel] = "true"
		labels[GPUProductLabel] = g.Product
		labels[GPUCountLabel] = strconv.Itoa(g.Count)
		res[GPUResource] = *resource.NewQuantity(int64(g.Count), resource.DecimalSI)
		if !g.Untainted {
			taints = append(taints, corev1.Taint{Key: GPUTaintKey, Value: "present", Effect: corev1.TaintEffectNoSchedule})
		}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        n.Name,
			Labels:      labels,
			Annotations: map[string]string{KwokNodeAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
		},
		Spec: corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Capacity:    res,
			Allocatable: res.DeepCopy(),
		},
	}, nil
}
