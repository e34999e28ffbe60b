package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/internal/migrate"
)

const migrateUsage = `usage: isctl migrate [flags] <name>

Moves ModelOrchestra <name> (models.titanml.co/v1alpha1) onto an
InferenceStack of the same name (models.takeoff.co/v1alpha1) that the
operator of -operator-version takes over: same Helm release, same objects,
same pods. It first prints what it will do, which Deployments keep their
pods, and which pod-template fields differ from what the inference-stack
chart renders (they reach the pods when these are next replaced); it
changes nothing when something would delete or restart a workload, or with
-dry-run. Stop the Model Orchestra operator first if you can; the
migration removes the ModelOrchestra without its uninstall either way.

Flags:
`

func cmdMigrate(fs *flag.FlagSet) action {
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
	kubeContext := fs.String("context", "", "kubeconfig context (default: the current one)")
	namespace := fs.String("namespace", "", "namespace of the ModelOrchestra (default: the context's, else default)")
	major, _ := inferencestack.MajorOf(inferencestack.Version())
	operatorVersion := fs.String("operator-version", major, "major of the operator that takes the stack over: the InferenceStack's operatorVersion label")
	rollout := fs.Bool("rollout", false, "apply the new pod templates now with one rolling update per Deployment, instead of keeping the running pods")
	dryRun := fs.Bool("dry-run", false, "print the plan and change nothing")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long to wait for the operator to take the stack over")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) != 1 {
			fs.Usage()
			return errors.New("migrate takes the name of one ModelOrchestra")
		}
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = *kubeconfig
		loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: *kubeContext})
		cfg, err := loader.ClientConfig()
		if err != nil {
			return fmt.Errorf("loading the kubeconfig: %w", err)
		}
		ns := *namespace
		if ns == "" {
			if ns, _, err = loader.Namespace(); err != nil {
				return fmt.Errorf("reading the kubeconfig's namespace: %w", err)
			}
		}
		opts := migrate.Options{
			Namespace: ns, Name: args[0], OperatorVersion: *operatorVersion,
			Rollout: *rollout, Timeout: *timeout, Log: stdout,
		}
		plan, err := migrate.NewPlan(ctx, cfg, opts)
		if err != nil {
			return err
		}
		plan.Print(stdout)
		if len(plan.Blockers) > 0 {
			return fmt.Errorf("not migrated: %d problem(s) above", len(plan.Blockers))
		}
		if *dryRun {
			fmt.Fprintln(stdout, "Dry run: nothing changed.")
			return nil
		}
		res, err := migrate.Run(ctx, cfg, plan)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Migrated: InferenceStack %s/%s, %d pod(s) kept, %d replaced.\n", ns, res.Stack.GetName(), res.KeptPods, res.ReplacedPods)
		return nil
	}
}
