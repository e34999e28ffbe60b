package inferencestack

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/titanml/inference-stack-operator/charts/internal/charttest"
)

const (
	release   = "my-inference-stack" // contains the chart name, so it is the fullname
	namespace = "models"
	gpu       = corev1.ResourceName("nvidia.com/gpu")
)

var kubeVersion = &chartutil.KubeVersion{Version: "v1.30.0", Major: "1", Minor: "30"}

// scaledObject is the part of KEDA's ScaledObject the chart writes. Decoding
// strictly into it catches misspelt or misplaced fields.
type scaledObject struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		ScaleTargetRef struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Name       string `json:"name"`
		} `json:"scaleTargetRef"`
		PollingInterval       *int32         `json:"pollingInterval"`
		InitialCooldownPeriod *int32         `json:"initialCooldownPeriod"`
		CooldownPeriod        *int32         `json:"cooldownPeriod"`
		MinReplicaCount       *int32         `json:"minReplicaCount"`
		MaxReplicaCount       *int32         `json:"maxReplicaCount"`
		Advanced              map[string]any `json:"advanced"`
		Triggers              []struct {
			Type     string            `json:"type"`
			Metadata map[string]string `json:"metadata"`
		} `json:"triggers"`
	} `json:"spec"`
}

// takeoffConfig is a Takeoff config.yaml. It is parsed as YAML 1.1 (like the
// Python reader does), so an unquoted `yes` would come back as a bool.
type takeoffConfig struct {
	Takeoff struct {
		ServerConfig  map[string]any            `json:"server_config"`
		ReadersConfig map[string]map[string]any `json:"readers_config"`
	} `json:"takeoff"`
}

// manifests is one rendered release: its documents by "Kind/name" and NOTES.
type manifests struct {
	docs  map[string]string
	notes string
}

type renderOption func(*action.Install, *chart.Chart)

func withRelease(name string) renderOption {
	return func(i *action.Install, _ *chart.Chart) { i.ReleaseName = name }
}

func withKEDA() renderOption {
	return func(i *action.Install, _ *chart.Chart) {
		i.APIVersions = append(i.APIVersions, "keda.sh/v1alpha1", "keda.sh/v1alpha1/ScaledObject")
	}
}

// withChartVersion renders the chart as a later release of it would be
// packaged: same templates, other chart version and appVersion.
func withChartVersion(version, appVersion string) renderOption {
	return func(_ *action.Install, c *chart.Chart) {
		c.Metadata.Version, c.Metadata.AppVersion = version, appVersion
	}
}

// tryRender renders the embedded chart as the operator would install it
// (client-only dry run, so no cluster is needed).
func tryRender(t *testing.T, values string, opts ...renderOption) (manifests, error) {
	t.Helper()
	c, err := Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatalf("parsing test values: %v", err)
	}
	install := charttest.DryRunInstall(&action.Configuration{Log: t.Logf}, release, namespace, kubeVersion)
	for _, opt := range opts {
		opt(install, c)
	}
	rel, err := install.Run(c, vals.AsMap())
	if err != nil {
		return manifests{}, err
	}
	m := manifests{docs: map[string]string{}, notes: rel.Info.Notes}
	for _, doc := range releaseutil.SplitManifests(rel.Manifest) {
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("rendered document is not YAML: %v\n%s", err, doc)
		}
		if head.Kind == "" {
			continue
		}
		key := head.Kind + "/" + head.Metadata.Name
		if _, dup := m.docs[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		m.docs[key] = doc
	}
	checkWellFormed(t, m)
	return m, nil
}

func render(t *testing.T, values string, opts ...renderOption) manifests {
	t.Helper()
	m, err := tryRender(t, values, opts...)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return m
}

func renderFile(t *testing.T, path string, opts ...renderOption) manifests {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return render(t, string(data), opts...)
}

// checkWellFormed decodes every object strictly into its API type (so an
// unknown or misplaced field fails) and checks names and labels are valid.
func checkWellFormed(t *testing.T, m manifests) {
	t.Helper()
	for key, doc := range m.docs {
		var meta metav1.ObjectMeta
		var err error
		switch kind := strings.SplitN(key, "/", 2)[0]; kind {
		case "Deployment":
			var o appsv1.Deployment
			err, meta = yaml.UnmarshalStrict([]byte(doc), &o), o.ObjectMeta
			if err == nil && !reflect.DeepEqual(o.Spec.Selector.MatchLabels, pick(o.Spec.Template.Labels, o.Spec.Selector.MatchLabels)) {
				t.Errorf("%s: pod labels %v do not match selector %v", key, o.Spec.Template.Labels, o.Spec.Selector.MatchLabels)
			}
		case "Service":
			var o corev1.Service
			err, meta = yaml.UnmarshalStrict([]byte(doc), &o), o.ObjectMeta
		case "ConfigMap":
			var o corev1.ConfigMap
			err, meta = yaml.UnmarshalStrict([]byte(doc), &o), o.ObjectMeta
		case "ServiceAccount":
			var o corev1.ServiceAccount
			err, meta = yaml.UnmarshalStrict([]byte(doc), &o), o.ObjectMeta
		case "Ingress":
			var o networkingv1.Ingress
			err, meta = yaml.UnmarshalStrict([]byte(doc), &o), o.ObjectMeta
		case "ScaledObject":
			var o scaledObject
			err, meta = yaml.UnmarshalStrict([]byte(doc), &o), o.Metadata
		default:
			t.Errorf("unexpected kind rendered: %s", key)
			continue
		}
		if err != nil {
			t.Errorf("%s does not decode strictly: %v\n%s", key, err, doc)
			continue
		}
		for _, msg := range validation.IsDNS1035Label(meta.Name) {
			t.Errorf("%s: invalid name: %s", key, msg)
		}
		for k, v := range meta.Labels {
			for _, msg := range append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...) {
				t.Errorf("%s: invalid label %s=%s: %s", key, k, v, msg)
			}
		}
	}
}

// pick returns the entries of labels whose keys are in keys.
func pick(labels, keys map[string]string) map[string]string {
	out := map[string]string{}
	for k := range keys {
		if v, ok := labels[k]; ok {
			out[k] = v
		}
	}
	return out
}

