package controller

import (
	"context"
	"fmt"

	helmclient "github.com/operator-framework/helm-operator-plugins/pkg/client"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/titanml/inference-stack-operator/operator/helmrecord"
)

// releaseStorage is the storage of a stack's Helm releases: Secrets in the
// stack's namespace, with the stack as the controller owner of every record
// (as helm-operator-plugins' default storage has it), read and written by
// operator/helmrecord: every record bounded before it is decoded (whoever
// may edit the namespace may write Secrets labelled as the stack's release,
// and Helm's own driver would inflate each with no bound), every record
// compressed by a pooled writer.
//
// Every record is signed with the key of the operator's major and read
// back only if it verifies (see helmrecord's signature.go): keys finds the
// keys.
func releaseStorage(keys *helmrecord.Keys) func(ctx context.Context, obj client.Object, cfg *rest.Config) (driver.Driver, error) {
	return func(ctx context.Context, obj client.Object, cfg *rest.Config) (driver.Driver, error) {
		return stackRecords(ctx, obj, cfg, keys)
	}
}

func stackRecords(ctx context.Context, obj client.Object, cfg *rest.Config, keys *helmrecord.Keys) (driver.Driver, error) {
	cs, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the Secrets client for release storage: %w", err)
	}
	owner := metav1.NewControllerRef(obj, obj.GetObjectKind().GroupVersionKind())
	impl := helmclient.NewOwnerRefSecretClient(cs.Secrets(obj.GetNamespace()), []metav1.OwnerReference{*owner}, helmclient.MatchAllSecrets)
	// Helm logs every storage call; formatted only when debug logs are on.
	var logf func(string, ...any)
	if log := ctrl.LoggerFrom(ctx).V(1); log.Enabled() {
		logf = func(format string, v ...any) { log.Info(fmt.Sprintf(format, v...)) }
	}
	return helmrecord.NewSecrets(impl, logf).WithKeys(keys, obj.GetNamespace(), deployedBy(obj)), nil
}

// deployedBy vouches for a record written before the operators signed
// theirs if it holds the manifest the stack's status says the operator
// deployed (as the status holds it: without plain-text tokens): tenants
// cannot write a stack's status, while a record's creation time says
// nothing of what was written into it since.
func deployedBy(obj client.Object) func(*release.Release) bool {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	manifest, found, err := unstructured.NestedString(u.Object, "status", "deployedRelease", "manifest")
	if !found || err != nil || manifest == "" {
		return nil
	}
	_, tokens := plaintextTokens(u)
	return func(rls *release.Release) bool {
		return rls.Name == obj.GetName() && rls.Namespace == obj.GetNamespace() && redactManifest(rls.Manifest, tokens) == manifest
	}
}

// newReleaseKeys finds the keys of the majors' release records where
// their operators run, as liveness finds their Leases: the CRD's
// annotation, else the major's default namespace.
func newReleaseKeys(mgr ctrl.Manager, gvk schema.GroupVersionKind, major string, opts Options) (*helmrecord.Keys, error) {
	cs, err := corev1client.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("creating the Secrets client for release-record keys: %w", err)
	}
	where := newMajorLiveness(mgr.GetAPIReader(), mgr.GetRESTMapper(), gvk, opts.MajorLease, opts.claimGrace())
	return &helmrecord.Keys{Own: major, Namespace: where.namespace, Majors: where.listedMajors,
		Secrets: func(ns string) corev1client.SecretInterface { return cs.Secrets(ns) }}, nil
}
