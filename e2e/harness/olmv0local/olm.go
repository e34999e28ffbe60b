package olmv0local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/olmlocal"
	"github.com/titanml/inference-stack-operator/e2e/harness/testinputs"
	"github.com/titanml/inference-stack-operator/internal/build"
	"github.com/titanml/inference-stack-operator/internal/build/gobuild"
	"github.com/titanml/inference-stack-operator/internal/oci"
)

// Where OLM v0 lives: its own namespace, which is also its global catalog
// namespace (a Subscription anywhere may use a CatalogSource there), and
// the namespace of cluster-wide operators. The release chart's defaults
// name them differently; these are the names of OLM v0's upstream install.
const (
	Namespace          = "olm"
	OperatorsNamespace = "operators"

	olmDeployment     = "olm-operator"
	catalogDeployment = "catalog-operator"
)

// gvrCatalogSource is OLM v0's CatalogSource resource.
var gvrCatalogSource = schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1alpha1", Resource: "catalogsources"}

// Options configure Start.
type Options struct {
	// Registry receives OLM's image; the cluster's node must pull from it.
	Registry *olmlocal.Registry
	// Root is the repository root: opm and the cp stand-in are built from
	// its module.
	Root string
	Log  io.Writer
	// Cluster is the local cluster OLM runs on; its real node calls the
	// catalog's Service before the catalog operator is pointed at it.
	Cluster *localcluster.Cluster
}

// OLM is OLM v0 running as pods.
type OLM struct {
	cluster *localcluster.Cluster
	cfg     *rest.Config
	cs      kubernetes.Interface
	dyn     dynamic.Interface
	log     io.Writer
	// Image is OLM's image: olm, catalog, cpb, cp and opm under /bin. The
	// catalog operator also uses it as the image of bundle-unpacking Jobs
	// (--util-image, --opmImage).
	Image string

	aliveMu  sync.Mutex
	aliveAt  time.Time
	aliveErr error
}

// Start builds OLM v0's binaries (cached), packages them with opm as one
// image, pushes it, applies OLM's CRDs and renders OLM's own Helm chart
// (deploy/chart of the pinned module) with that image, and waits until the
// olm-operator and the catalog-operator are available. Left out of the
// chart's objects: the packageserver CSV (the PackageManifest API, which
// installing through Subscriptions does not need), the operatorhub.io
// CatalogSource (the internet), OpenShift's ClusterOperators and the
// monitoring and cert-manager objects (disabled by default anyway).
func Start(ctx context.Context, cfg *rest.Config, opts Options) (*OLM, error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.Registry == nil {
		return nil, errors.New("olmv0local: a registry the node pulls from is needed")
	}
	if opts.Cluster == nil || !opts.Cluster.HasRealNode() {
		return nil, errors.New("olmv0local: a local cluster with a real node is needed")
	}
	begin := time.Now()
	bins, err := EnsureBinaries(ctx, opts.Log)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	o := &OLM{cluster: opts.Cluster, cfg: cfg, cs: cs, log: opts.Log}
	if o.Image, err = pushImage(ctx, opts, bins); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.log, "OLM %s image pushed: %s\n", Version, o.Image)

	crds, err := CRDs(bins.ModuleDir)
	if err != nil {
		return nil, err
	}
	a, err := newApplier(cfg)
	if err != nil {
		return nil, err
	}
	for _, u := range crds {
		if err := a.apply(ctx, u); err != nil {
			return nil, err
		}
	}
	if o.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if err := olmlocal.WaitEstablished(ctx, o.dyn, crds); err != nil {
		return nil, err
	}
	if err := olmlocal.WaitServed(ctx, cfg, "operators.coreos.com/v1", "operatorgroups", "olmconfigs"); err != nil {
		return nil, err
	}
	objs, skipped, err := o.render(ctx, bins.ModuleDir)
	if err != nil {
		return nil, err
	}
	for _, u := range objs {
		if err := a.apply(ctx, u); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(o.log, "applied OLM %s from its chart: %d objects (left out: %s)\n", Version, len(objs), strings.Join(skipped, ", "))
	for _, d := range []string{olmDeployment, catalogDeployment} {
		if err := o.waitAvailable(ctx, d); err != nil {
			return nil, fmt.Errorf("%w\n%s", err, o.logs(context.WithoutCancel(ctx), 40))
		}
	}
	fmt.Fprintf(o.log, "OLM %s ready as pods in %s (olm-operator, catalog-operator)\n", Version, time.Since(begin).Round(10*time.Millisecond))
	return o, nil
}

