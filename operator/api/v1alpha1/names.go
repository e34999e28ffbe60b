package v1alpha1

import (
	"reflect"

	corev1 "k8s.io/api/core/v1"
)

// Name formats and where they apply: every field (or map key) of a stack
// that ends up as a name in a Kubernetes object, with the rule Kubernetes
// itself applies to that name. `make generate` writes them into the CRD (a
// pattern and maxLength for a value, a CEL rule for map keys) and into the
// chart's values.schema.json (a pattern, or propertyNames), so a name is
// refused where it enters, with its field path, instead of failing when
// the chart's objects are applied. This table is their one definition.

// NameFormat is one of Kubernetes' name formats
// (k8s.io/apimachinery/pkg/util/validation), as an RE2 pattern that both
// the API server and JSON Schema validators accept. Values may be empty
// (the chart's "unset"); keys may not.
//
// +kubebuilder:object:generate=false
type NameFormat struct {
	// Name says what it is, for messages ("a DNS label").
	Name string
	// Pattern matches a whole non-empty name.
	Pattern string
	// MaxLength bounds the name (0: no bound of its own).
	MaxLength int
}

// Formats. The fragments follow apimachinery's validation package.
const (
	dns1123Label     = `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
	dns1123Subdomain = dns1123Label + `(\.` + dns1123Label + `)*`
	// A qualified name (label and annotation keys): an optional DNS
	// subdomain prefix and '/', then 1-63 alphanumerics, '-', '_', '.'.
	qualifiedName = `(` + dns1123Subdomain + `/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?`
)

var (
	DNSLabel     = NameFormat{Name: "a DNS label (lower-case letters, digits and '-', starting and ending with a letter or digit)", Pattern: dns1123Label, MaxLength: 63}
	DNSSubdomain = NameFormat{Name: "a DNS subdomain (DNS labels joined by '.')", Pattern: dns1123Subdomain, MaxLength: 253}
	// WildcardDNSSubdomain is a host name an Ingress rule may match,
	// "*." allowed in front.
	WildcardDNSSubdomain = NameFormat{Name: "a host name (a DNS subdomain, optionally starting with '*.')", Pattern: `(\*\.)?` + dns1123Subdomain, MaxLength: 253}
	// IANAServiceName is a port name: 1-15 lower-case letters, digits and
	// single '-' between them, with at least one letter.
	IANAServiceName = NameFormat{Name: "an IANA service name (at most 15 lower-case letters, digits and single '-' between them, with a letter)", Pattern: `([a-z0-9]+-)*[a-z0-9]*[a-z][a-z0-9]*(-[a-z0-9]+)*`, MaxLength: 15}
	// CIdentifier is an environment variable name the chart declares.
	CIdentifier   = NameFormat{Name: "a C identifier (letters, digits and '_', not starting with a digit)", Pattern: `[A-Za-z_][A-Za-z0-9_]*`, MaxLength: 128}
	QualifiedName = NameFormat{Name: "a label or annotation key (an optional DNS subdomain and '/', then at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit)", Pattern: qualifiedName, MaxLength: 317}
	LabelValue    = NameFormat{Name: "a label value (at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit)", Pattern: `[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?`, MaxLength: 63}
	// ImageRepository is an image reference without tag or digest: an
	// optional registry host (and port), then lower-case path components.
	ImageRepository = NameFormat{Name: "an image repository (an optional registry host[:port]/ and lower-case path components)", Pattern: `([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*(:[0-9]+)?/)?[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)*`, MaxLength: 255}
)

// Shorter returns f with a lower maximum length.
func (f NameFormat) Shorter(max int) NameFormat {
	f.MaxLength = max
	return f
}

// NameRule says that a field of a struct holds a name (Value), or is a map
// whose keys (Key) and values (Value) are names. Owner is the struct that
// declares the field; a struct that embeds it inline (PodSettings in
// GatewaySpec and Application) gets the rule too.
//
// +kubebuilder:object:generate=false
type NameRule struct {
	Owner reflect.Type
	// Field is the JSON name of the field.
	Field string
	// Key, for a map, is the format of its keys.
	Key *NameFormat
	// Value is the format of the field (a string), of its items (a list
	// of strings) or of its values (a map of strings).
	Value *NameFormat
	// MaxProperties bounds a map whose keys are checked (the API server's
	// CEL cost estimate needs a bound).
	MaxProperties int
}

func format(f NameFormat) *NameFormat { return &f }

// NameRules are the name-like fields of an InferenceStack.
var NameRules = []NameRule{
	{Owner: reflect.TypeFor[InferenceStackSpec](), Field: "nameOverride", Value: format(DNSLabel.Shorter(40))},
	{Owner: reflect.TypeFor[InferenceStackSpec](), Field: "fullnameOverride", Value: format(DNSLabel.Shorter(55))},
	{Owner: reflect.TypeFor[InferenceStackSpec](), Field: "applications", Key: format(DNSLabel.Shorter(50)), MaxProperties: MaxApplications},
	{Owner: reflect.TypeFor[ServiceAccountSpec](), Field: "name", Value: format(DNSSubdomain)},
	{Owner: reflect.TypeFor[ServiceAccountSpec](), Field: "annotations", Key: format(QualifiedName), MaxProperties: 128},
	{Owner: reflect.TypeFor[Image](), Field: "repository", Value: format(ImageRepository)},
	{Owner: reflect.TypeFor[PodSettings](), Field: "podLabels", Key: format(QualifiedName), Value: format(LabelValue), MaxProperties: 64},
	{Owner: reflect.TypeFor[PodSettings](), Field: "podAnnotations", Key: format(QualifiedName), MaxProperties: 128},
	{Owner: reflect.TypeFor[PodSettings](), Field: "nodeSelector", Key: format(QualifiedName), Value: format(LabelValue), MaxProperties: 32},
	{Owner: reflect.TypeFor[PodSettings](), Field: "ports", Key: format(IANAServiceName), MaxProperties: 16},
	{Owner: reflect.TypeFor[GatewayService](), Field: "annotations", Key: format(QualifiedName), MaxProperties: 128},
	{Owner: reflect.TypeFor[GatewayService](), Field: "ports", Key: format(IANAServiceName), MaxProperties: 16},
	{Owner: reflect.TypeFor[ApplicationService](), Field: "annotations", Key: format(QualifiedName), MaxProperties: 128},
	{Owner: reflect.TypeFor[Ingress](), Field: "className", Value: format(DNSSubdomain)},
	{Owner: reflect.TypeFor[Ingress](), Field: "annotations", Key: format(QualifiedName), MaxProperties: 128},
	{Owner: reflect.TypeFor[IngressHost](), Field: "host", Value: format(WildcardDNSSubdomain)},
	{Owner: reflect.TypeFor[IngressTLS](), Field: "hosts", Value: format(WildcardDNSSubdomain)},
	{Owner: reflect.TypeFor[IngressTLS](), Field: "secretName", Value: format(DNSSubdomain)},
	{Owner: reflect.TypeFor[Scaling](), Field: "annotations", Key: format(QualifiedName), MaxProperties: 128},
	{Owner: reflect.TypeFor[AccessTokenSource](), Field: "envName", Value: format(CIdentifier)},
	{Owner: reflect.TypeFor[SecretKeyRef](), Field: "name", Value: format(DNSSubdomain)},
	{Owner: reflect.TypeFor[ServicePort](), Field: "targetPort", Value: format(IANAServiceName)},
	// Kubernetes types the chart renders names from. LocalObjectReference
	// is also inline in the ConfigMap and Secret key selectors of env.
	{Owner: reflect.TypeFor[corev1.LocalObjectReference](), Field: "name", Value: format(DNSSubdomain)},
	{Owner: reflect.TypeFor[corev1.Volume](), Field: "name", Value: format(DNSLabel)},
	{Owner: reflect.TypeFor[corev1.VolumeMount](), Field: "name", Value: format(DNSLabel)},
}
