package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/olmlocal"
)

// LocalOptions configure StartLocal.
type LocalOptions struct {
	// Dir holds the cluster, OLM's and the builder's work directories.
	// Default: a new temporary directory, removed by Env.Stop.
	Dir string
	// Inputs are what the image builder builds from; default
	// BuildInputs() (when Inputs.Root is empty).
	Inputs Inputs
	Log    io.Writer
	// WarmVersion, if set, compiles the operator at that version while the
	// environment starts (Builder.Warm).
	WarmVersion string
}

// CheckLocal says why the local provider cannot run here, or nil: it needs
// a real node, or else the host-process runner's privileges.
func CheckLocal() error {
	if localcluster.CheckRealNode() == nil {
		return nil
	}
	return olmlocal.CheckHostProcessSupport()
}

// StartLocal starts the local provider: a real control plane with KWOK GPU
// nodes and, where the machine can run one, a real node (e2e/harness/localcluster),
// OLM v1 and a TLS registry on the address the node reaches
// (e2e/harness/olmlocal). The operator's pods then really run on the real node,
// pulled from the registry; without one, the harness runs the operator
// binary from its image as a host process. Images are pushed by the
// project's build, trusting the registry's CA.
func StartLocal(ctx context.Context, o LocalOptions) (_ *Env, err error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if err := CheckLocal(); err != nil {
		return nil, err
	}
	own := false
	if o.Dir == "" {
		if o.Dir, err = os.MkdirTemp("", "e2e-local-"); err != nil {
			return nil, fmt.Errorf("creating the work directory: %w", err)
		}
		own = true
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the work directory: %w", err)
	}
	// OLM's controllers run as uid 65532 and must reach their directories.
	if err := os.Chmod(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("opening the work directory to OLM's controllers: %w", err)
	}
	if o.Inputs.Root == "" {
		if o.Inputs, err = BuildInputs(); err != nil {
			return nil, err
		}
	}
	b := o.Inputs.builder(filepath.Join(o.Dir, "images"), o.Log)
	if o.WarmVersion != "" {
		// On a first run the cluster's and OLM's binaries take minutes to
		// build; compile the operator meanwhile (errors show again, with
		// context, when the scenario builds for real).
		go func() {
			if err := b.Warm(ctx, o.WarmVersion); err != nil {
				fmt.Fprintf(o.Log, "warming the image build: %v\n", err)
			}
		}()
	}
	c, err := localcluster.Start(ctx, localcluster.Options{Dir: filepath.Join(o.Dir, "cluster"), Log: o.Log, RealNode: localcluster.RealNodeAuto})
	if err != nil {
		return nil, err
	}
	olm, err := olmlocal.Start(ctx, c.RESTConfig(), OLMOptions(c, filepath.Join(o.Dir, "olm"), o.Log))
	if err != nil {
		_ = c.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	b.Registry = olm.Registry.Addr + "/tytn"
	b.RegistryCAFile = olm.CAFile
	return localEnv(c, olm, b, o, own), nil
}

func localEnv(c *localcluster.Cluster, olm *olmlocal.OLM, b *Builder, o LocalOptions, ownDir bool) *Env {
	var runners []*olmlocal.DeploymentRunner
	env := &Env{
		Provider:   "local",
		Kubeconfig: c.Kubeconfig(),
		RESTConfig: c.RESTConfig(),
		Builder:    b,
		GPUNodes: map[string]string{
			localcluster.ProductRTX3060: "gpu-rtx3060",
			localcluster.ProductH100:    "gpu-h100",
		},
		RunDeployment: func(ctx context.Context, namespace, name string) Runner {
			r := olm.RunDeployment(ctx, namespace, name)
			runners = append(runners, r)
			return r
		},
		Alive: olm.Alive,
		Dump: func(w io.Writer) {
			olm.DumpLogs(w, 60)
			for _, r := range runners {
				fmt.Fprintf(w, "==== operator %s/%s (runner events, then the last lines of %s) ====\n", r.Namespace, r.Name, r.LogFile())
				for _, e := range r.Events() {
					fmt.Fprintln(w, e)
				}
				if err := r.Err(); err != nil {
					fmt.Fprintf(w, "last error: %v\n", err)
				}
				fmt.Fprintln(w, tailFile(r.LogFile(), 60))
			}
			c.DumpLogs(w, 30)
		},
		Stop: func(ctx context.Context) error {
			for _, r := range runners {
				r.Stop()
			}
			errs := []error{olm.Stop(ctx), c.Stop(ctx)}
			if left := c.RealNodeLeftovers(); len(left) > 0 {
				errs = append(errs, fmt.Errorf("the real node left behind: %s", strings.Join(left, "; ")))
			}
			if ownDir {
				errs = append(errs, os.RemoveAll(o.Dir))
			}
			return errors.Join(errs...)
		},
	}
	RealNodeEnv(env, c)
	return env
}

// OLMOptions are the options of OLM on the local cluster c: as pods on its
// real node, pulled from a registry the node trusts, if it has one; as host
// processes otherwise.
func OLMOptions(c *localcluster.Cluster, dir string, log io.Writer) olmlocal.Options {
	return olmlocal.Options{
		Dir:          dir,
		Log:          log,
		RegistryHost: c.NodeAddress(),
		Pods:         c.HasRealNode(),
		Cluster:      c,
		OnRegistry:   c.TrustRegistry,
	}
}

// RealNodeEnv makes env run the operator's pods on c's real node, if it has
// one: no host-process runner, the node's name and container inspection
// for the runtime checks, and the gateways' image replaced by the node's
// own pause image (the Takeoff images are not available here; readers stay
// on the simulated GPU nodes, where no image is pulled).
func RealNodeEnv(env *Env, c *localcluster.Cluster) {
	if !c.HasRealNode() {
		env.RealNodeSkipped = c.RealNodeSkipped()
		return
	}
	env.RunDeployment = nil
	env.RealNode = localcluster.RealNodeName
	env.InspectContainer = c.InspectContainer
	repo, tag, _ := strings.Cut(localcluster.PauseImage, ":")
	env.StackOverrides = map[string]any{"gateway": map[string]any{"image": map[string]any{"repository": repo, "tag": tag}}}
}