// imageTools returns the programs of OLM's image that are not OLM's: opm
// as the project builds it for its catalog image (the same pinned
// operator-registry) and the cp the unpacking Jobs call, built from the
// module at root for target into dir. Under Bazel they are runfiles
// (testinputs.Binaries: the catalog image's opm compile and the go_binary
// //e2e/harness/olmv0local/internal/cp) and nothing is built.
func imageTools(ctx context.Context, root, dir string, target gobuild.Target) (opm, cp string, err error) {
	if found, ok, err := testinputs.Executables(testinputs.Binaries); ok || err != nil {
		if err != nil {
			return "", "", err
		}
		p, err := testinputs.Pick(testinputs.Binaries, found, build.OPM, "cp")
		if err != nil {
			return "", "", err
		}
		return p[0], p[1], nil
	}
	opm = filepath.Join(dir, "bin", "opm")
	if err := gobuild.Build(ctx, gobuild.Options{ModuleRoot: root, Package: build.OPMPackage, Output: opm, Target: target, Tags: []string{"containers_image_openpgp"}}); err != nil {
		return "", "", err
	}
	cp = filepath.Join(dir, "bin", "cp")
	if err := gobuild.Build(ctx, gobuild.Options{ModuleRoot: root, Package: "./e2e/harness/olmv0local/internal/cp", Output: cp, Target: target}); err != nil {
		return "", "", err
	}
	return opm, cp, nil
}

// FindInputs finds, under Bazel, what OLM v0 on a local cluster needs
// besides the cluster's own inputs: its binaries, its chart and CRDs, and
// the programs of its image (see imageTools).
func FindInputs(ctx context.Context, log io.Writer) error {
	bins, err := EnsureBinaries(ctx, log)
	if err != nil {
		return err
	}
	for _, f := range []string{filepath.Join(chartDir, "Chart.yaml"), filepath.Join(chartDir, "values.yaml"), filepath.Join(chartDir, "templates", "_helpers.tpl")} {
		if _, err := os.Stat(filepath.Join(bins.ModuleDir, f)); err != nil {
			return fmt.Errorf("%s@%s: %w", Module, Version, err)
		}
	}
	if err := FindCRDs(bins.ModuleDir); err != nil {
		return err
	}
	if testinputs.UnderBazel() {
		_, _, err = imageTools(ctx, "", "", gobuild.Target{})
	}
	return err
}

