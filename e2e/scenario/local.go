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
	// OLM is the generation of OLM the environment runs: "v1" (the
	// default) or "v0" (OLM v0's operators as pods, which needs the real
	// node).
	OLM string
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

// CheckLocal says why the local provider cannot run OLM generation olm
// ("v1" or "v0") here, or nil: OLM v1 needs a real node or else the
// host-process runner's privileges; OLM v0 needs the real node.
func CheckLocal(olm string) error {
	if olm == "v0" {
		return checkOLMv0()
	}
	if localcluster.CheckRealNode() == nil {
		return nil
	}
	return olmlocal.CheckHostProcessSupport()
}

// StartLocal starts the local provider: a real control plane with KWOK GPU
// nodes and, where the machine can run one, a real node (e2e/harness/localcluster),
// OLM and a TLS registry on the address the node reaches. OLM v1
// (e2e/harness/olmlocal) runs as pods on the real node, or else as host
// processes, and the harness then runs the operator binary from its image
// as a host process too; OLM v0 (e2e/harness/olmv0local) always runs as
// pods on the real node. Images are pushed by the project's build,
// trusting the registry's CA.
func StartLocal(ctx context.Context, o LocalOptions) (_ *Env, err error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	v0 := o.OLM == "v0"
	if !v0 && o.OLM != "" && o.OLM != "v1" {
		return nil, fmt.Errorf("OLM %q: want v1 or v0", o.OLM)
	}
	if err := CheckLocal(o.OLM); err != nil {
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
	realNode := localcluster.RealNodeAuto
	if v0 {
		realNode = localcluster.RealNodeRequired
	}
	c, err := localcluster.Start(ctx, localcluster.Options{Dir: filepath.Join(o.Dir, "cluster"), Log: o.Log, RealNode: realNode})
	if err != nil {
		return nil, err
	}
	stop := func(ctx context.Context, first ...error) error {
		errs := append(first, c.Stop(ctx))
		if left := c.RealNodeLeftovers(); len(left) > 0 {
			errs = append(errs, fmt.Errorf("the real node left behind: %s", strings.Join(left, "; ")))
		}
		if own {
			errs = append(errs, os.RemoveAll(o.Dir))
		}
		return errors.Join(errs...)
	}
	var env *Env
	if v0 {
		env, err = startOLMv0(ctx, c, b, o.Dir, o.Log, stop)
	} else {
		env, err = startOLMv1(ctx, c, b, o.Dir, o.Log, stop)
	}
	if err != nil {
		_ = c.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	RealNodeEnv(env, c)
	return env, nil
}

// localGPUNodes are the local cluster's GPU nodes by product.
func localGPUNodes() map[string]string {
	return map[string]string{
		localcluster.ProductRTX3060: "gpu-rtx3060",
		localcluster.ProductH100:    "gpu-h100",
	}
}

// startOLMv1 starts OLM v1 on c, with its registry, and describes the
// environment; stop tears c down after what this started.
func startOLMv1(ctx context.Context, c *localcluster.Cluster, b *Builder, dir string, log io.Writer, stop func(context.Context, ...error) error) (*Env, error) {
	olm, err := olmlocal.Start(ctx, c.RESTConfig(), OLMOptions(c, filepath.Join(dir, "olm"), log))
	if err != nil {
		return nil, err
	}
	b.Registry = olm.Registry.Addr + "/tytn"
	b.RegistryCAFile = olm.CAFile
	var runners []*olmlocal.DeploymentRunner
	return &Env{
		Provider:   "local",
		Kubeconfig: c.Kubeconfig(),
		RESTConfig: c.RESTConfig(),
		Builder:    b,
		GPUNodes:   localGPUNodes(),
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
				fmt.Fprintln(w, r.Tail(60))
			}
			c.DumpLogs(w, 30)
		},
		Stop: func(ctx context.Context) error {
			for _, r := range runners {
				r.Stop()
			}
			return stop(ctx, olm.Stop(ctx))
		},
	}, nil
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