func (m manifests) kinds() []string {
	var keys []string
	for k := range m.docs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (m manifests) has(kind, name string) bool {
	_, ok := m.docs[kind+"/"+name]
	return ok
}

func decode[T any](t *testing.T, m manifests, kind, name string) *T {
	t.Helper()
	doc, ok := m.docs[kind+"/"+name]
	if !ok {
		t.Fatalf("no %s %q rendered; rendered: %v", kind, name, m.kinds())
	}
	obj := new(T)
	if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
		t.Fatalf("decoding %s %s: %v", kind, name, err)
	}
	return obj
}

func deployment(t *testing.T, m manifests, name string) *appsv1.Deployment {
	t.Helper()
	return decode[appsv1.Deployment](t, m, "Deployment", name)
}

func configOf(t *testing.T, m manifests, name string) takeoffConfig {
	t.Helper()
	cm := decode[corev1.ConfigMap](t, m, "ConfigMap", name)
	var cfg takeoffConfig
	if err := yaml.UnmarshalStrict([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatalf("config.yaml of %s: %v\n%s", name, err, cm.Data["config.yaml"])
	}
	return cfg
}

func readerConfig(t *testing.T, m manifests, fullname, app string) map[string]any {
	t.Helper()
	rc, ok := configOf(t, m, fullname).Takeoff.ReadersConfig[app]
	if !ok {
		t.Fatalf("config of %s has no readers_config.%s", fullname, app)
	}
	return rc
}

func checksum(t *testing.T, m manifests, name string) string {
	t.Helper()
	return deployment(t, m, name).Spec.Template.Annotations["checksum/config"]
}

func container(t *testing.T, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%s: want 1 container, got %d", d.Name, len(d.Spec.Template.Spec.Containers))
	}
	return d.Spec.Template.Spec.Containers[0]
}

func gpuToleration() corev1.Toleration {
	return corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
}

// TestDocumentedExample renders the InferenceStack from the operator's
// documentation ("Using a Specific Operator Version"): one cuda application
// pinned to an RTX 3060, with an image pull secret.
func TestDocumentedExample(t *testing.T) {
	m := renderFile(t, "testdata/example.yaml")

	want := []string{
		"ConfigMap/my-inference-stack-gateway", "ConfigMap/my-inference-stack-hello-world",
		"Deployment/my-inference-stack-gateway", "Deployment/my-inference-stack-hello-world",
		"Service/my-inference-stack-gateway", "Service/my-inference-stack-hello-world",
		"ServiceAccount/my-inference-stack",
	}
	if got := m.kinds(); !slices.Equal(got, want) {
		t.Fatalf("rendered objects:\n got %v\nwant %v", got, want)
	}

	labels := func(component string) map[string]string {
		return map[string]string{
			"app.kubernetes.io/name":      "inference-stack",
			"app.kubernetes.io/instance":  release,
			"app.kubernetes.io/component": component,
		}
	}
	for _, tc := range []struct{ name, component, image string }{
		{"my-inference-stack-gateway", "gateway", "tytn/takeoff-pro:0.22.0-rc20-cpu"},
		{"my-inference-stack-hello-world", "application-hello-world", "tytn/takeoff-pro:0.22.0-rc20-gpu"},
	} {
		d := deployment(t, m, tc.name)
		if !reflect.DeepEqual(d.Spec.Selector.MatchLabels, labels(tc.component)) {
			t.Errorf("%s selector = %v, want only the stable labels %v", tc.name, d.Spec.Selector.MatchLabels, labels(tc.component))
		}
		for k, v := range map[string]string{"helm.sh/chart": "inference-stack-1.1.0", "app.kubernetes.io/version": "0.22.0-rc20", "app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/component": tc.component} {
			if d.Labels[k] != v {
				t.Errorf("%s label %s = %q, want %q", tc.name, k, d.Labels[k], v)
			}
		}
		svc := decode[corev1.Service](t, m, "Service", tc.name)
		if !reflect.DeepEqual(svc.Spec.Selector, labels(tc.component)) {
			t.Errorf("Service %s selector = %v", tc.name, svc.Spec.Selector)
		}
		pod := d.Spec.Template.Spec
		c := container(t, d)
		if c.Name != tc.name || c.Image != tc.image {
			t.Errorf("%s container = %s %s, want %s %s", tc.name, c.Name, c.Image, tc.name, tc.image)
		}
		if want := []corev1.LocalObjectReference{{Name: "regcred"}}; !reflect.DeepEqual(pod.ImagePullSecrets, want) {
			t.Errorf("%s imagePullSecrets = %v", tc.name, pod.ImagePullSecrets)
		}
		if pod.ServiceAccountName != "my-inference-stack" || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
			t.Errorf("%s: service account %q, automount %v; want my-inference-stack without a token", tc.name, pod.ServiceAccountName, pod.AutomountServiceAccountToken)
		}
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
			sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: container securityContext not hardened: %+v", tc.name, sc)
		}
		if len(pod.InitContainers) != 0 {
			t.Errorf("%s: unexpected init containers (the old chart's root chmod): %v", tc.name, pod.InitContainers)
		}
		mount := corev1.VolumeMount{Name: "config", MountPath: "/code/config.yaml", SubPath: "config.yaml", ReadOnly: true}
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return reflect.DeepEqual(m, mount) }) {
			t.Errorf("%s: config not mounted at /code/config.yaml: %v", tc.name, c.VolumeMounts)
		}
	}

	reader := deployment(t, m, "my-inference-stack-hello-world")
	pod := reader.Spec.Template.Spec
	c := container(t, reader)
	if reader.Spec.Replicas == nil || *reader.Spec.Replicas != 1 {
		t.Errorf("reader replicas = %v, want 1", reader.Spec.Replicas)
	}
	if want := map[string]string{"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-3060"}; !reflect.DeepEqual(pod.NodeSelector, want) {
		t.Errorf("reader nodeSelector = %v", pod.NodeSelector)
	}
	if q := c.Resources.Limits[gpu]; q.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("reader GPU limit = %v, want 1", q.String())
	}
	if q := c.Resources.Requests[gpu]; q.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("reader GPU request = %v, want 1", q.String())
	}
	if cpu, mem := c.Resources.Requests[corev1.ResourceCPU], c.Resources.Requests[corev1.ResourceMemory]; cpu.Cmp(resource.MustParse("1")) != 0 || mem.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("reader default requests cpu %s memory %s, want 1 and 2Gi", cpu.String(), mem.String())
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		t.Error("the chart set a memory limit nobody asked for")
	}
	if want := []corev1.Toleration{gpuToleration()}; !reflect.DeepEqual(pod.Tolerations, want) {
		t.Errorf("reader tolerations = %v, want %v", pod.Tolerations, want)
	}
	if pod.SecurityContext == nil || pod.SecurityContext.FSGroup == nil {
		t.Errorf("reader pod has no fsGroup to make the models volume writable: %+v", pod.SecurityContext)
	}
	wantMounts := []corev1.VolumeMount{
		{Name: "config", MountPath: "/code/config.yaml", SubPath: "config.yaml", ReadOnly: true},
		{Name: "dshm", MountPath: "/dev/shm"},
		{Name: "models", MountPath: "/code/models"},
	}
	if !reflect.DeepEqual(c.VolumeMounts, wantMounts) {
		t.Errorf("reader mounts = %v\nwant %v", c.VolumeMounts, wantMounts)
	}
	memory := &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}
	limit := resource.MustParse("32Gi")
	wantVolumes := []corev1.Volume{
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "my-inference-stack-hello-world"}}}},
		{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: memory}},
		{Name: "models", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &limit}}},
	}
	if !reflect.DeepEqual(pod.Volumes, wantVolumes) {
		t.Errorf("reader volumes = %v\nwant %v", pod.Volumes, wantVolumes)
	}

	rc := readerConfig(t, m, "my-inference-stack-hello-world", "hello-world")
	wantRC := map[string]any{
		"model_name":          "unsloth/Llama-3.2-1B-Instruct",
		"device":              "cuda",
		"consumer_group":      "primary",
		"buffer_requests":     true,
		"internal_gateway_ip": "my-inference-stack-gateway",
	}
	if !reflect.DeepEqual(rc, wantRC) {
		t.Errorf("reader config = %v\nwant %v", rc, wantRC)
	}
	if port := configOf(t, m, "my-inference-stack-hello-world").Takeoff.ServerConfig["internal_port"]; port != float64(3005) {
		t.Errorf("reader server_config.internal_port = %v, want 3005", port)
	}
	gw := configOf(t, m, "my-inference-stack-gateway")
	if !reflect.DeepEqual(gw.Takeoff.ServerConfig, map[string]any{"internal_port": float64(3005)}) || len(gw.Takeoff.ReadersConfig) != 0 {
		t.Errorf("gateway config = %+v, want internal_port 3005 and no readers", gw.Takeoff)
	}

	gwSvc := decode[corev1.Service](t, m, "Service", "my-inference-stack-gateway")
	gotPorts := map[string]string{}
	for _, p := range gwSvc.Spec.Ports {
		gotPorts[p.Name] = fmt.Sprintf("%s@%d", p.TargetPort.String(), p.Port)
	}
	wantPorts := map[string]string{"http": "openai@80", "management": "management@3001", "inference": "inference@3000", "internal": "internal@3005"}
	if !reflect.DeepEqual(gotPorts, wantPorts) {
		t.Errorf("gateway Service ports (targetPort@port) = %v, want %v", gotPorts, wantPorts)
	}
	readerSvc := decode[corev1.Service](t, m, "Service", "my-inference-stack-hello-world")
	if len(readerSvc.Spec.Ports) != 1 || readerSvc.Spec.Ports[0].Name != "management" || readerSvc.Spec.Ports[0].Port != 3001 || readerSvc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("reader Service = %+v, want ClusterIP with management 3001", readerSvc.Spec)
	}

	sa := decode[corev1.ServiceAccount](t, m, "ServiceAccount", "my-inference-stack")
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("ServiceAccount automount = %v, want false", sa.AutomountServiceAccountToken)
	}
}

