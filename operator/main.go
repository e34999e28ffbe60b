// Command operator reconciles InferenceStacks labelled for its major version
// by templating the embedded inference-stack chart with Helm.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	inferencestack "github.com/titanml/inference-stack-operator"
	inferencestackchart "github.com/titanml/inference-stack-operator/charts/inference-stack"
	"github.com/titanml/inference-stack-operator/operator/internal/controller"
	"github.com/titanml/inference-stack-operator/operator/internal/fence"
	"github.com/titanml/inference-stack-operator/operator/internal/version"
	"github.com/titanml/inference-stack-operator/operator/internal/watches"
)

type config struct {
	metricsAddr             string
	metricsSecure           bool
	probeAddr               string
	leaderElect             bool
	leaderElectionID        string
	leaderElectionNamespace string
	watchesFile             string
	watchNamespaces         string
	maxConcurrentReconciles int
	reconcilePeriod         time.Duration
	maxReleaseHistory       int
	qps                     float64
	burst                   int
	resyncPeriod            time.Duration
	unclaimedGrace          time.Duration
	claimGrace              time.Duration
	foreignPendingGrace     time.Duration
	upgradeWave             string
	gracefulShutdown        time.Duration
	leaseDuration           time.Duration
	renewDeadline           time.Duration
	retryPeriod             time.Duration
	showVersion             bool
}

// defaultGCPercent is the garbage collector's target when GOGC is not set.
// Most of the operator's heap is its informer caches, which live as long as
// the process; Go's default (100) lets the heap grow to twice that before
// collecting. Half that headroom makes the settled footprint smaller for a
// little more collection work during bursts of reconciles, which wait on
// the API server rather than the CPU (make bench measures both).
const defaultGCPercent = 50

func main() {
	setGCPercent(os.LookupEnv)
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "operator:", err)
		os.Exit(1)
	}
}

// setGCPercent applies defaultGCPercent unless GOGC is set, so a user can
// still choose (GOGC in the Subscription's or the Deployment's env).
func setGCPercent(lookupEnv func(string) (string, bool)) {
	if _, set := lookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
}

