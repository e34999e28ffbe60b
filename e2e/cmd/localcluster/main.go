// Command localcluster starts and stops the local KWOK-backed Kubernetes
// cluster of package e2e/harness/localcluster outside of tests, for `make demo` and
// for poking at the cluster by hand. Run it from inside the repository (it
// finds the binary wrapper modules from the working directory).
//
//	localcluster build              build and cache the binaries (first run ~6 min)
//	localcluster up --dir D         start a cluster in D, print `export KUBECONFIG=…`, return
//	localcluster status --dir D     list the running components and their memory
//	localcluster down --dir D       stop the cluster in D and wait for its processes
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: localcluster build | up --dir D | status --dir D | down --dir D")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	dir := fs.String("dir", "", "work directory of the cluster (required for up, status, down)")
	name := fs.String("name", localcluster.DefaultName, "cluster name (up)")
	noScheduler := fs.Bool("without-scheduler", false, "do not start kube-scheduler (up)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Progress to stderr so stdout carries only the export line of `up`,
	// usable as eval "$(localcluster up --dir D)".
	log := os.Stderr

	if args[0] != "build" && *dir == "" {
		return fmt.Errorf("%s: --dir is required", args[0])
	}
	switch args[0] {
	case "build":
		bins, err := localcluster.EnsureBinaries(ctx, log)
		if err != nil {
			return err
		}
		// The real node's too, wherever a real node can run.
		if localcluster.CheckRealNode() == nil {
			if bins.Kubelet, bins.KubeProxy, err = localcluster.EnsureNodeBinaries(ctx, log); err != nil {
				return err
			}
		}
		fmt.Fprintf(log, "binaries: %+v\n", *bins)
		return nil
	case "up":
		c, err := localcluster.Start(ctx, localcluster.Options{
			Name:             *name,
			Dir:              *dir,
			Log:              log,
			WithoutScheduler: *noScheduler,
		})
		if err != nil {
			return err
		}
		// The components run detached from this process (kwokctl's binary
		// runtime), so returning leaves the cluster up until `down`.
		fmt.Printf("export KUBECONFIG=%s\n", c.Kubeconfig())
		return nil
	case "status":
		c, err := localcluster.Attach(*dir, log)
		if err != nil && !errors.Is(err, localcluster.ErrNotRunning) {
			return err
		}
		if err != nil {
			fmt.Println(err)
		}
		var total int64
		for _, p := range c.Processes() {
			fmt.Printf("%-24s pid %-7d RSS %5d MiB\n", p.Name, p.PID, p.RSSBytes>>20)
			total += p.RSSBytes
		}
		fmt.Printf("%-24s %11s RSS %5d MiB\nexport KUBECONFIG=%s\n", "total", "", total>>20, c.Kubeconfig())
		return nil
	case "down":
		c, err := localcluster.Attach(*dir, log)
		if errors.Is(err, os.ErrNotExist) {
			// Idempotent, so `make down` can always run.
			fmt.Fprintf(log, "no local cluster in %s\n", *dir)
			return nil
		}
		if err != nil && !errors.Is(err, localcluster.ErrNotRunning) {
			return err
		}
		// A cluster that is not (fully) running is still cleaned up.
		if err := c.Stop(ctx); err != nil {
			return err
		}
		fmt.Fprintf(log, "local cluster in %s stopped\n", *dir)
		return nil
	default:
		return fmt.Errorf("unknown command %q (want build, up, status or down)", args[0])
	}
}
