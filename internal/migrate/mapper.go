package migrate

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// mapper finds the resource of the objects a release manifest names.
type mapper struct {
	m meta.RESTMapper
}

func newMapper(cfg *rest.Config) (*mapper, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating a discovery client: %w", err)
	}
	return &mapper{m: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

// resource returns the client of u's kind, in namespace if namespaced.
func (m *mapper) resource(dyn dynamic.Interface, u *unstructured.Unstructured, namespace string) (dynamic.ResourceInterface, error) {
	gvk := u.GroupVersionKind()
	mapping, err := m.m.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s %s of the release: %w", gvk, u.GetName(), err)
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		return dyn.Resource(mapping.Resource).Namespace(namespace), nil
	}
	return dyn.Resource(mapping.Resource), nil
}