// TestApplicationMerge checks each application is its entry deep-merged over
// a copy of applicationTemplate: maps merge, lists and modelsVolume replace,
// and false/0 in an entry override the template.
func TestApplicationMerge(t *testing.T) {
	m := render(t, `
applicationTemplate:
  replicaCount: 3
  nodeSelector: {pool: gpu, zone: a}
  tolerations: [{key: template, operator: Exists}]
  volumes: [{name: template-extra, emptyDir: {}}]
  volumeMounts: [{name: template-extra, mountPath: /extra}]
  modelsVolume: {persistentVolumeClaim: {claimName: shared-models}}
  podAnnotations: {from-template: "yes"}
  readerConfig: {maxBatchSize: 8, logLevel: DEBUG}
applications:
  one:
    replicaCount: 0
    nodeSelector: {zone: b}
    tolerations: [{key: one, operator: Exists}]
    modelsVolume: {hostPath: {path: /var/lib/models, type: DirectoryOrCreate}}
    podAnnotations: {from-one: "true"}
    readerConfig: {modelName: org/one, bufferRequests: false, cudaVisibleDevices: "0,1"}
  two: {}
`)
	one := deployment(t, m, "my-inference-stack-one")
	two := deployment(t, m, "my-inference-stack-two")

	if *one.Spec.Replicas != 0 || *two.Spec.Replicas != 3 {
		t.Errorf("replicas one=%d two=%d, want 0 (entry's 0 wins) and 3", *one.Spec.Replicas, *two.Spec.Replicas)
	}
	if want := map[string]string{"pool": "gpu", "zone": "b"}; !reflect.DeepEqual(one.Spec.Template.Spec.NodeSelector, want) {
		t.Errorf("one nodeSelector = %v, want merged %v", one.Spec.Template.Spec.NodeSelector, want)
	}
	if want := map[string]string{"pool": "gpu", "zone": "a"}; !reflect.DeepEqual(two.Spec.Template.Spec.NodeSelector, want) {
		t.Errorf("two nodeSelector = %v, want the template's %v (was the template mutated?)", two.Spec.Template.Spec.NodeSelector, want)
	}
	if got := one.Spec.Template.Spec.Tolerations; len(got) != 1 || got[0].Key != "one" {
		t.Errorf("one tolerations = %v, want the entry's list only", got)
	}
	if got := two.Spec.Template.Spec.Tolerations; len(got) != 1 || got[0].Key != "template" {
		t.Errorf("two tolerations = %v, want the template's list", got)
	}
	models := func(d *appsv1.Deployment) corev1.Volume {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == "models" {
				return v
			}
		}
		t.Fatalf("%s has no models volume", d.Name)
		return corev1.Volume{}
	}
	if v := models(one); v.HostPath == nil || v.HostPath.Path != "/var/lib/models" || v.PersistentVolumeClaim != nil {
		t.Errorf("one models volume = %+v, want only the entry's hostPath", v.VolumeSource)
	}
	if v := models(two); v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "shared-models" || v.EmptyDir != nil {
		t.Errorf("two models volume = %+v, want only the template's PVC", v.VolumeSource)
	}
	if vols := two.Spec.Template.Spec.Volumes; vols[len(vols)-1].Name != "template-extra" {
		t.Errorf("two volumes = %v, want the template's extra volume last", vols)
	}
	if a := one.Spec.Template.Annotations; a["from-template"] != "yes" || a["from-one"] != "true" {
		t.Errorf("one pod annotations = %v, want both maps merged", a)
	}

	rcOne := readerConfig(t, m, "my-inference-stack-one", "one")
	for k, want := range map[string]any{
		"model_name": "org/one", "buffer_requests": false, "max_batch_size": float64(8), "log_level": "DEBUG",
		"cuda_visible_devices": "0,1", "device": "cpu", "consumer_group": "primary",
	} {
		if rcOne[k] != want {
			t.Errorf("one reader config %s = %#v, want %#v", k, rcOne[k], want)
		}
	}
	if rcTwo := readerConfig(t, m, "my-inference-stack-two", "two"); rcTwo["model_name"] != "TitanML/dummy_model" || rcTwo["buffer_requests"] != true {
		t.Errorf("two reader config = %v, want the template's defaults", rcTwo)
	}
}

