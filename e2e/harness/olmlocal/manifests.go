package olmlocal

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// SystemNamespace is where OLM's controllers live and keep their state.
const SystemNamespace = "olmv1-system"

// Service accounts of the two controllers in the release manifests.
const (
	CatalogdServiceAccount           = "catalogd-controller-manager"
	OperatorControllerServiceAccount = "operator-controller-controller-manager"
)

// appliedKinds are what the harness takes from manifests/standard.yaml:
// the API (CRDs) and the controllers' identities and RBAC. Deployments,
// Services, cert-manager objects, NetworkPolicies and the webhook
// configuration are replaced by host processes and local certificates.
var appliedKinds = map[string]schema.GroupVersionResource{
	"Namespace":                        {Version: "v1", Resource: "namespaces"},
	"CustomResourceDefinition":         {Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
	"ServiceAccount":                   {Version: "v1", Resource: "serviceaccounts"},
	"Role":                             {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	"ClusterRole":                      {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"RoleBinding":                      {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	"ClusterRoleBinding":               {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	"ValidatingAdmissionPolicy":        {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
	"ValidatingAdmissionPolicyBinding": {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"},
}

var webhookGVR = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}

// Manifests are the objects of the release manifest (manifests/standard.yaml
// of the pinned module), split by what the harness does with them.
type Manifests struct {
	// Applied: Namespace, CRDs, ServiceAccounts, RBAC, admission policies.
	Applied []*unstructured.Unstructured
	// Webhook is catalogd's MutatingWebhookConfiguration: re-pointed at the
	// host process, or applied with the harness's CA when OLM runs as pods.
	Webhook *unstructured.Unstructured
	// Pods are the Services, Deployments and NetworkPolicies, applied only
	// when OLM runs as pods.
	Pods []*unstructured.Unstructured
	// Skipped counts the other objects by kind.
	Skipped map[string]int
}

// CRDs returns only the CustomResourceDefinitions.
func (m *Manifests) CRDs() []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, u := range m.Applied {
		if u.GetKind() == "CustomResourceDefinition" {
			out = append(out, u)
		}
	}
	return out
}

// LoadManifests parses manifests/standard.yaml of the module in moduleDir.
func LoadManifests(moduleDir string) (*Manifests, error) {
	data, err := manifest(moduleDir, "standard.yaml")
	if err != nil {
		return nil, err
	}
	m := &Manifests{Skipped: map[string]int{}}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("standard.yaml: %w", err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, fmt.Errorf("standard.yaml: %w", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		switch k := u.GetKind(); {
		case appliedKinds[k] != schema.GroupVersionResource{}:
			m.Applied = append(m.Applied, u)
		case k == "MutatingWebhookConfiguration":
			m.Webhook = u
		case podKinds[k] != schema.GroupVersionResource{}:
			m.Pods = append(m.Pods, u)
		default:
			m.Skipped[k]++
		}
	}
	if len(m.CRDs()) == 0 || m.Webhook == nil {
		return nil, fmt.Errorf("standard.yaml of %s@%s has no CRDs or no webhook configuration", Module, Version)
	}
	return m, nil
}

// LoadModuleManifests downloads the pinned module if needed (no build) and
// parses its release manifest.
func LoadModuleManifests(ctx context.Context) (*Manifests, error) {
	dir, err := ModuleDir(ctx)
	if err != nil {
		return nil, err
	}
	return LoadManifests(dir)
}

const fieldManager = "olmlocal"

// apply server-side applies objs in order.
func apply(ctx context.Context, dyn dynamic.Interface, objs []*unstructured.Unstructured) error {
	for _, u := range objs {
		gvr, ok := appliedKinds[u.GetKind()]
		if !ok {
			return fmt.Errorf("apply: unexpected kind %s", u.GetKind())
		}
		if err := applyObject(ctx, dyn, gvr, u); err != nil {
			return err
		}
	}
	return nil
}

// InstallCRDs applies OLM v1's CRDs (ClusterCatalog, ClusterExtension) of
// the pinned release and waits until they are established. Enough for
// validating objects against OLM's API (e.g. server-side dry runs); no
// controller runs.
func InstallCRDs(ctx context.Context, cfg *rest.Config) error {
	m, err := LoadModuleManifests(ctx)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := apply(ctx, dyn, m.CRDs()); err != nil {
		return err
	}
	if err := WaitEstablished(ctx, dyn, m.CRDs()); err != nil {
		return err
	}
	return WaitServed(ctx, cfg, "olm.operatorframework.io/v1", "clustercatalogs", "clusterextensions")
}

// WaitServed waits until discovery lists resources in groupVersion: REST
// mappers (Helm's, kubectl's) fail with "no matches for kind" until then.
func WaitServed(ctx context.Context, cfg *rest.Config, groupVersion string, resources ...string) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := dc.ServerResourcesForGroupVersion(groupVersion)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		found := map[string]bool{}
		for _, r := range list.APIResources {
			found[r.Name] = true
		}
		for _, r := range resources {
			if !found[r] {
				last = fmt.Sprintf("%s not served yet", r)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for discovery to list %s %v: %w (%s)", groupVersion, resources, err, last)
	}
	return nil
}

// WaitEstablished waits until every CRD in crds is Established.
func WaitEstablished(ctx context.Context, dyn dynamic.Interface, crds []*unstructured.Unstructured) error {
	gvr := appliedKinds["CustomResourceDefinition"]
	for _, crd := range crds {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			u, err := dyn.Resource(gvr).Get(ctx, crd.GetName(), metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("waiting for CRD %s to be established: %w", crd.GetName(), err)
		}
	}
	return nil
}