// pushImage assembles OLM's image for this machine's architecture and
// pushes it; it returns the reference by digest. The binaries' layer is
// compressed once per content and cached (they are about 300 MB).
func pushImage(ctx context.Context, opts Options, bins *Binaries) (string, error) {
	cache, err := localcluster.CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "olm-v0-image")
	target := gobuild.Target{OS: "linux", Arch: runtime.GOARCH}
	opm, cp, err := imageTools(ctx, opts.Root, dir, target)
	if err != nil {
		return "", err
	}
	layers := oci.LayerCache{Dir: filepath.Join(dir, "layers")}
	epoch := time.Unix(0, 0)
	base, err := layers.Layer([]oci.Entry{
		oci.File("etc/passwd", 0o644, []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nolm:x:%d:%d:olm:/tmp:/sbin/nologin\n", olmlocal.NonRootID, olmlocal.NonRootID))),
		oci.Dir("tmp", 0o1777, 0, 0),
	}, epoch)
	if err != nil {
		return "", fmt.Errorf("OLM image base layer: %w", err)
	}
	binLayer, err := layers.Layer([]oci.Entry{
		{Path: "bin/olm", Mode: 0o755, Source: bins.OLM},
		{Path: "bin/catalog", Mode: 0o755, Source: bins.Catalog},
		{Path: "bin/cpb", Mode: 0o755, Source: bins.CPB},
		{Path: "bin/cp", Mode: 0o755, Source: cp},
		{Path: "bin/opm", Mode: 0o755, Source: opm},
	}, epoch)
	if err != nil {
		return "", fmt.Errorf("OLM image binaries layer: %w", err)
	}
	img, err := oci.Image(oci.Config{
		Platform:   v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Created:    epoch,
		User:       fmt.Sprintf("%d:%d", olmlocal.NonRootID, olmlocal.NonRootID),
		Entrypoint: []string{"/bin/olm"},
		Env:        []string{"PATH=/bin"},
		WorkingDir: "/",
	}, []oci.LayerSpec{{Layer: base, CreatedBy: "e2e/harness/olmv0local"}, {Layer: binLayer, CreatedBy: "e2e/harness/olmv0local: OLM " + Version + ", opm"}})
	if err != nil {
		return "", fmt.Errorf("OLM image: %w", err)
	}
	tag, err := name.NewTag(fmt.Sprintf("%s/olm-v0:%s", opts.Registry.Addr, Version), name.StrictValidation)
	if err != nil {
		return "", err
	}
	if err := remote.Write(tag, img, remote.WithContext(ctx), remote.WithTransport(opts.Registry.Transport())); err != nil {
		return "", fmt.Errorf("pushing %s: %w", tag, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return tag.Context().Digest(d.String()).String(), nil
}

// keptKinds are the kinds of OLM's chart the harness applies.
var keptKinds = []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "OLMConfig", "OperatorGroup", "Service", "NetworkPolicy", "Deployment"}

// render renders OLM's chart from the module for this harness: its
// namespaces, its image for both controllers (and for bundle unpacking),
// no ClusterOperator status (not OpenShift). It returns the objects to
// apply, in apply order, and what it left out.
func (o *OLM) render(ctx context.Context, moduleDir string) ([]*unstructured.Unstructured, []string, error) {
	chrt, err := loader.Load(filepath.Join(moduleDir, "deploy", "chart"))
	if err != nil {
		return nil, nil, fmt.Errorf("loading OLM's chart: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(o.cfg)
	if err != nil {
		return nil, nil, err
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return nil, nil, err
	}
	values := map[string]any{
		"namespace":          Namespace,
		"catalog_namespace":  Namespace,
		"operator_namespace": OperatorsNamespace,
		"olm":                map[string]any{"image": map[string]any{"ref": o.Image, "pullPolicy": "IfNotPresent"}},
		"catalog": map[string]any{
			"image":        map[string]any{"ref": o.Image, "pullPolicy": "IfNotPresent"},
			"commandArgs":  "--configmapServerImage=" + o.Image,
			"opmImageArgs": "--opmImage=" + o.Image,
		},
	}
	in := action.NewInstall(&action.Configuration{})
	in.ClientOnly, in.DryRun, in.Replace = true, true, true
	in.ReleaseName, in.Namespace = "olm", Namespace
	in.KubeVersion = &chartutil.KubeVersion{Version: v.GitVersion, Major: v.Major, Minor: v.Minor}
	rel, err := in.RunWithContext(ctx, chrt, values)
	if err != nil {
		return nil, nil, fmt.Errorf("rendering OLM's chart: %w", err)
	}
	var objs []*unstructured.Unstructured
	var skipped []string
	for _, doc := range releaseutil.SplitManifests(rel.Manifest) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return nil, nil, fmt.Errorf("OLM's chart rendered a document that is not YAML: %w", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if !slices.Contains(keptKinds, u.GetKind()) {
			skipped = append(skipped, u.GetKind()+"/"+u.GetName())
			continue
		}
		objs = append(objs, u)
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		return slices.Index(keptKinds, a.GetKind()) - slices.Index(keptKinds, b.GetKind())
	})
	slices.Sort(skipped)
	return objs, skipped, nil
}

// waitAvailable waits until the Deployment in OLM's namespace has all its
// pods up to date and Ready.
func (o *OLM) waitAvailable(ctx context.Context, name string) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := o.cs.AppsV1().Deployments(Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		s := d.Status
		last = fmt.Sprintf("updated %d ready %d of %d (total %d)", s.UpdatedReplicas, s.ReadyReplicas, want, s.Replicas)
		if pods, err := o.cs.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name}); err == nil {
			for _, p := range pods.Items {
				for _, st := range p.Status.ContainerStatuses {
					if st.State.Waiting != nil {
						last += fmt.Sprintf("; %s: %s %s", p.Name, st.State.Waiting.Reason, st.State.Waiting.Message)
					}
				}
			}
		}
		return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.ReadyReplicas == want && s.Replicas == want, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for Deployment %s/%s: %w (last: %s)", Namespace, name, err, last)
	}
	return nil
}

