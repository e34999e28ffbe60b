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

	helmwatches "github.com/operator-framework/helm-operator-plugins/pkg/watches"
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
	pprofAddr               string
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
	zap                     zap.Options // the --zap-* logging flags
}

// defaultGCPercent is the garbage collector's target when GOGC is not set.
// Most of the operator's heap is its informer caches, which live as long as
// the process; Go's default (100) lets the heap grow to twice that before
// collecting. Half that headroom keeps the settled footprint within what
// the memory goals ask (make bench's 500 own + 500 foreign stacks: 0.57×
// the stock operator's RSS at 50, 0.62× at 100); the extra collection in a
// burst did not show in the operator's CPU per stack (make bench-curve).
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
	if err := cfg.parse(args, major); err != nil {
		return err
	}
	if cfg.showVersion {
		fmt.Printf("inference-stack-operator %s (commit %s, reconciles operatorVersion=%s)\n", version.Get(), version.GitCommit, major)
		return nil
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&cfg.zap)))
	log := ctrl.Log.WithName("setup")

	ws, err := loadWatches(cfg.watchesFile, major)
	if err != nil {
		return err
	}
	restCfg, err := restConfig(cfg.qps, cfg.burst)
	if err != nil {
		return err
	}
	opts := cfg.controllerOptions()
	mgr, err := newManager(&cfg, restCfg, ws, opts)
	if err != nil {
		return err
	}
	if err := register(mgr, ws, opts); err != nil {
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

// parse reads the command line into c; the default Lease name carries the
// major.
func (c *config) parse(args []string, major string) error {
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	fs.StringVar(&c.metricsAddr, "metrics-bind-address", ":8443", "address of the metrics endpoint (\"0\" disables it)")
	fs.BoolVar(&c.metricsSecure, "metrics-secure", true, "serve metrics over HTTPS, authenticated and authorized through the API server")
	fs.StringVar(&c.probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz probes")
	fs.StringVar(&c.pprofAddr, "pprof-bind-address", "", "address of Go's /debug/pprof profiles, unauthenticated: bind it to loopback (default: off)")
	fs.BoolVar(&c.leaderElect, "leader-elect", false, "elect a leader so only one replica reconciles")
	fs.StringVar(&c.leaderElectionID, "leader-election-id", inferencestack.LeaseID(major), "name of the leader-election Lease; it carries the major so two majors never share one, and the other majors' operators find this one alive by it: keep the default when several majors share a cluster")
	fs.StringVar(&c.leaderElectionNamespace, "leader-election-namespace", "", "namespace of the Lease (default: the pod's namespace): keep the install namespace, where the other majors' operators look for it")
	fs.StringVar(&c.watchesFile, "watches-file", "", "a watches.yaml to use instead of the embedded one")
	fs.StringVar(&c.watchNamespaces, "watch-namespaces", os.Getenv("WATCH_NAMESPACE"), "comma-separated namespaces to reconcile (default: all; env WATCH_NAMESPACE)")
	fs.IntVar(&c.maxConcurrentReconciles, "max-concurrent-reconciles", 0, "stacks reconciled in parallel (default: watches.yaml)")
	fs.DurationVar(&c.reconcilePeriod, "reconcile-period", -1, "periodic resync of every stack, 0 to disable (default: watches.yaml)")
	fs.IntVar(&c.maxReleaseHistory, "max-release-history", 5, "Helm release revisions kept per stack")
	fs.Float64Var(&c.qps, "kube-api-qps", 0, "client-side rate limit towards the API server in queries per second; 0 leaves it to the server's priority and fairness")
	fs.IntVar(&c.burst, "kube-api-burst", 0, "client-side burst towards the API server (with --kube-api-qps)")
	fs.DurationVar(&c.resyncPeriod, "resync-period", controller.DefaultResyncPeriod, "how often every stack is reconciled again whatever the events, the safety net that repairs tampering no event announces")
	fs.DurationVar(&c.unclaimedGrace, "unclaimed-grace", controller.DefaultUnclaimedGrace, "how long a stack labelled for another major may go unclaimed before this operator reports that no operator of that major reconciles it")
	fs.DurationVar(&c.claimGrace, "claim-grace", controller.DefaultClaimGrace, "how long another major's operator may be gone (its leader-election Lease unrenewed) before this operator voids its claims, so its stacks can be deleted")
	fs.DurationVar(&c.foreignPendingGrace, "foreign-pending-grace", controller.DefaultForeignPendingGrace, "how long a release revision left pending by a writer other than an operator (helm upgrade, helm rollback) is waited for before it is marked failed and the stack rolls forward")
	fs.StringVar(&c.upgradeWave, "upgrade-wave", controller.DefaultUpgradeWave, "how many stacks (a number, or a percentage of this operator's stacks) an upgrade caused by this operator's own chart (a new default image or setting, not a change of the stack) may roll at a time; the next go when those have rolled out")
	fs.DurationVar(&c.gracefulShutdown, "graceful-shutdown-timeout", 30*time.Second, "on SIGTERM, how long in-flight reconciles (Helm operations) may run to completion before the process exits; keep it below the pod's termination grace period")
	fs.DurationVar(&c.leaseDuration, "leader-election-lease-duration", 15*time.Second, "how long a replica waits before taking over a lease its holder stopped renewing")
	fs.DurationVar(&c.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "how long the leader retries renewing its lease before it stops reconciling; must be shorter than the lease duration")
	fs.DurationVar(&c.retryPeriod, "leader-election-retry-period", 2*time.Second, "how often replicas try to acquire or renew the lease")
	fs.BoolVar(&c.showVersion, "version", false, "print the version and exit")
	ctrlconfig.RegisterFlags(fs) // --kubeconfig
	c.zap.BindFlags(fs)
	return fs.Parse(args)
}

// loadWatches reads the watches: the embedded watches.yaml unless file
// names another.
func loadWatches(file, major string) ([]helmwatches.Watch, error) {
	watchData := watches.Default
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("reading watches: %w", err)
		}
		watchData = b
	}
	return watches.Load(watchData, major, watches.Charts{"inference-stack": inferencestackchart.Load})
}

