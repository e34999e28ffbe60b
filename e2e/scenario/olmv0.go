package scenario

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/olmlocal"
	"github.com/titanml/inference-stack-operator/e2e/harness/olmv0local"
)

// OLM v0's resources.
var (
	GVRCatalogSource = schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1alpha1", Resource: "catalogsources"}
	GVRSubscription  = schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1alpha1", Resource: "subscriptions"}
	GVRCSV           = schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1alpha1", Resource: "clusterserviceversions"}
	GVRInstallPlan   = schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1alpha1", Resource: "installplans"}
)

// checkOLMv0 says why OLM v0 cannot run on the local cluster here, or
// nil. OLM v0 runs the catalog image and the bundle-unpacking Jobs as pods
// of its own making, so it needs a node that really runs pods; unlike OLM
// v1's two controllers, those cannot be stood in for by host processes.
func checkOLMv0() error {
	if err := localcluster.CheckRealNode(); err != nil {
		return fmt.Errorf("OLM v0 needs the real node (it runs catalog and bundle-unpacking pods itself): %w", err)
	}
	return nil
}

// startOLMv0 starts a TLS registry the real node of c trusts and OLM v0
// as pods on c, and describes the environment; stop tears c down after
// what this started.
func startOLMv0(ctx context.Context, c *localcluster.Cluster, b *Builder, dir string, log io.Writer, stop func(context.Context, ...error) error) (_ *Env, err error) {
	ca, err := olmlocal.NewCA()
	if err != nil {
		return nil, err
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o644); err != nil {
		return nil, err
	}
	reg, err := olmlocal.StartRegistry(ca, c.NodeAddress(), nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = reg.Stop(context.WithoutCancel(ctx))
		}
	}()
	if err := c.TrustRegistry(reg.Addr, ca.CertPEM); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "registry on https://%s\n", reg.Addr)
	olm, err := olmv0local.Start(ctx, c.RESTConfig(), olmv0local.Options{Registry: reg, Root: b.Root, Log: log, Cluster: c})
	if err != nil {
		return nil, err
	}
	b.Registry = reg.Addr + "/tytn"
	b.RegistryCAFile = caFile
	return &Env{
		Provider:   "local (OLM v0)",
		Kubeconfig: c.Kubeconfig(),
		RESTConfig: c.RESTConfig(),
		Builder:    b,
		GPUNodes:   localGPUNodes(),
		OLMv0:      olm,
		Alive:      olm.Alive,
		Dump: func(w io.Writer) {
			olm.DumpLogs(w, 60)
			c.DumpLogs(w, 30)
		},
		Stop: func(ctx context.Context) error { return stop(ctx, reg.Stop(ctx)) },
	}, nil
}

// ChartValuesV0 are the catalog chart's values for OLM v0: the
// CatalogSource in OLM's global catalog namespace serving catalogRef (by
// digest), this scenario's major subscribed to its stable channel.
func (s *Scenario) ChartValuesV0(catalogRef string) map[string]any {
	return map[string]any{
		"olm":        "v0",
		"olmV0":      map[string]any{"catalogSource": map[string]any{"namespace": olmv0local.Namespace}},
		"catalog":    map[string]any{"image": map[string]any{"ref": catalogRef}},
		"extensions": map[string]any{s.Major: map[string]any{"enabled": true, "channel": inferencestack.Stable}},
	}
}

