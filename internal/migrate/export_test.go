package migrate

import (
	"context"
	"io"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
)

// KeepPods runs the step of Run that hands a paused Deployment's pods to
// its new pod template and resumes it, on its own.
func KeepPods(ctx context.Context, cfg *rest.Config, namespace string, d *DeploymentPlan) error {
	c, err := newClients(cfg)
	if err != nil {
		return err
	}
	r := &runner{clients: c, p: &Plan{opts: Options{Namespace: namespace}}, log: io.Discard}
	return r.keepPods(ctx, d)
}

// PlanDeployment is Plan's comparison of one live Deployment with the one
// the chart renders.
func PlanDeployment(ctx context.Context, cfg *rest.Config, live *appsv1.Deployment, rendered *unstructured.Unstructured) (*DeploymentPlan, []string, error) {
	c, err := newClients(cfg)
	if err != nil {
		return nil, nil, err
	}
	return c.planDeployment(ctx, live, rendered)
}