// TestEmptyApplicationEntry: an application given with no overrides at all
// gets the template.
func TestEmptyApplicationEntry(t *testing.T) {
	m := render(t, "applications: {bare: {}}\n")
	if rc := readerConfig(t, m, "my-inference-stack-bare", "bare"); rc["model_name"] != "TitanML/dummy_model" {
		t.Errorf("bare reader config = %v", rc)
	}
}

func TestEnvOrder(t *testing.T) {
	m := render(t, `
gateway:
  env:
    - {name: GATEWAY_ONLY, value: "1"}
applicationTemplate:
  env:
    - {name: FROM_TEMPLATE, value: t}
    - {name: SHARED, value: template}
    - {name: TAKEOFF_HEADLESS, value: "false"}
applications:
  app:
    env:
      - {name: SHARED, value: app}
      - {name: FROM_APP, value: a}
      - {name: POD_NAME, value: fixed}
  suffix-off:
    env:
      - {name: TAKEOFF_ADD_READER_ID_SUFFIX, value: "false"}
`)
	envOf := func(name string) []string {
		var out []string
		for _, e := range container(t, deployment(t, m, name)).Env {
			v := e.Value
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				v = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
			}
			out = append(out, e.Name+"="+v)
		}
		return out
	}
	for _, tc := range []struct {
		deployment string
		want       []string
	}{
		{"my-inference-stack-app", []string{
			"SHARED=app", "FROM_APP=a", "POD_NAME=fixed", // the application's entries
			"FROM_TEMPLATE=t", "TAKEOFF_HEADLESS=false", // template entries not set by the application
			"TAKEOFF_ADD_READER_ID_SUFFIX=true", // required entries not set above
		}},
		{"my-inference-stack-suffix-off", []string{
			"TAKEOFF_ADD_READER_ID_SUFFIX=false",
			"FROM_TEMPLATE=t", "SHARED=template", "TAKEOFF_HEADLESS=false",
			"POD_NAME=fieldRef:metadata.name",
		}},
		{"my-inference-stack-gateway", []string{"GATEWAY_ONLY=1", "TAKEOFF_ADD_READER_ID_SUFFIX=true"}},
	} {
		if got := envOf(tc.deployment); !slices.Equal(got, tc.want) {
			t.Errorf("%s env:\n got %v\nwant %v", tc.deployment, got, tc.want)
		}
	}
}

func TestGPUDefaults(t *testing.T) {
	for _, tc := range []struct {
		name        string
		app         string // YAML of applications.gpu
		limit       string // expected nvidia.com/gpu limit, "" for none
		request     string
		extra       corev1.ResourceName // another resource that must be kept
		nvidiaTol   int                 // expected count of tolerations for the nvidia.com/gpu taint
		tolerations int
	}{
		{name: "cpu device gets no GPU", app: `{readerConfig: {device: cpu}}`},
		{name: "cuda defaults to one GPU", app: `{readerConfig: {device: cuda}}`, limit: "1", request: "1", nvidiaTol: 1, tolerations: 1},
		{name: "tensorParallel sets the count", app: `{readerConfig: {device: cuda, tensorParallel: 4}}`, limit: "4", request: "4", nvidiaTol: 1, tolerations: 1},
		{name: "explicit limit wins", app: `{readerConfig: {device: cuda, tensorParallel: 4}, resources: {limits: {nvidia.com/gpu: 2}}}`, limit: "2", nvidiaTol: 1, tolerations: 1},
		{name: "explicit request sets the limit", app: `{readerConfig: {device: cuda, tensorParallel: 4}, resources: {requests: {nvidia.com/gpu: 2}}}`, limit: "2", request: "2", nvidiaTol: 1, tolerations: 1},
		{name: "other resources are kept", app: `{readerConfig: {device: cuda}, resources: {limits: {memory: 16Gi}}}`, limit: "1", request: "1", extra: corev1.ResourceMemory, nvidiaTol: 1, tolerations: 1},
		{name: "a requested MIG profile is not topped up with a full GPU", app: `{readerConfig: {device: cuda}, resources: {requests: {nvidia.com/mig-1g.5gb: 1}, limits: {memory: 8Gi}}}`, extra: corev1.ResourceMemory, nvidiaTol: 1, tolerations: 1},
		{name: "a MIG profile is not topped up with a full GPU", app: `{readerConfig: {device: cuda}, resources: {limits: {nvidia.com/mig-1g.5gb: 1}}}`, extra: "nvidia.com/mig-1g.5gb", nvidiaTol: 1, tolerations: 1},
		{name: "an equal toleration is not repeated", app: `{readerConfig: {device: cuda}, tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]}`, limit: "1", request: "1", nvidiaTol: 1, tolerations: 1},
		{name: "other tolerations are kept", app: `{readerConfig: {device: cuda}, tolerations: [{key: dedicated, operator: Equal, value: llm, effect: NoSchedule}]}`, limit: "1", request: "1", nvidiaTol: 1, tolerations: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, "applications:\n  gpu: "+tc.app+"\n")
			d := deployment(t, m, "my-inference-stack-gpu")
			res := container(t, d).Resources
			for what, pair := range map[string]struct {
				list corev1.ResourceList
				want string
			}{"limit": {res.Limits, tc.limit}, "request": {res.Requests, tc.request}} {
				q, ok := pair.list[gpu]
				switch {
				case pair.want == "" && ok:
					t.Errorf("unexpected GPU %s %s", what, q.String())
				case pair.want != "" && (!ok || q.Cmp(resource.MustParse(pair.want)) != 0):
					t.Errorf("GPU %s = %v (set: %v), want %s", what, q.String(), ok, pair.want)
				}
			}
			if tc.extra != "" {
				if _, ok := res.Limits[tc.extra]; !ok {
					t.Errorf("limit %s was dropped: %v", tc.extra, res.Limits)
				}
			}
			tolerations := d.Spec.Template.Spec.Tolerations
			nvidia := 0
			for _, tol := range tolerations {
				if tol == gpuToleration() {
					nvidia++
				}
			}
			if nvidia != tc.nvidiaTol || len(tolerations) != tc.tolerations {
				t.Errorf("tolerations = %v, want %d in total with %d for nvidia.com/gpu", tolerations, tc.tolerations, tc.nvidiaTol)
			}
		})
	}
}

