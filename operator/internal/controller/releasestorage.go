package controller

import (
	"context"
	"fmt"

	helmclient "github.com/operator-framework/helm-operator-plugins/pkg/client"
	"helm.sh/helm/v3/pkg/storage/driver"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
func releaseStorage(ctx context.Context, obj client.Object, cfg *rest.Config) (driver.Driver, error) {
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
	return helmrecord.NewSecrets(impl, logf), nil
}
