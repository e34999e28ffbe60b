// Package controller wires helm-operator-plugins' Helm reconciler for the
// InferenceStack kind into a controller-runtime manager, with the major
// isolation and user-facing events this operator adds on top of it.
package controller

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/operator-framework/helm-operator-plugins/pkg/reconciler"
	"github.com/operator-framework/helm-operator-plugins/pkg/watches"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Options tune every watch; zero values keep what watches.yaml says.
type Options struct {
	// MaxConcurrentReconciles overrides the watches' concurrency when > 0.
	MaxConcurrentReconciles int
	// ReconcilePeriod overrides the watches' resync period when non-nil.
	ReconcilePeriod *time.Duration
	// MaxReleaseHistory bounds the Helm release Secrets kept per stack.
	MaxReleaseHistory int
}

// The InferenceStack RBAC this operator needs; controller-gen turns these
// markers into operator/rbac/role.yaml, the one source of the bundle's
// permissions.
//
// +kubebuilder:rbac:groups=models.takeoff.co,resources=inferencestacks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=models.takeoff.co,resources=inferencestacks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=models.takeoff.co,resources=inferencestacks/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
//
// What the inference-stack chart renders (and Helm reads back to diff):
//
// +kubebuilder:rbac:groups="",resources=configmaps;services;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ingresses,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=keda.sh,resources=scaledobjects,verbs=get;list;watch;create;update;patch;delete

// Setup registers one Helm reconciler per watch, plus the hand-off
// controller that lets go of stacks relabelled to another major.
func Setup(mgr ctrl.Manager, ws []watches.Watch, opts Options) error {
	for _, w := range ws {
		selector, err := metav1.LabelSelectorAsSelector(w.Selector)
		if err != nil {
			return fmt.Errorf("watch %s: selector: %w", w.Kind, err)
		}
		primary := &unstructured.Unstructured{}
		primary.SetGroupVersionKind(w.GroupVersionKind)

		recorder := mgr.GetEventRecorderFor(fmt.Sprintf("%s-operator", w.Kind))
		acg, err := newActionClientGetter(mgr, recorder)
		if err != nil {
			return fmt.Errorf("watch %s: %w", w.Kind, err)
		}

		period := w.ReconcilePeriod.Duration
		if opts.ReconcilePeriod != nil {
			period = *opts.ReconcilePeriod
		}
		concurrency := 1
		if w.MaxConcurrentReconciles != nil {
			concurrency = *w.MaxConcurrentReconciles
		}
		if opts.MaxConcurrentReconciles > 0 {
			concurrency = opts.MaxConcurrentReconciles
		}
		history := opts.MaxReleaseHistory
		if history <= 0 {
			history = 5
		}

		r, err := reconciler.New(
			reconciler.WithChart(*w.Chart),
			reconciler.WithGroupVersionKind(w.GroupVersionKind),
			reconciler.WithSelector(*w.Selector),
			reconciler.WithOverrideValues(w.OverrideValues),
			reconciler.SkipDependentWatches(!*w.WatchDependentResources),
			reconciler.WithMaxConcurrentReconciles(concurrency),
			reconciler.WithReconcilePeriod(period),
			reconciler.WithMaxReleaseHistory(history),
			reconciler.WithEventRecorder(recorder),
			reconciler.WithActionClientGetter(acg),
			// The reconcile path re-checks the label: even if a request for a
			// foreign stack is enqueued (dependent-resource events enqueue
			// owners by kind), reading it yields NotFound.
			reconciler.WithClient(newSelectorClient(mgr.GetClient(), w.GroupVersionKind, selector)),
			reconciler.WithLog(ctrl.Log.WithName("helm").WithName(w.Kind)),
		)
		if err != nil {
			return fmt.Errorf("watch %s: creating reconciler: %w", w.Kind, err)
		}
		if err := r.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("watch %s: setting up reconciler: %w", w.Kind, err)
		}
		if err := setupHandoff(mgr, primary, selector, recorder); err != nil {
			return fmt.Errorf("watch %s: setting up hand-off: %w", w.Kind, err)
		}
		ctrl.Log.WithName("setup").Info("reconciling", "kind", w.Kind, "selector", selector.String(),
			"maxConcurrentReconciles", concurrency, "reconcilePeriod", period.String())
	}
	return nil
}

// SetClientLimits sets the client-side rate limit of every client the
// operator builds from cfg (its own and Helm's). qps <= 0 turns client-side
// limiting off, as controller-runtime does by default: the API server's
// priority and fairness protects it, and client-go's fallback of 5 requests
// per second would make a burst of stacks wait on the operator itself.
func SetClientLimits(cfg *rest.Config, qps float64, burst int) {
	if qps <= 0 {
		cfg.QPS, cfg.Burst = -1, 0
		return
	}
	cfg.QPS = float32(qps)
	cfg.Burst = max(burst, int(qps))
}

// Selector returns the label selector of the watch for gvk, for callers that
// restrict the manager's cache before the controllers exist.
func Selector(w watches.Watch) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(w.Selector)
}

// CacheOptions restricts what the operator caches, which is most of its
// memory: only the stacks its selector matches (so a foreign stack is
// invisible, not merely ignored), only Helm's release Secrets, and only
// Helm-managed objects of the kinds it watches as dependents.
func CacheOptions(ws []watches.Watch, namespaces string) (cache.Options, error) {
	opts := cache.Options{
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{"app.kubernetes.io/managed-by": "Helm"}),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Label: labels.SelectorFromSet(labels.Set{"owner": "helm"})},
		},
	}
	for _, w := range ws {
		sel, err := Selector(w)
		if err != nil {
			return opts, fmt.Errorf("watch %s: %w", w.Kind, err)
		}
		if sel.Empty() {
			return opts, errors.New("watch " + w.Kind + ": an empty selector would reconcile every major's stacks")
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(w.GroupVersionKind)
		opts.ByObject[u] = cache.ByObject{Label: sel}
	}
	if namespaces != "" {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range strings.Split(namespaces, ",") {
			if ns = strings.TrimSpace(ns); ns != "" {
				opts.DefaultNamespaces[ns] = cache.Config{}
			}
		}
	}
	return opts, nil
}