// TestConfigChecksum: a config change rolls exactly the pods that read it.
func TestConfigChecksum(t *testing.T) {
	const base = `
gateway:
  config: {readerMessageTimeoutMs: 500}
applications:
  one: {readerConfig: {modelName: org/one}}
  two: {readerConfig: {modelName: org/two}}
`
	names := []string{"my-inference-stack-gateway", "my-inference-stack-one", "my-inference-stack-two"}
	sums := func(m manifests) map[string]string {
		out := map[string]string{}
		for _, n := range names {
			out[n] = checksum(t, m, n)
		}
		return out
	}
	m := render(t, base)
	before := sums(m)

	// The annotation is the sha256 of exactly what the ConfigMap holds.
	for _, n := range names {
		data := decode[corev1.ConfigMap](t, m, "ConfigMap", n).Data["config.yaml"]
		sum := sha256.Sum256([]byte(data))
		if got := hex.EncodeToString(sum[:]); got != before[n] {
			t.Errorf("%s checksum/config = %s, want sha256 of its config.yaml %s", n, before[n], got)
		}
	}

	for _, tc := range []struct {
		name    string
		values  string
		changed []string
	}{
		{"same values", base, nil},
		{"one application's reader config", strings.Replace(base, "org/one", "org/one-v2", 1), []string{"my-inference-stack-one"}},
		{"gateway config", strings.Replace(base, "500", "750", 1), []string{"my-inference-stack-gateway"}},
		{"an unrelated pod annotation", base + "\napplicationTemplate: {podAnnotations: {a: b}}\n", nil},
		{"the internal port every pod reads", strings.Replace(base, "500}", "500, internalPort: 4005}", 1), names},
	} {
		t.Run(tc.name, func(t *testing.T) {
			after := sums(render(t, tc.values))
			for _, n := range names {
				if changed := before[n] != after[n]; changed != slices.Contains(tc.changed, n) {
					t.Errorf("%s checksum changed = %v, want %v", n, changed, !changed)
				}
			}
		})
	}
}

// TestPodTemplatesIgnoreChartVersion pins the upgrade rule of the chart
// README: a pod template changes only when what the pod runs changes. An
// operator release that bumps the chart version (and appVersion, with the
// images pinned) relabels the objects but leaves every pod template as it
// was, so no model server restarts.
func TestPodTemplatesIgnoreChartVersion(t *testing.T) {
	const values = `
gateway: {image: {tag: "1.0"}}
applicationTemplate: {image: {tag: "1.0"}, podLabels: {team: a}}
applications:
  one: {readerConfig: {modelName: org/one}}
  two: {readerConfig: {modelName: org/two, device: cuda}}
`
	before := render(t, values)
	after := render(t, values, withChartVersion("9.9.9", "9.9.9"))
	for _, n := range []string{"my-inference-stack-gateway", "my-inference-stack-one", "my-inference-stack-two"} {
		b := decode[appsv1.Deployment](t, before, "Deployment", n)
		a := decode[appsv1.Deployment](t, after, "Deployment", n)
		if !reflect.DeepEqual(b.Spec.Template, a.Spec.Template) {
			bt, _ := yaml.Marshal(b.Spec.Template)
			at, _ := yaml.Marshal(a.Spec.Template)
			t.Errorf("%s: pod template changed with the chart version:\n%s\n---\n%s", n, bt, at)
		}
		for _, k := range []string{"helm.sh/chart", "app.kubernetes.io/version"} {
			if _, ok := b.Spec.Template.Labels[k]; ok {
				t.Errorf("%s: pod template carries %s", n, k)
			}
			if b.Labels[k] == a.Labels[k] {
				t.Errorf("%s: Deployment label %s = %q did not follow the chart version", n, k, a.Labels[k])
			}
		}
		if n != "my-inference-stack-gateway" && b.Spec.Template.Labels["team"] != "a" {
			t.Errorf("%s: podLabels lost: %v", n, b.Spec.Template.Labels)
		}
	}
}

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		name, values, release string
		fullname, chartName   string
	}{
		{name: "release containing the chart name", release: "my-inference-stack", fullname: "my-inference-stack", chartName: "inference-stack"},
		{name: "plain release", release: "prod", fullname: "prod-inference-stack", chartName: "inference-stack"},
		{name: "nameOverride", release: "prod", values: "nameOverride: takeoff\n", fullname: "prod-takeoff", chartName: "takeoff"},
		{name: "fullnameOverride", release: "prod", values: "fullnameOverride: llm\n", fullname: "llm", chartName: "inference-stack"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, tc.values+"applications: {chat: {}}\n", withRelease(tc.release))
			for _, key := range []string{
				"ServiceAccount/" + tc.fullname,
				"Deployment/" + tc.fullname + "-gateway", "Service/" + tc.fullname + "-gateway", "ConfigMap/" + tc.fullname + "-gateway",
				"Deployment/" + tc.fullname + "-chat", "Service/" + tc.fullname + "-chat", "ConfigMap/" + tc.fullname + "-chat",
			} {
				if _, ok := m.docs[key]; !ok {
					t.Errorf("%s not rendered; have %v", key, m.kinds())
				}
			}
			d := deployment(t, m, tc.fullname+"-chat")
			if got := d.Spec.Selector.MatchLabels["app.kubernetes.io/name"]; got != tc.chartName {
				t.Errorf("name label = %q, want %q", got, tc.chartName)
			}
			if got := d.Spec.Template.Spec.ServiceAccountName; got != tc.fullname {
				t.Errorf("serviceAccountName = %q, want %q", got, tc.fullname)
			}
			if got := readerConfig(t, m, tc.fullname+"-chat", "chat")["internal_gateway_ip"]; got != tc.fullname+"-gateway" {
				t.Errorf("internal_gateway_ip = %v, want %s-gateway", got, tc.fullname)
			}
		})
	}
}

