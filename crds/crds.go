// Package crds holds the InferenceStack CustomResourceDefinition generated
// from operator/api (make generate) and gives it to Go code: the tests that
// install it and the builds that ship it.
package crds

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

// InferenceStackYAML is the generated CRD as committed.
//
//go:embed models.takeoff.co_inferencestacks.yaml
var InferenceStackYAML []byte

// InferenceStack returns the decoded CRD.
func InferenceStack() (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(InferenceStackYAML, crd); err != nil {
		return nil, fmt.Errorf("decoding the InferenceStack CRD: %w", err)
	}
	return crd, nil
}

// Install creates or updates the CRD and waits until the API server serves it.
func Install(ctx context.Context, cfg *rest.Config) error {
	want, err := InferenceStack()
	if err != nil {
		return err
	}
	cs, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating apiextensions client: %w", err)
	}
	crds := cs.ApiextensionsV1().CustomResourceDefinitions()
	// The API server updates a new CRD's status while it establishes it,
	// so an update right after a create (ours or anyone's) may conflict.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got, err := crds.Get(ctx, want.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = crds.Create(ctx, want, metav1.CreateOptions{})
		case err == nil:
			want.ResourceVersion = got.ResourceVersion
			_, err = crds.Update(ctx, want, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("applying CRD %s: %w", want.Name, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := crds.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for CRD %s to be established: %w", want.Name, err)
	}
	// Established precedes discovery by a moment; clients that build a REST
	// mapper right after Install would otherwise not find the kind.
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating discovery client: %w", err)
	}
	gv := want.Spec.Group + "/" + want.Spec.Versions[0].Name
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := dc.ServerResourcesForGroupVersion(gv)
		if err != nil {
			return false, nil
		}
		for _, r := range list.APIResources {
			if r.Name == want.Spec.Names.Plural {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s to be served by discovery: %w", gv, err)
	}
	return nil
}