// MapCatalogService makes the catalog operator reach the registry Service
// of CatalogSource namespace/name by its name. OLM v0 dials
// <service>.<namespace>.svc:50051; the local cluster has no cluster DNS, so
// the name is mapped to the Service's ClusterIP in the catalog operator's
// /etc/hosts (hostAliases), which restarts it (the Service is created by
// the catalog operator itself, so its address is not known before). A
// no-op when the mapping is current.
//
// The address is taken only once OLM has settled on the Service: until
// the CatalogSource's status names its registry Service, every sync of the
// catalog operator deletes and recreates the Service, with a new ClusterIP
// (OLM's GrpcRegistryReconciler "overwrites" while that status is unset,
// and a sync working from a cache that has not seen the status yet does
// it once more). Under load those syncs are seconds apart, and a mapping
// taken from the first Service pointed at an address nothing answers
// (dial i/o timeout, for good). So the mapping is checked against the
// Service after the restart, remapped if the Service was replaced, and the
// Service must answer through the node before and from the catalog
// operator's pod after; a failure names the hop that fails.
func (o *OLM) MapCatalogService(ctx context.Context, namespace, name string) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := o.dyn.Resource(gvrCatalogSource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		svc, _, _ := unstructured.NestedString(u.Object, "status", "registryService", "serviceName")
		svcNS, _, _ := unstructured.NestedString(u.Object, "status", "registryService", "serviceNamespace")
		last = fmt.Sprintf("status.registryService names %q in %q", svc, svcNS)
		return svc == name && svcNS == namespace, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for OLM to settle the registry Service of CatalogSource %s/%s: %w (last: %s)", namespace, name, err, last)
	}
	const attempts = 3
	for range attempts {
		// A sync working from a stale cache may still delete the Service
		// and create it again: it can be missing for a moment.
		svc, err := o.waitCatalogService(ctx, namespace, name)
		if err != nil {
			return err
		}
		ip := svc.Spec.ClusterIP
		if ip == "" || ip == corev1.ClusterIPNone || len(svc.Spec.Ports) == 0 {
			return fmt.Errorf("the registry Service %s/%s has no ClusterIP or port", namespace, name)
		}
		port := svc.Spec.Ports[0].Port
		// The catalog operator's gRPC connection backs off for minutes
		// after a failed dial, so it is pointed at the Service only once
		// the Service answers on the node: its catalog pod serves and
		// kube-proxy has programmed the address.
		if err := o.cluster.WaitService(ctx, localcluster.ServiceCheck{Namespace: namespace, Name: name, Port: port}, 3*time.Minute); err != nil {
			return fmt.Errorf("the registry Service of CatalogSource %s/%s: %w", namespace, name, err)
		}
		if err := o.mapHost(ctx, namespace, name, ip); err != nil {
			return err
		}
		now, err := o.cs.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			fmt.Fprintf(o.log, "OLM deleted the registry Service %s/%s (ClusterIP %s) while it was being mapped; mapping again\n", namespace, name, ip)
			continue
		}
		if err != nil {
			return fmt.Errorf("the registry Service of CatalogSource %s/%s: %w", namespace, name, err)
		}
		if now.UID != svc.UID || now.Spec.ClusterIP != ip {
			fmt.Fprintf(o.log, "OLM replaced the registry Service %s/%s (ClusterIP %s → %s) while it was being mapped; mapping again\n", namespace, name, ip, now.Spec.ClusterIP)
			continue
		}
		// The catalog operator's own path to the Service: pod → ClusterIP
		// → catalog pod across the node's bridge.
		pod, err := olmlocal.ReadyPod(ctx, o.cs, Namespace, catalogDeployment)
		if err != nil {
			return err
		}
		if err := o.cluster.WaitService(ctx, localcluster.ServiceCheck{Namespace: namespace, Name: name, Port: port, FromNamespace: Namespace, FromPod: pod}, time.Minute); err != nil {
			return fmt.Errorf("the catalog operator's path to CatalogSource %s/%s: %w", namespace, name, err)
		}
		return nil
	}
	return fmt.Errorf("OLM replaced the registry Service %s/%s %d times while it was being mapped", namespace, name, attempts)
}

// waitCatalogService returns the registry Service of CatalogSource
// namespace/name once it exists.
func (o *OLM) waitCatalogService(ctx context.Context, namespace, name string) (*corev1.Service, error) {
	var svc *corev1.Service
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := o.cs.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			last = err
			return false, nil
		}
		if err != nil {
			return false, err
		}
		svc = s
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the registry Service of CatalogSource %s/%s: %w (last: %v)", namespace, name, err, last)
	}
	return svc, nil
}