func TestNameGuards(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	for _, tc := range []struct {
		name, values, release string
		wantErr               string // "" means it must render
	}{
		{name: "exactly 63 characters", values: "fullnameOverride: " + long(30) + "\napplications: {" + long(32) + ": {}}\n"},
		{name: "fullname-app over 63", values: "fullnameOverride: " + long(30) + "\napplications: {" + long(33) + ": {}}\n", wantErr: "is 64 characters, more than the 63"},
		// The values schema refuses application names that are not DNS
		// labels of at most 50 characters (the chart's own checks below it
		// are for values that skipped the schema).
		{name: "application name over 50", values: "fullnameOverride: x\napplications: {" + long(52) + ": {}}\n", wantErr: "maxLength: got 52, want 50"},
		{name: "not a DNS label", values: "applications: {Hello_World: {}}\n", wantErr: "'Hello_World' does not match pattern"},
		{name: "gateway name over 63", release: "a-rather-long-release-name-for-a-stack-x", wantErr: "-gateway\" is 64 characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rel := release
			if tc.release != "" {
				rel = tc.release
			}
			_, err := tryRender(t, tc.values, withRelease(rel))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("rendered, want an error containing %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("error = %v\nwant it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestServiceAccount(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		created      bool
		account      string
		automount    bool
	}{
		{name: "default", created: true, account: "my-inference-stack"},
		{name: "named and mounted", values: "serviceAccount: {name: takeoff, automount: true}\n", created: true, account: "takeoff", automount: true},
		{name: "existing account", values: "serviceAccount: {create: false, name: shared}\n", account: "shared"},
		{name: "namespace default", values: "serviceAccount: {create: false}\n", account: "default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, tc.values+"applications: {chat: {}}\n")
			sas := 0
			for key := range m.docs {
				if strings.HasPrefix(key, "ServiceAccount/") {
					sas++
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tc.created]; sas != want || (tc.created && !m.has("ServiceAccount", tc.account)) {
				t.Fatalf("ServiceAccounts rendered: %v, want %q created=%v", m.kinds(), tc.account, tc.created)
			}
			for _, name := range []string{"my-inference-stack-gateway", "my-inference-stack-chat"} {
				pod := deployment(t, m, name).Spec.Template.Spec
				if pod.ServiceAccountName != tc.account || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken != tc.automount {
					t.Errorf("%s: account %q automount %v, want %q %v", name, pod.ServiceAccountName, pod.AutomountServiceAccountToken, tc.account, tc.automount)
				}
			}
		})
	}
}

func TestIngress(t *testing.T) {
	if m := render(t, ""); m.has("Ingress", "my-inference-stack-gateway") {
		t.Fatal("Ingress rendered while disabled")
	}
	m := render(t, `
gateway:
  ingress:
    enabled: true
    className: nginx
    annotations: {cert-manager.io/cluster-issuer: letsencrypt}
    hosts:
      - host: takeoff.example.com
        paths: [{path: /}, {path: /v1, pathType: Exact}]
      - host: api.example.com
    tls: [{secretName: takeoff-tls, hosts: [takeoff.example.com]}]
`)
	ing := decode[networkingv1.Ingress](t, m, "Ingress", "my-inference-stack-gateway")
	if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "nginx" || ing.Annotations["cert-manager.io/cluster-issuer"] != "letsencrypt" {
		t.Errorf("ingress class/annotations = %v %v", ing.Spec.IngressClassName, ing.Annotations)
	}
	if len(ing.Spec.TLS) != 1 || ing.Spec.TLS[0].SecretName != "takeoff-tls" {
		t.Errorf("ingress tls = %+v", ing.Spec.TLS)
	}
	var got []string
	for _, rule := range ing.Spec.Rules {
		if rule.HTTP == nil {
			t.Fatalf("rule for %q has no paths", rule.Host)
		}
		for _, p := range rule.HTTP.Paths {
			got = append(got, rule.Host+p.Path+" "+string(*p.PathType)+" -> "+p.Backend.Service.Name+":"+p.Backend.Service.Port.Name)
		}
	}
	want := []string{
		"takeoff.example.com/ Prefix -> my-inference-stack-gateway:http",
		"takeoff.example.com/v1 Exact -> my-inference-stack-gateway:http",
		"api.example.com/ Prefix -> my-inference-stack-gateway:http", // no paths: the whole host
	}
	if !slices.Equal(got, want) {
		t.Errorf("ingress paths = %v, want %v", got, want)
	}
}

func TestScaledObject(t *testing.T) {
	const scaled = `
gateway: {config: {internalPort: 4005}}
applicationTemplate:
  replicaCount: 2
  scaling: {enabled: true, metricTarget: {value: 7}, annotations: {autoscaling.keda.sh/paused: "true"}}
applications:
  chat: {readerConfig: {consumerGroup: chatters}}
  fixed: {scaling: {enabled: false}}
`
	for _, tc := range []struct {
		name   string
		values string
		keda   bool
		scaled bool // chat has a ScaledObject and no replicas
		warns  bool // NOTES say KEDA is missing
	}{
		{name: "scaling disabled", values: "applications: {chat: {}}\n", keda: true},
		{name: "scaling enabled with KEDA", values: scaled, keda: true, scaled: true},
		{name: "scaling enabled without KEDA", values: scaled, warns: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []renderOption
			if tc.keda {
				opts = append(opts, withKEDA())
			}
			m := render(t, tc.values, opts...)
			chat := deployment(t, m, "my-inference-stack-chat")
			if tc.scaled != (chat.Spec.Replicas == nil) {
				t.Errorf("chat replicas = %v, want them omitted only under a ScaledObject", chat.Spec.Replicas)
			}
			if m.has("ScaledObject", "my-inference-stack-fixed") {
				t.Error("ScaledObject rendered for an application with scaling disabled")
			}
			if m.has("Deployment", "my-inference-stack-fixed") {
				if r := deployment(t, m, "my-inference-stack-fixed").Spec.Replicas; r == nil || *r != 2 {
					t.Errorf("fixed application replicas = %v, want the template's 2", r)
				}
			}
			if warned := strings.Contains(m.notes, "does not serve keda.sh/v1alpha1"); warned != tc.warns {
				t.Errorf("NOTES warn about KEDA = %v, want %v:\n%s", warned, tc.warns, m.notes)
			}
			if !tc.scaled {
				if m.has("ScaledObject", "my-inference-stack-chat") {
					t.Fatal("ScaledObject rendered")
				}
				return
			}
			so := decode[scaledObject](t, m, "ScaledObject", "my-inference-stack-chat")
			if so.APIVersion != "keda.sh/v1alpha1" || so.Metadata.Annotations["autoscaling.keda.sh/paused"] != "true" ||
				so.Metadata.Labels["app.kubernetes.io/component"] != "application-chat" {
				t.Errorf("ScaledObject metadata = %s %+v", so.APIVersion, so.Metadata)
			}
			ref := so.Spec.ScaleTargetRef
			if ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || ref.Name != "my-inference-stack-chat" {
				t.Errorf("scaleTargetRef = %+v", ref)
			}
			for field, got := range map[string]*int32{"pollingInterval": so.Spec.PollingInterval, "initialCooldownPeriod": so.Spec.InitialCooldownPeriod, "cooldownPeriod": so.Spec.CooldownPeriod, "minReplicaCount": so.Spec.MinReplicaCount, "maxReplicaCount": so.Spec.MaxReplicaCount} {
				want := map[string]int32{"pollingInterval": 60, "initialCooldownPeriod": 300, "cooldownPeriod": 300, "minReplicaCount": 1, "maxReplicaCount": 4}[field]
				if got == nil || *got != want {
					t.Errorf("spec.%s = %v, want %d", field, got, want)
				}
			}
			if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "external-push" {
				t.Fatalf("triggers = %+v", so.Spec.Triggers)
			}
			wantMeta := map[string]string{
				"scalerAddress":   "my-inference-stack-gateway.models.svc.cluster.local:4005",
				"target_chatters": "7",
			}
			if !reflect.DeepEqual(so.Spec.Triggers[0].Metadata, wantMeta) {
				t.Errorf("trigger metadata = %v, want %v", so.Spec.Triggers[0].Metadata, wantMeta)
			}
		})
	}
}

// TestReaderService: the reader Service exposes the reader's ports and
// disappears when there are none.
func TestReaderService(t *testing.T) {
	m := render(t, `
applications:
  custom: {ports: {metrics: 9090}, service: {type: NodePort, annotations: {a: b}}}
  none: {ports: {management: 0}}
`)
	svc := decode[corev1.Service](t, m, "Service", "my-inference-stack-custom")
	var got []string
	for _, p := range svc.Spec.Ports {
		got = append(got, p.Name+"="+p.TargetPort.String())
	}
	if want := []string{"management=management", "metrics=metrics"}; !slices.Equal(got, want) || svc.Spec.Type != corev1.ServiceTypeNodePort || svc.Annotations["a"] != "b" {
		t.Errorf("custom Service ports %v type %s annotations %v; want %v NodePort", got, svc.Spec.Type, svc.Annotations, want)
	}
	if ports := container(t, deployment(t, m, "my-inference-stack-custom")).Ports; len(ports) != 2 {
		t.Errorf("custom container ports = %v, want management and metrics", ports)
	}
	if m.has("Service", "my-inference-stack-none") {
		t.Error("reader Service rendered without ports")
	}
	if ports := container(t, deployment(t, m, "my-inference-stack-none")).Ports; len(ports) != 0 {
		t.Errorf("none container ports = %v, want none", ports)
	}
}

// TestSecurityContextOverride: hardened defaults, each field overridable.
func TestSecurityContextOverride(t *testing.T) {
	m := render(t, "applications: {root: {securityContext: {allowPrivilegeEscalation: true, runAsUser: 0}}}\n")
	sc := container(t, deployment(t, m, "my-inference-stack-root")).SecurityContext
	if sc == nil || !*sc.AllowPrivilegeEscalation || *sc.RunAsUser != 0 || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("securityContext = %+v, want the override merged over the hardened default", sc)
	}
}

// TestYAMLQuoting: reader config values keep their type through the config
// file, which the reader parses as YAML 1.1.
func TestYAMLQuoting(t *testing.T) {
	tricky := map[string]any{
		"modelName":  "unsloth/Llama-3.2-1B-Instruct:latest",
		"quantType":  "yes",
		"onString":   "on",
		"nullString": "null",
		"tilde":      "~",
		"colonSpace": "key: value",
		"hash":       "#not-a-comment",
		"dash":       "- item",
		"number":     "0123",
		"float":      "1e3",
		"hex":        "0x1F",
		"quote":      `it's "quoted"`,
		"multiline":  "line one\nline two",
		"realInt":    float64(8),
		"realBool":   true,
	}
	values, err := yaml.Marshal(map[string]any{"applications": map[string]any{"quoting": map[string]any{"readerConfig": tricky}}})
	if err != nil {
		t.Fatal(err)
	}
	rc := readerConfig(t, render(t, string(values)), "my-inference-stack-quoting", "quoting")
	for key, want := range tricky {
		snake := map[string]string{"modelName": "model_name", "quantType": "quant_type", "onString": "on_string", "nullString": "null_string", "colonSpace": "colon_space", "realInt": "real_int", "realBool": "real_bool"}[key]
		if snake == "" {
			snake = key
		}
		if got := rc[snake]; !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %#v, want %#v", snake, got, want)
		}
	}
}