// installCatalogV0 installs the catalog chart for OLM v0 (or upgrades it
// to catalogRef) and waits until OLM serves that catalog: its registry pod
// runs catalogRef and the catalog operator's gRPC connection is READY.
// OLM v0's harness makes the catalog's Service reachable by name for the
// catalog operator, and says why it is not when OLM does not connect.
func (s *Scenario) installCatalogV0(ctx context.Context, catalogRef string) error {
	path := s.Env.OLMv0
	installed, err := s.Helm.Installed()
	if err != nil {
		return err
	}
	if installed {
		s.Mark("helm upgrade catalog")
		if _, err := s.Helm.Upgrade(s.ChartValuesV0(catalogRef)); err != nil {
			return err
		}
		s.logf("helm upgrade %s: CatalogSource %s/%s → %s", HelmRelease, olmv0local.Namespace, inferencestack.CatalogName, catalogRef)
	} else {
		s.Mark("helm install")
		if _, err := s.Helm.Install(s.ChartValuesV0(catalogRef)); err != nil {
			return err
		}
		s.logf("helm install %s (olm: v0): CatalogSource %s/%s (%s), OperatorGroup and Subscription %s/%s (channel %s)", HelmRelease,
			olmv0local.Namespace, inferencestack.CatalogName, catalogRef, inferencestack.Namespace(s.Major), inferencestack.ExtensionName(s.Major), inferencestack.Channel(inferencestack.Stable, s.Major))
	}
	if err := path.MapCatalogService(ctx, olmv0local.Namespace, inferencestack.CatalogName); err != nil {
		return err
	}
	err = s.waitFor(ctx, 3*time.Minute, "CatalogSource "+inferencestack.CatalogName+" serving "+catalogRef, func(ctx context.Context) (bool, string, error) {
		u, err := s.Dyn.Resource(GVRCatalogSource).Namespace(olmv0local.Namespace).Get(ctx, inferencestack.CatalogName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		state, _, _ := unstructured.NestedString(u.Object, "status", "connectionState", "lastObservedState")
		msg, _, _ := unstructured.NestedString(u.Object, "status", "message")
		pods, err := s.CS.CoreV1().Pods(olmv0local.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "olm.catalogSource=" + inferencestack.CatalogName})
		if err != nil {
			return false, err.Error(), nil
		}
		var running []string
		serving := false
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			ready := podReady(&p)
			running = append(running, fmt.Sprintf("%s on %q image %s ready %v", p.Name, p.Spec.NodeName, p.Spec.Containers[0].Image, ready))
			if p.Spec.Containers[0].Image == catalogRef && ready {
				serving = true
			}
		}
		return state == "READY" && serving && len(running) == 1, fmt.Sprintf("connection %s %q; pods %v", state, msg, running), nil
	})
	if err != nil {
		// OLM's own message is a gRPC error three layers up: say which hop
		// of the catalog operator's path fails, if one does.
		if perr := path.CheckCatalogService(context.WithoutCancel(ctx), olmv0local.Namespace, inferencestack.CatalogName); perr != nil {
			return fmt.Errorf("%w\nthe catalog operator's path to the catalog: %v", err, perr)
		}
		return fmt.Errorf("%w\n(the catalog operator's path to the catalog answers)", err)
	}
	s.Mark("catalog serving " + catalogRef)
	return nil
}

