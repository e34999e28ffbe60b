package controller

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// selectorClient hides primary objects that do not match the operator's
// selector: Get answers NotFound for them. helm-operator-plugins' Reconcile
// reads the primary object through this client and does nothing for a
// NotFound, so a request enqueued for a foreign stack (by a dependent
// resource's event, by a stale cache) never installs, upgrades, adds a
// finalizer to or uninstalls it.
type selectorClient struct {
	client.Client
	gvk      schema.GroupVersionKind
	selector labels.Selector
}

func newSelectorClient(c client.Client, gvk schema.GroupVersionKind, selector labels.Selector) client.Client {
	return &selectorClient{Client: c, gvk: gvk, selector: selector}
}

func (c *selectorClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if obj.GetObjectKind().GroupVersionKind() == c.gvk && !c.selector.Matches(labels.Set(obj.GetLabels())) {
		return apierrors.NewNotFound(schema.GroupResource{Group: c.gvk.Group, Resource: c.gvk.Kind}, key.Name)
	}
	return nil
}