// TestLint runs Helm's linter in strict mode (warnings fail) over the chart
// directory with several value sets.
func TestLint(t *testing.T) {
	for _, file := range []string{"", "testdata/example.yaml", "testdata/full.yaml"} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			vals := map[string]any{}
			if file != "" {
				v, err := chartutil.ReadValuesFile(file)
				if err != nil {
					t.Fatal(err)
				}
				vals = v.AsMap()
			}
			charttest.Lint(t, namespace, kubeVersion, vals)
		})
	}
}

// TestFullValues renders every optional feature at once; render decodes each
// object strictly into its API type, which is most of the check.
func TestFullValues(t *testing.T) {
	m := renderFile(t, "testdata/full.yaml", withKEDA())
	want := []string{
		"ConfigMap/my-inference-stack-embed", "ConfigMap/my-inference-stack-gateway", "ConfigMap/my-inference-stack-llama",
		"Deployment/my-inference-stack-embed", "Deployment/my-inference-stack-gateway", "Deployment/my-inference-stack-llama",
		"Ingress/my-inference-stack-gateway", "ScaledObject/my-inference-stack-llama",
		"Service/my-inference-stack-embed", "Service/my-inference-stack-gateway", "Service/my-inference-stack-llama",
		"ServiceAccount/my-inference-stack",
	}
	if got := m.kinds(); !slices.Equal(got, want) {
		t.Fatalf("rendered objects:\n got %v\nwant %v", got, want)
	}
	gw := deployment(t, m, "my-inference-stack-gateway")
	if gw.Spec.Template.Labels["team"] != "ml" || gw.Spec.Template.Annotations["prometheus.io/scrape"] != "true" {
		t.Errorf("gateway pod metadata = %v %v", gw.Spec.Template.Labels, gw.Spec.Template.Annotations)
	}
	c := container(t, gw)
	if c.StartupProbe == nil || c.ReadinessProbe == nil || c.LivenessProbe == nil || len(c.VolumeMounts) != 2 {
		t.Errorf("gateway container probes/mounts missing: %+v", c)
	}
	if cfg := configOf(t, m, "my-inference-stack-gateway").Takeoff.ServerConfig; cfg["reader_message_timeout_ms"] != float64(500) || cfg["heartbeat_check_interval"] != float64(1) {
		t.Errorf("gateway server_config = %v", cfg)
	}
	llama := container(t, deployment(t, m, "my-inference-stack-llama"))
	if q := llama.Resources.Limits[gpu]; q.Cmp(resource.MustParse("2")) != 0 || llama.Resources.Limits.Memory().String() != "64Gi" {
		t.Errorf("llama limits = %v", llama.Resources.Limits)
	}
	if embed := deployment(t, m, "my-inference-stack-embed"); *embed.Spec.Replicas != 2 || len(container(t, embed).Resources.Limits) != 0 {
		t.Errorf("embed replicas %d limits %v", *embed.Spec.Replicas, container(t, embed).Resources.Limits)
	}
}