// waitCSVSucceeded waits until the major's Subscription has installed
// version, its ClusterServiceVersion is Succeeded (and the only one), the
// operator Deployment pins operatorImage and its pods are Ready on the real
// node, and the operator holds its lease.
func (s *Scenario) waitCSVSucceeded(ctx context.Context, version, operatorImage string) error {
	ns := inferencestack.Namespace(s.Major)
	csvName := inferencestack.PackageName + ".v" + version
	err := s.waitFor(ctx, 4*time.Minute, fmt.Sprintf("Subscription %s/%s: CSV %s Succeeded", ns, inferencestack.ExtensionName(s.Major), csvName), func(ctx context.Context) (bool, string, error) {
		sub, err := s.Dyn.Resource(GVRSubscription).Namespace(ns).Get(ctx, inferencestack.ExtensionName(s.Major), metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		installed, _, _ := unstructured.NestedString(sub.Object, "status", "installedCSV")
		current, _, _ := unstructured.NestedString(sub.Object, "status", "currentCSV")
		state, _, _ := unstructured.NestedString(sub.Object, "status", "state")
		why := fmt.Sprintf("subscription state %q current %q installed %q; %s", state, current, installed, subConditions(sub))
		csvs, err := s.Dyn.Resource(GVRCSV).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, why + "; " + err.Error(), nil
		}
		var phases []string
		succeeded := false
		for _, c := range csvs.Items {
			phase, _, _ := unstructured.NestedString(c.Object, "status", "phase")
			reason, _, _ := unstructured.NestedString(c.Object, "status", "reason")
			msg, _, _ := unstructured.NestedString(c.Object, "status", "message")
			phases = append(phases, fmt.Sprintf("%s %s %s %q", c.GetName(), phase, reason, msg))
			if c.GetName() == csvName && phase == "Succeeded" {
				succeeded = true
			}
		}
		why += "; CSVs " + strings.Join(phases, ", ")
		return installed == csvName && succeeded && len(csvs.Items) == 1, why, nil
	})
	if err != nil {
		return err
	}
	s.Mark("csv succeeded " + version)
	s.logf("Subscription %s: CSV %s Succeeded", inferencestack.ExtensionName(s.Major), csvName)
	deployment := inferencestack.InstanceName(s.Major)
	if err := s.waitPinned(ctx, ns, deployment, operatorImage); err != nil {
		return err
	}
	pods, err := s.waitOperatorPods(ctx, ns, deployment, operatorImage)
	if err != nil {
		return err
	}
	for _, p := range pods {
		if p.Spec.NodeName != s.Env.RealNode {
			return fmt.Errorf("operator pod %s runs on %q, want the real node %s", p.Name, p.Spec.NodeName, s.Env.RealNode)
		}
	}
	s.Mark("operator pod ready " + version)
	s.logf("operator pods %d Ready on %s with %s", len(pods), s.Env.RealNode, operatorImage)
	return s.waitLeaseHeld(ctx, ns, version)
}

func subConditions(u *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var out []string
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["status"] == "True" {
			out = append(out, fmt.Sprintf("%v: %v", m["type"], m["message"]))
		}
	}
	return strings.Join(out, "; ")
}

// teardownV0 removes everything in the documented order: stacks first
// (their operator removes their finalizers), then the chart; the major's
// namespace goes with its CSV and the operator, the CatalogSource with its
// pod; the CRD stays.
func (s *Scenario) teardownV0(ctx context.Context) error {
	s.Mark("teardown")
	if err := s.deleteStacks(ctx); err != nil {
		return err
	}
	if _, err := s.Helm.Uninstall(); err != nil {
		return err
	}
	s.logf("helm uninstall %s", HelmRelease)
	ns := inferencestack.Namespace(s.Major)
	err := s.waitFor(ctx, 3*time.Minute, "subscription, CSV, catalog source, catalog pod and the major's namespace gone", func(ctx context.Context) (bool, string, error) {
		var left []string
		if n, err := s.CS.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil {
			left = append(left, fmt.Sprintf("namespace %s (%s)", ns, n.Status.Phase))
		}
		for _, gvr := range []schema.GroupVersionResource{GVRSubscription, GVRCSV, GVRCatalogSource} {
			l, err := s.Dyn.Resource(gvr).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			for _, u := range l.Items {
				if strings.HasPrefix(u.GetName(), inferencestack.PackageName) {
					left = append(left, fmt.Sprintf("%s %s/%s finalizers %v", gvr.Resource, u.GetNamespace(), u.GetName(), u.GetFinalizers()))
				}
			}
		}
		pods, err := s.CS.CoreV1().Pods(olmv0local.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "olm.catalogSource=" + inferencestack.CatalogName})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, p := range pods.Items {
			left = append(left, "catalog pod "+p.Name)
		}
		return len(left) == 0, strings.Join(left, ", "), nil
	})
	if err != nil {
		return err
	}
	return s.teardownDone(ctx)
}