func run(args []string) error {
	major := version.Major()
	var cfg config
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	fs.StringVar(&cfg.metricsAddr, "metrics-bind-address", ":8443", "address of the metrics endpoint (\"0\" disables it)")
	fs.BoolVar(&cfg.metricsSecure, "metrics-secure", true, "serve metrics over HTTPS, authenticated and authorized through the API server")
	fs.StringVar(&cfg.probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz probes")
	fs.BoolVar(&cfg.leaderElect, "leader-elect", false, "elect a leader so only one replica reconciles")
	fs.StringVar(&cfg.leaderElectionID, "leader-election-id", inferencestack.LeaseID(major), "name of the leader-election Lease; it carries the major so two majors never share one, and the other majors' operators find this one alive by it: keep the default when several majors share a cluster")
	fs.StringVar(&cfg.leaderElectionNamespace, "leader-election-namespace", "", "namespace of the Lease (default: the pod's namespace)")
	fs.StringVar(&cfg.watchesFile, "watches-file", "", "a watches.yaml to use instead of the embedded one")
	fs.StringVar(&cfg.watchNamespaces, "watch-namespaces", os.Getenv("WATCH_NAMESPACE"), "comma-separated namespaces to reconcile (default: all; env WATCH_NAMESPACE)")
	fs.IntVar(&cfg.maxConcurrentReconciles, "max-concurrent-reconciles", 0, "stacks reconciled in parallel (default: watches.yaml)")
	fs.DurationVar(&cfg.reconcilePeriod, "reconcile-period", -1, "periodic resync of every stack, 0 to disable (default: watches.yaml)")
	fs.IntVar(&cfg.maxReleaseHistory, "max-release-history", 5, "Helm release revisions kept per stack")
	fs.Float64Var(&cfg.qps, "kube-api-qps", 0, "client-side rate limit towards the API server in queries per second; 0 leaves it to the server's priority and fairness")
	fs.IntVar(&cfg.burst, "kube-api-burst", 0, "client-side burst towards the API server (with --kube-api-qps)")
	fs.DurationVar(&cfg.resyncPeriod, "resync-period", controller.DefaultResyncPeriod, "how often every stack is reconciled again whatever the events, the safety net that repairs tampering no event announces")
	fs.DurationVar(&cfg.unclaimedGrace, "unclaimed-grace", controller.DefaultUnclaimedGrace, "how long a stack labelled for another major may go unclaimed before this operator reports that no operator of that major reconciles it")
	fs.DurationVar(&cfg.claimGrace, "claim-grace", controller.DefaultClaimGrace, "how long another major's operator may be gone (its leader-election Lease unrenewed) before this operator voids its claims, so its stacks can be deleted")
	fs.DurationVar(&cfg.foreignPendingGrace, "foreign-pending-grace", controller.DefaultForeignPendingGrace, "how long a release revision left pending by a writer other than an operator (helm upgrade, helm rollback) is waited for before it is marked failed and the stack rolls forward")
	fs.StringVar(&cfg.upgradeWave, "upgrade-wave", controller.DefaultUpgradeWave, "how many stacks (a number, or a percentage of this operator's stacks) an upgrade caused by this operator's own chart (a new default image or setting, not a change of the stack) may roll at a time; the next go when those have rolled out")
	fs.DurationVar(&cfg.gracefulShutdown, "graceful-shutdown-timeout", 30*time.Second, "on SIGTERM, how long in-flight reconciles (Helm operations) may run to completion before the process exits; keep it below the pod's termination grace period")
	fs.DurationVar(&cfg.leaseDuration, "leader-election-lease-duration", 15*time.Second, "how long a replica waits before taking over a lease its holder stopped renewing")
	fs.DurationVar(&cfg.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "how long the leader retries renewing its lease before it stops reconciling; must be shorter than the lease duration")
	fs.DurationVar(&cfg.retryPeriod, "leader-election-retry-period", 2*time.Second, "how often replicas try to acquire or renew the lease")
	fs.BoolVar(&cfg.showVersion, "version", false, "print the version and exit")
	ctrlconfig.RegisterFlags(fs) // --kubeconfig
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.showVersion {
		fmt.Printf("inference-stack-operator %s (commit %s, reconciles operatorVersion=%s)\n", version.Get(), version.GitCommit, major)
		return nil
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	watchData := watches.Default
	if cfg.watchesFile != "" {
		b, err := os.ReadFile(cfg.watchesFile)
		if err != nil {
			return fmt.Errorf("reading watches: %w", err)
		}
		watchData = b
	}
	ws, err := watches.Load(watchData, major, watches.Charts{"inference-stack": inferencestackchart.Load})
	if err != nil {
		return err
	}

	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	controller.SetClientLimits(restCfg, cfg.qps, cfg.burst)
	restCfg.UserAgent = "inference-stack-operator/" + version.Get()

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}

	opts := controller.Options{
		MaxConcurrentReconciles: cfg.maxConcurrentReconciles,
		MaxReleaseHistory:       cfg.maxReleaseHistory,
		Version:                 version.Get(),
		Namespaces:              cfg.watchNamespaces,
		ResyncPeriod:            cfg.resyncPeriod,
		UnclaimedGrace:          cfg.unclaimedGrace,
		ClaimGrace:              cfg.claimGrace,
		ForeignPendingGrace:     cfg.foreignPendingGrace,
		UpgradeWave:             cfg.upgradeWave,
		MajorLease:              inferencestack.LeaseID,
	}
	if cfg.reconcilePeriod >= 0 {
		opts.ReconcilePeriod = &cfg.reconcilePeriod
	}
	cacheOpts, err := controller.CacheOptions(ws, opts)
	if err != nil {
		return err
	}

	metricsOpts := metricsserver.Options{
		BindAddress:   cfg.metricsAddr,
		SecureServing: cfg.metricsSecure,
		// HTTP/2 is off: it is exposed to the stream-reset and rapid-reset
		// denial-of-service attacks, and the metrics endpoint gains nothing.
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	}
	if cfg.metricsSecure {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}

	// With leader election, no write leaves this process unless it still
	// holds the lease (see internal/fence): the leader election's own
	// client observes the renewals, every other client is guarded.
	var leaderCfg *rest.Config
	if cfg.leaderElect {
		f := fence.New(cfg.renewDeadline)
		leaderCfg = rest.CopyConfig(restCfg)
		f.ObserveLease(leaderCfg)
		f.Guard(restCfg)
	}

	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cacheOpts,
		Metrics:                 metricsOpts,
		HealthProbeBindAddress:  cfg.probeAddr,
		LeaderElection:          cfg.leaderElect,
		LeaderElectionID:        cfg.leaderElectionID,
		LeaderElectionNamespace: cfg.leaderElectionNamespace,
		LeaderElectionConfig:    leaderCfg,
		LeaseDuration:           &cfg.leaseDuration,
		RenewDeadline:           &cfg.renewDeadline,
		RetryPeriod:             &cfg.retryPeriod,
		// On SIGTERM the manager stops taking work, lets in-flight
		// reconciles finish their Helm operations (so no release is left
		// pending), then releases the lease so the next leader starts at
		// once instead of after the lease duration.
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &cfg.gracefulShutdown,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}

	if err := controller.Setup(mgr, ws, opts); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}

	if !cfg.leaderElect {
		log.Info("leader election is off: this operator renews no Lease, so the operators of other majors take it for gone after --claim-grace and void its claims; run every major with --leader-elect when several share a cluster")
	}
	log.Info("starting", "version", version.Get(), "commit", version.GitCommit, "major", major,
		"leaderElectionID", cfg.leaderElectionID, "namespaces", cfg.watchNamespaces)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}