// TestEmbeddedChart: Load ships every file of the chart directory.
func TestEmbeddedChart(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Metadata.Name != "inference-stack" || c.Metadata.Version != "1.1.0" || c.Metadata.AppVersion != "0.22.0-rc20" || c.Metadata.KubeVersion != ">=1.27.0-0" {
		t.Errorf("metadata = %+v", c.Metadata)
	}
	if c.Schema == nil {
		t.Error("values.schema.json not loaded")
	}
	onDisk, err := filepath.Glob("templates/*")
	if err != nil {
		t.Fatal(err)
	}
	var embedded []string
	for _, tpl := range c.Templates {
		embedded = append(embedded, tpl.Name)
	}
	sort.Strings(onDisk)
	sort.Strings(embedded)
	if !slices.Equal(onDisk, embedded) {
		t.Errorf("embedded templates %v, want the directory's %v", embedded, onDisk)
	}
}

// TestUpdateStrategy: readers roll without needing a spare GPU (the old
// pod stops first), each application can choose otherwise, Recreate drops
// the template's rolling parameters, the gateway keeps Kubernetes' default,
// and none of it touches a pod template.
func TestUpdateStrategy(t *testing.T) {
	strategy := func(m manifests, name string) appsv1.DeploymentStrategy {
		return deployment(t, m, name).Spec.Strategy
	}
	base := render(t, `applications: {a: {}, b: {strategy: {rollingUpdate: {maxSurge: 1}}}, c: {strategy: {type: Recreate}}}`)
	a := strategy(base, "my-inference-stack-a")
	if a.Type != appsv1.RollingUpdateDeploymentStrategyType || a.RollingUpdate == nil ||
		a.RollingUpdate.MaxSurge.String() != "0" || a.RollingUpdate.MaxUnavailable.String() != "1" {
		t.Errorf("reader a: %+v, want a rolling update with maxSurge 0, maxUnavailable 1", a)
	}
	if b := strategy(base, "my-inference-stack-b"); b.RollingUpdate == nil || b.RollingUpdate.MaxSurge.String() != "1" || b.RollingUpdate.MaxUnavailable.String() != "1" {
		t.Errorf("reader b: %+v, want maxSurge 1 merged over the template's maxUnavailable 1", b)
	}
	if c := strategy(base, "my-inference-stack-c"); c.Type != appsv1.RecreateDeploymentStrategyType || c.RollingUpdate != nil {
		t.Errorf("reader c: %+v, want Recreate without rolling parameters", c)
	}
	if g := strategy(base, "my-inference-stack-gateway"); g.Type != "" || g.RollingUpdate != nil {
		t.Errorf("gateway: %+v, want Kubernetes' default", g)
	}
	// Another strategy, the same pods.
	other := render(t, `applications: {a: {strategy: {type: Recreate}}, b: {}, c: {}}`)
	for _, name := range []string{"my-inference-stack-a", "my-inference-stack-b", "my-inference-stack-c"} {
		if !reflect.DeepEqual(deployment(t, base, name).Spec.Template, deployment(t, other, name).Spec.Template) {
			t.Errorf("%s: changing the strategy changed the pod template", name)
		}
	}
}