// CheckCatalogService says why the catalog operator does not reach the
// registry Service of CatalogSource namespace/name, or nil: its host name
// maps to another address than the Service's, or a hop from its pod to the
// catalog pod fails (localcluster.ServiceError).
func (o *OLM) CheckCatalogService(ctx context.Context, namespace, name string) error {
	svc, err := o.cs.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the registry Service of CatalogSource %s/%s: %w", namespace, name, err)
	}
	d, err := o.cs.AppsV1().Deployments(Namespace).Get(ctx, catalogDeployment, metav1.GetOptions{})
	if err != nil {
		return err
	}
	host := name + "." + namespace + ".svc"
	for _, a := range d.Spec.Template.Spec.HostAliases {
		if slices.Contains(a.Hostnames, host) && a.IP != svc.Spec.ClusterIP {
			return fmt.Errorf("the catalog operator maps %s to %s, but the Service's ClusterIP is %s", host, a.IP, svc.Spec.ClusterIP)
		}
	}
	pod, err := olmlocal.ReadyPod(ctx, o.cs, Namespace, catalogDeployment)
	if err != nil {
		return err
	}
	return o.cluster.CheckService(ctx, localcluster.ServiceCheck{Namespace: namespace, Name: name, FromNamespace: Namespace, FromPod: pod})
}

// mapHost points the catalog operator's host names for Service
// namespace/name at ip, restarting it if that changes its pod template,
// and waits until it is available.
func (o *OLM) mapHost(ctx context.Context, namespace, name, ip string) error {
	hosts := []string{name + "." + namespace + ".svc", name + "." + namespace + ".svc.cluster.local"}
	changed := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := o.cs.AppsV1().Deployments(Namespace).Get(ctx, catalogDeployment, metav1.GetOptions{})
		if err != nil {
			return err
		}
		aliases := slices.DeleteFunc(slices.Clone(d.Spec.Template.Spec.HostAliases), func(a corev1.HostAlias) bool {
			return slices.Equal(a.Hostnames, hosts)
		})
		aliases = append(aliases, corev1.HostAlias{IP: ip, Hostnames: hosts})
		if slices.EqualFunc(aliases, d.Spec.Template.Spec.HostAliases, func(a, b corev1.HostAlias) bool {
			return a.IP == b.IP && slices.Equal(a.Hostnames, b.Hostnames)
		}) {
			return nil
		}
		d.Spec.Template.Spec.HostAliases = aliases
		changed = true
		_, err = o.cs.AppsV1().Deployments(Namespace).Update(ctx, d, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("mapping %s to %s for the catalog operator: %w", hosts[0], ip, err)
	}
	if changed {
		fmt.Fprintf(o.log, "catalog operator: %s → %s (no cluster DNS here), restarting it\n", hosts[0], ip)
	}
	return o.waitAvailable(ctx, catalogDeployment)
}

// Alive fails when an OLM controller has no Ready pod (asked at most every
// two seconds).
func (o *OLM) Alive() error {
	o.aliveMu.Lock()
	defer o.aliveMu.Unlock()
	if time.Since(o.aliveAt) < 2*time.Second {
		return o.aliveErr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o.aliveErr = nil
	for _, name := range []string{olmDeployment, catalogDeployment} {
		d, err := o.cs.AppsV1().Deployments(Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			continue // transient
		}
		if d.Status.ReadyReplicas == 0 && d.Status.ObservedGeneration >= d.Generation && !rolling(d) {
			o.aliveErr = fmt.Errorf("OLM v0 Deployment %s has no Ready pod", name)
		}
	}
	o.aliveAt = time.Now()
	return o.aliveErr
}

// rolling reports a Deployment replacing its pods (the catalog operator
// after MapCatalogService).
func rolling(d *appsv1.Deployment) bool {
	return d.Status.UpdatedReplicas < d.Status.Replicas || d.Status.UnavailableReplicas > 0 && d.Status.UpdatedReplicas > 0
}

// DumpLogs writes the last lines of every pod of OLM's namespace (the two
// controllers, catalog pods, bundle-unpacking Jobs) to w.
func (o *OLM) DumpLogs(w io.Writer, lines int) {
	io.WriteString(w, o.logs(context.Background(), lines))
}

func (o *OLM) logs(ctx context.Context, lines int) string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pods, err := o.cs.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	n := int64(lines)
	for _, p := range pods.Items {
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			data, err := o.cs.CoreV1().Pods(Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: &n}).DoRaw(ctx)
			fmt.Fprintf(&b, "==== pod %s/%s container %s on %q (%s, last %d lines) ====\n", Namespace, p.Name, c.Name, p.Spec.NodeName, p.Status.Phase, lines)
			if err != nil {
				fmt.Fprintf(&b, "(logs: %v)\n", err)
				continue
			}
			b.Write(data)
		}
	}
	return b.String()
}
