package v1alpha1

import (
	"reflect"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Size bounds. Every string, list and map of a stack's spec has a bound, so
// that the API server refuses an oversized value at admission, naming its
// field, and no value is large enough to make rendering the stack costly:
// the chart copies applicationTemplate into every application's
// Deployment, ConfigMap, Service and ScaledObject, so what the template
// holds is rendered up to MaxApplications times (a 1.3 MiB env value in
// the template and 32 empty applications rendered 42 MiB).
//
// Where Kubernetes limits a field of the rendered object, the bound is at
// most that limit (names 253 or 63, label values 63, label and annotation
// keys 317, a gMSA credential spec 64 KiB, ...). Elsewhere it is a new
// limit, well above what the field holds in practice: identifiers 253
// characters, paths 1024, free-form strings (env and annotation values)
// MaxValue. The bounds come from the markers on the InferenceStack's own
// types, from NameRules, from BoundRules below and, for whatever those
// leave unbounded inside an embedded Kubernetes type, from
// KubernetesDefault. tools/generate's TestEveryValueIsBounded checks that
// nothing in the spec is unbounded, that no string may exceed MaxValue
// and no list or map of strings MaxValues in all.
//
// The worst case, in characters (the API server counts characters; one is
// up to 4 bytes of UTF-8), of what the template makes the chart render 32
// times:
//
//	one env value                 32 Ki            × 32 =   1 Mi  (was 1.3 Mi × 32 = 42 Mi)
//	env values, in all            64 Ki            × 32 =   2 Mi
//	env names                     128 × 253        × 32 =   1 Mi
//	podAnnotations, in all        64 Ki            × 32 =   2 Mi  (service and scaling annotations as much again, each)
//	probes (one handler each)     3 × 16 × 4 Ki    × 32 =   6 Mi  (exec commands; httpGet headers alike)
//	volumeMounts' paths           32 × 3 × 1024    × 32 =   3 Mi
//	readerConfig's strings        about 5 Ki       × 32 = 160 Ki  (keys it does not know: 64, values unbounded)
//
// No single string holds more than 32 Ki characters and no list or map of
// strings more than 64 Ki. The lists of the embedded Kubernetes types
// nest, though (volumes of projected sources of items of paths, affinity
// terms of match expressions of values), and their bounds multiply: the
// sum of every bound of one Application is about 280 million
// characters, far over what the API server stores in one object (etcd's request limit,
// 1.5 MiB by default). For a stack that fills everything, the object
// limit binds first, and the template renders at most 32 times that; the
// operator, not admission, bounds a whole render. The values of
// readerConfig and gateway config keys the API does not declare (kept for
// newer readers) have no schema to bound them; the API server's object
// limit bounds them too.
const (
	// MaxApplications bounds spec.applications: each application is a
	// reader Deployment serving one model, and the template is rendered
	// once per application.
	MaxApplications = 32
	// MaxValue bounds one free-form string: an environment variable's
	// value, an annotation's value.
	MaxValue = 32 << 10
	// MaxValues bounds the sum of the values of one env list, and of the
	// keys and values of one annotation map.
	MaxValues = 64 << 10
	// MaxPath bounds a file system or URL path (Linux refuses paths of
	// 4096 bytes and more; the paths pods mount are a few dozen).
	MaxPath = 1024
	// MaxArgument bounds a probe's command item or an HTTP header value.
	MaxArgument = 4096
	// MaxURI bounds a URI, an image reference or a token audience.
	MaxURI = 1024
	// Kubernetes' own limits on names, keys and label values.
	maxDNSSubdomain = 253
	maxDNSLabel     = 63
	maxQualifiedKey = 317
	maxLabelValue   = 63
)

// KubernetesDefault bounds every string, list and map inside an embedded
// Kubernetes type that no rule bounds: strings are identifiers (253, a DNS
// subdomain's limit), int-or-strings quantities, ports or percentages
// (KubernetesIntOrStringLength), lists and maps a few entries (16), map
// keys identifiers (253).
var KubernetesDefault = FieldBounds{MaxLength: maxDNSSubdomain, MaxItems: 16, MaxProperties: 16, MaxKeyLength: maxDNSSubdomain}

// KubernetesIntOrStringLength bounds an int-or-string inside a Kubernetes
// type that no rule bounds.
const KubernetesIntOrStringLength = 64

// annotations bounds an annotation map's values and their total, as
// Kubernetes does (256 KiB for all of an object's annotations), tighter.
var annotations = FieldBounds{MaxLength: MaxValue, MaxTotal: MaxValues}

// paths bounds each named field of a Kubernetes type to MaxPath.
func paths(fields ...string) map[string]FieldBounds {
	m := map[string]FieldBounds{}
	for _, f := range fields {
		m[f] = FieldBounds{MaxLength: MaxPath}
	}
	return m
}

// BoundRules are the size bounds markers cannot express: the values of
// the InferenceStack's annotation maps, and the fields of the embedded
// Kubernetes types whose KubernetesDefault does not fit.
var BoundRules = []SchemaRule{
	{Owner: reflect.TypeFor[ServiceAccountSpec](), Fields: map[string]FieldBounds{"annotations": annotations}},
	{Owner: reflect.TypeFor[PodSettings](), Fields: map[string]FieldBounds{"podAnnotations": annotations}},
	{Owner: reflect.TypeFor[GatewayService](), Fields: map[string]FieldBounds{"annotations": annotations}},
	{Owner: reflect.TypeFor[ApplicationService](), Fields: map[string]FieldBounds{"annotations": annotations}},
	{Owner: reflect.TypeFor[Ingress](), Fields: map[string]FieldBounds{"annotations": annotations}},
	{Owner: reflect.TypeFor[Scaling](), Fields: map[string]FieldBounds{"annotations": annotations}},

	// Environment: the value is free-form (its list's total is bounded
	// on PodSettings.env); a field path may hold a label or annotation key.
	{Owner: reflect.TypeFor[corev1.EnvVar](), Fields: map[string]FieldBounds{"value": {MaxLength: MaxValue}}},
	{Owner: reflect.TypeFor[corev1.ObjectFieldSelector](), Fields: map[string]FieldBounds{"fieldPath": {MaxLength: 512}}},
	{Owner: reflect.TypeFor[corev1.FileKeySelector](), Fields: paths("path")},

	// Probes.
	{Owner: reflect.TypeFor[corev1.ExecAction](), Fields: map[string]FieldBounds{"command": {MaxItems: 16, MaxLength: MaxArgument}}},
	{Owner: reflect.TypeFor[corev1.HTTPGetAction](), Fields: paths("path")},
	{Owner: reflect.TypeFor[corev1.HTTPHeader](), Fields: map[string]FieldBounds{"value": {MaxLength: MaxArgument}}},

	// Security contexts. Linux has 41 capabilities; Kubernetes limits a
	// gMSA credential spec to 64 KiB (they are "a few hundred bytes") and
	// a Windows user name to a 255-character domain and 104-character user.
	{Owner: reflect.TypeFor[corev1.Capabilities](), Fields: map[string]FieldBounds{"add": {MaxItems: 64}, "drop": {MaxItems: 64}}},
	{Owner: reflect.TypeFor[corev1.WindowsSecurityContextOptions](), Fields: map[string]FieldBounds{"gmsaCredentialSpec": {MaxLength: 16 << 10}, "runAsUserName": {MaxLength: 360}}},
	{Owner: reflect.TypeFor[corev1.SeccompProfile](), Fields: paths("localhostProfile")},
	{Owner: reflect.TypeFor[corev1.AppArmorProfile](), Fields: paths("localhostProfile")},
	{Owner: reflect.TypeFor[corev1.PodSecurityContext](), Fields: map[string]FieldBounds{"supplementalGroups": {MaxItems: 64}}},

	// Resources are named by qualified names (nvidia.com/gpu).
	{Owner: reflect.TypeFor[corev1.ResourceRequirements](), Fields: map[string]FieldBounds{
		"limits":   {MaxProperties: 32, MaxKeyLength: maxQualifiedKey},
		"requests": {MaxProperties: 32, MaxKeyLength: maxQualifiedKey},
	}},
	{Owner: reflect.TypeFor[corev1.VolumeResourceRequirements](), Fields: map[string]FieldBounds{
		"limits":   {MaxKeyLength: maxQualifiedKey},
		"requests": {MaxKeyLength: maxQualifiedKey},
	}},

	// Scheduling: taint and label keys are qualified names, their values
	// label values; namespaces are DNS labels.
	{Owner: reflect.TypeFor[corev1.Toleration](), Fields: map[string]FieldBounds{"key": {MaxLength: maxQualifiedKey}, "value": {MaxLength: maxLabelValue}}},
	{Owner: reflect.TypeFor[corev1.NodeSelectorRequirement](), Fields: map[string]FieldBounds{"key": {MaxLength: maxQualifiedKey}, "values": {MaxItems: 64}}},
	{Owner: reflect.TypeFor[metav1.LabelSelector](), Fields: map[string]FieldBounds{"matchLabels": {MaxProperties: 32, MaxKeyLength: maxQualifiedKey, MaxLength: maxLabelValue}}},
	{Owner: reflect.TypeFor[metav1.LabelSelectorRequirement](), Fields: map[string]FieldBounds{"key": {MaxLength: maxQualifiedKey}, "values": {MaxItems: 64, MaxLength: maxLabelValue}}},
	{Owner: reflect.TypeFor[corev1.PodAffinityTerm](), Fields: map[string]FieldBounds{
		"topologyKey":       {MaxLength: maxQualifiedKey},
		"namespaces":        {MaxItems: 64, MaxLength: maxDNSLabel},
		"matchLabelKeys":    {MaxLength: maxQualifiedKey},
		"mismatchLabelKeys": {MaxLength: maxQualifiedKey},
	}},

	// Volumes: paths, and the lists of keys a volume projects.
	{Owner: reflect.TypeFor[corev1.VolumeMount](), Fields: paths("mountPath", "subPath", "subPathExpr")},
	{Owner: reflect.TypeFor[corev1.HostPathVolumeSource](), Fields: paths("path")},
	{Owner: reflect.TypeFor[corev1.NFSVolumeSource](), Fields: paths("path")},
	{Owner: reflect.TypeFor[corev1.GlusterfsVolumeSource](), Fields: paths("path")},
	{Owner: reflect.TypeFor[corev1.CephFSVolumeSource](), Fields: paths("path", "secretFile")},
	{Owner: reflect.TypeFor[corev1.RBDVolumeSource](), Fields: paths("keyring")},
	{Owner: reflect.TypeFor[corev1.VsphereVirtualDiskVolumeSource](), Fields: paths("volumePath")},
	{Owner: reflect.TypeFor[corev1.KeyToPath](), Fields: paths("path")},
	{Owner: reflect.TypeFor[corev1.DownwardAPIVolumeFile](), Fields: paths("path")},
	{Owner: reflect.TypeFor[corev1.ClusterTrustBundleProjection](), Fields: paths("path")},
	{Owner: reflect.TypeFor[corev1.PodCertificateProjection](), Fields: map[string]FieldBounds{
		"credentialBundlePath": {MaxLength: MaxPath},
		"keyPath":              {MaxLength: MaxPath},
		"certificateChainPath": {MaxLength: MaxPath},
		"userAnnotations":      {MaxKeyLength: maxQualifiedKey},
	}},
	{Owner: reflect.TypeFor[corev1.ServiceAccountTokenProjection](), Fields: map[string]FieldBounds{"audience": {MaxLength: MaxURI}, "path": {MaxLength: MaxPath}}},
	{Owner: reflect.TypeFor[corev1.GitRepoVolumeSource](), Fields: map[string]FieldBounds{"repository": {MaxLength: MaxURI}, "directory": {MaxLength: MaxPath}}},
	{Owner: reflect.TypeFor[corev1.AzureDiskVolumeSource](), Fields: map[string]FieldBounds{"diskURI": {MaxLength: MaxURI}}},
	{Owner: reflect.TypeFor[corev1.ImageVolumeSource](), Fields: map[string]FieldBounds{"reference": {MaxLength: MaxURI}}},
	{Owner: reflect.TypeFor[corev1.CSIVolumeSource](), Fields: map[string]FieldBounds{
		"driver":           {MaxLength: maxDNSLabel},
		"volumeAttributes": {MaxProperties: 32, MaxLength: MaxPath},
	}},
	{Owner: reflect.TypeFor[corev1.ConfigMapVolumeSource](), Fields: map[string]FieldBounds{"items": {MaxItems: 64}}},
	{Owner: reflect.TypeFor[corev1.SecretVolumeSource](), Fields: map[string]FieldBounds{"items": {MaxItems: 64}}},
	{Owner: reflect.TypeFor[corev1.ConfigMapProjection](), Fields: map[string]FieldBounds{"items": {MaxItems: 64}}},
	{Owner: reflect.TypeFor[corev1.SecretProjection](), Fields: map[string]FieldBounds{"items": {MaxItems: 64}}},
	{Owner: reflect.TypeFor[corev1.DownwardAPIVolumeSource](), Fields: map[string]FieldBounds{"items": {MaxItems: 64}}},
	{Owner: reflect.TypeFor[corev1.DownwardAPIProjection](), Fields: map[string]FieldBounds{"items": {MaxItems: 64}}},
}
