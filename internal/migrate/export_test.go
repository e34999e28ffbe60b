package migrate

import (
	"context"
	"io"

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
