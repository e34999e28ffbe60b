package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	helmclient "github.com/operator-framework/helm-operator-plugins/pkg/client"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/postrender"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/titanml/inference-stack-operator/operator/podsecurity"
)

// The operator reads the Pod Security level of every namespace holding a
// stack (its labels only, from a metadata cache).
//
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// podSecurityRenderers gives every install, upgrade and dry run a last
// post-render step that refuses the render when it is larger than the
// operator accepts (rendersize.go) or a pod template breaks Pod Security
// at the level of the stack's namespace (operator/podsecurity): it runs
// before Helm writes a release record or any object, so a refused stack
// creates nothing.
func podSecurityRenderers(namespaces client.Reader) helmclient.ActionClientGetterOption {
	return helmclient.AppendPostRenderers(func(_ meta.RESTMapper, _ kube.Interface, obj client.Object) postrender.PostRenderer {
		return &podSecurityRenderer{namespace: obj.GetNamespace(), namespaces: namespaces}
	})
}

type podSecurityRenderer struct {
	namespace  string
	namespaces client.Reader
}

func (p *podSecurityRenderer) Run(rendered *bytes.Buffer) (*bytes.Buffer, error) {
	// First, as it is the cheapest: nothing larger is parsed.
	if err := checkRenderSize(rendered.Len()); err != nil {
		return nil, err
	}
	if err := checkPodSecurity(p.namespaces, p.namespace, rendered.Bytes()); err != nil {
		return nil, err
	}
	return rendered, nil
}

// checkPodSecurity refuses a manifest whose pod templates break Pod
// Security at the level of namespace.
func checkPodSecurity(namespaces client.Reader, namespace string, manifest []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := namespaceMetadata()
	if err := namespaces.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return fmt.Errorf("reading the Pod Security level of namespace %s: %w", namespace, err)
	}
	level, err := podsecurity.LevelOf(ns.GetLabels())
	if err != nil {
		return fmt.Errorf("namespace %s: %w", namespace, err)
	}
	return podsecurity.Check(manifest, level)
}

// namespaceMetadata is the metadata-only view of a Namespace the operator
// caches.
func namespaceMetadata() *metav1.PartialObjectMetadata {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return ns
}

// failureReason is the Event reason for a failed install or upgrade:
// PodSecurityViolation for a render Pod Security refused, RenderTooLarge
// for one above the operator's limit (Helm passes a post-renderer's error
// on as text), else fallback.
func failureReason(err error, fallback string) string {
	var pse *podsecurity.Error
	if errors.As(err, &pse) || strings.Contains(err.Error(), podsecurity.Refusal) {
		return "PodSecurityViolation"
	}
	var large *RenderTooLargeError
	if errors.As(err, &large) || strings.Contains(err.Error(), renderTooLarge) {
		return "RenderTooLarge"
	}
	return fallback
}