// restConfig is the API server's client configuration, with the
// operator's client-side limits and user agent.
func restConfig(qps float64, burst int) (*rest.Config, error) {
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	controller.SetClientLimits(restCfg, qps, burst)
	restCfg.UserAgent = "inference-stack-operator/" + version.Get()
	return restCfg, nil
}

// controllerOptions are what the flags say of the stacks' controllers.
func (c *config) controllerOptions() controller.Options {
	opts := controller.Options{
		MaxConcurrentReconciles: c.maxConcurrentReconciles,
		MaxReleaseHistory:       c.maxReleaseHistory,
		Version:                 version.Get(),
		Namespaces:              c.watchNamespaces,
		ResyncPeriod:            c.resyncPeriod,
		UnclaimedGrace:          c.unclaimedGrace,
		ClaimGrace:              c.claimGrace,
		ForeignPendingGrace:     c.foreignPendingGrace,
		UpgradeWave:             c.upgradeWave,
		MajorLease:              inferencestack.LeaseID,
	}
	// The flag's default (-1) keeps what watches.yaml says.
	if c.reconcilePeriod >= 0 {
		opts.ReconcilePeriod = &c.reconcilePeriod
	}
	return opts
}

// metricsOptions are the metrics endpoint's.
func (c *config) metricsOptions() metricsserver.Options {
	opts := metricsserver.Options{
		BindAddress:   c.metricsAddr,
		SecureServing: c.metricsSecure,
		// HTTP/2 is off: it is exposed to the stream-reset and rapid-reset
		// denial-of-service attacks, and the metrics endpoint gains nothing.
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	}
	if c.metricsSecure {
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return opts
}

// fenceLeaderElection makes sure that, with leader election, no write
// leaves this process unless it still holds the lease (see internal/fence):
// the leader election's own client, whose configuration it returns,
// observes the renewals; every client built from restCfg is guarded.
// Without leader election it returns nil and leaves restCfg as it is.
func fenceLeaderElection(restCfg *rest.Config, leaderElect bool, renewDeadline time.Duration) *rest.Config {
	if !leaderElect {
		return nil
	}
	f := fence.New(renewDeadline)
	leaderCfg := rest.CopyConfig(restCfg)
	f.ObserveLease(leaderCfg)
	f.Guard(restCfg)
	return leaderCfg
}

// Leader election reads, creates and renews this operator's own Lease
// (client-go's LeaseLock) in the namespace it runs in, and nowhere else:
// get, create and update, no list, watch, patch or delete. The grant is
// cluster-wide: OLM installs the operator for all namespaces, and then
// grants a CSV's namespaced permissions cluster-wide too (and needs its
// installer to hold them so), so a Role of the install namespace would
// narrow nothing.
//
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update

// newManager builds the manager: a cache of what the watches need, the
// metrics endpoint, the probes' address and a fenced leader election.
func newManager(cfg *config, restCfg *rest.Config, ws []helmwatches.Watch, opts controller.Options) (ctrl.Manager, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cacheOpts, err := controller.CacheOptions(ws, opts)
	if err != nil {
		return nil, err
	}
	leaderCfg := fenceLeaderElection(restCfg, cfg.leaderElect, cfg.renewDeadline)
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cacheOpts,
		Metrics:                 cfg.metricsOptions(),
		HealthProbeBindAddress:  cfg.probeAddr,
		PprofBindAddress:        cfg.pprofAddr,
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
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	return mgr, nil
}

// register adds the stacks' controllers and the health probes to mgr.
func register(mgr ctrl.Manager, ws []helmwatches.Watch, opts controller.Options) error {
	if err := controller.Setup(mgr, ws, opts); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("readyz", healthz.Ping)
}
