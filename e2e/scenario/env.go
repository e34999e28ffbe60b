// Package scenario is the end-to-end flow of the product under OLM v1, on
// any cluster provider: build and push the images, install the catalog
// chart, let OLM install the operator from its channel, apply GPU-selecting
// InferenceStacks, upgrade through a new catalog, tear down in the
// documented order. The test (scenario_test.go) runs every step with
// assertions; the demo command (e2e/cmd/demo) runs the same steps for a
// person.
//
// Providers: the local cluster (e2e/harness/localcluster + e2e/harness/olmlocal; the
// default, no Docker) and kind (where a Docker engine answers).
package scenario

import (
	"context"
	"io"

	"k8s.io/client-go/rest"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/olmv0local"
)

// Env is a cluster with OLM (v1, or v0 where OLMv0 is set) and a registry
// the cluster pulls from.
type Env struct {
	// Provider is "local" or "kind".
	Provider   string
	Kubeconfig string
	RESTConfig *rest.Config
	// Builder builds images whose references the cluster can pull, and
	// publishes them.
	Builder *Builder
	// GPUNodes maps nvidia.com/gpu.product to the node carrying it.
	GPUNodes map[string]string
	// StackOverrides are merged into the spec of every stack the scenario
	// applies (kind: images that can start without a GPU).
	StackOverrides map[string]any
	// RunDeployment stands in for the kubelet for a Deployment whose pods
	// the cluster only simulates (local provider); nil where pods really
	// run.
	RunDeployment func(ctx context.Context, namespace, name string) Runner
	// RealNode is the node where the operator's pods really run on the
	// local provider ("" on kind, where every node is real, and where the
	// local cluster has no real node).
	RealNode string
	// RealNodeSkipped says why the local cluster has no real node.
	RealNodeSkipped string
	// InspectContainer reads a container's process on the real node from
	// the host (uid, read-only root, memory cgroup); nil without one.
	InspectContainer func(containerID string) (*localcluster.ContainerProcess, error)
	// OLMv0 is OLM v0 where the environment runs it instead of OLM v1
	// (nil otherwise): the scenario's catalog, install and teardown steps
	// then speak OLM v0's objects (CatalogSource, Subscription, CSV).
	OLMv0 *olmv0local.OLM
	// Alive fails when a component the provider runs has died (checked by
	// every wait, so a crash ends it at once); may be nil.
	Alive func() error
	// Dump writes component logs (control plane, OLM, registry) to w.
	Dump func(w io.Writer)
	// Stop tears the environment down.
	Stop func(ctx context.Context) error
}

// Runner is what RunDeployment returns (olmlocal.DeploymentRunner).
type Runner interface {
	// Image is the image the running process came from ("" if none runs).
	Image() string
	// PID of the running process (0 if none).
	PID() int
	Events() []string
	LogFile() string
	Err() error
	Stop()
}
