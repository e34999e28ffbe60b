package v1alpha1

import (
	"reflect"

	corev1 "k8s.io/api/core/v1"
)

// Validation that markers cannot express: the Kubernetes types the spec
// embeds (corev1.Probe, corev1.EnvVar) carry no markers of ours, a CRD may
// bound metadata.name only in its schema, and some rules are derived from
// a type's fields. `make generate` writes them into the CRD, and from it
// into the chart's values.schema.json, wherever their type occurs in the
// spec. Each rejects, at admission and with the field's path, a value that
// would otherwise be stored and fail only later, when the chart's objects
// are applied (ReleaseFailed) or the reader reads its config. These
// declarations, NameRules and the markers on the types are the one
// definition of a stack's validation.

// MaxStackName bounds metadata.name: the stack's name is the Helm release
// name, which Helm limits to 53 characters. The bound also lets the API
// server's CEL cost estimator bound the name-length rules that read
// metadata.name.
const MaxStackName = 53

// SchemaRule adds validation to the schema of the Go type Owner wherever
// it occurs in the spec.
//
// +kubebuilder:object:generate=false
type SchemaRule struct {
	Owner reflect.Type
	// At, if set, limits the rule to the occurrences whose path ends with
	// one of these (".livenessProbe").
	At []string
	// Fields bounds properties of Owner, by JSON name.
	Fields map[string]FieldBounds
	// Rules are CEL rules on Owner, in order.
	Rules []CELRule
	// CaseHints: Owner keeps keys it does not know (for readers newer
	// than this API), so a known field spelt with another case would be
	// kept and silently ignored. CEL cannot see keys the schema does not
	// declare, so the likely misspellings of every field (all lower case,
	// and with a capital first letter) are declared with the field's
	// type, and a rule rejects each with a hint.
	CaseHints bool
}

// FieldBounds are the schema keywords a SchemaRule sets on one property;
// nil, empty or zero leaves a keyword as it is. The maxima only ever
// lower a bound the property already has.
//
// +kubebuilder:object:generate=false
type FieldBounds struct {
	Minimum   *int
	Maximum   *int
	MinLength *int
	Pattern   string
	// MaxLength bounds a string (or int-or-string), each string of a list,
	// or each value of a map.
	MaxLength int
	// MaxItems bounds a list, MaxProperties a map.
	MaxItems      int
	MaxProperties int
	// MaxKeyLength bounds a map's keys, with a CEL rule: a structural
	// schema cannot bound keys otherwise.
	MaxKeyLength int
	// MaxTotal bounds the sum of the lengths of a map's keys and values,
	// with a CEL rule (as Kubernetes bounds an object's annotations).
	MaxTotal int
}

// CELRule is one x-kubernetes-validations entry; empty fields are left out.
//
// +kubebuilder:object:generate=false
type CELRule struct {
	Rule      string
	Message   string
	FieldPath string
	Reason    string
}

func bound(n int) *int { return &n }

// SchemaRules are the rules of the InferenceStack's types that markers
// cannot express.
var SchemaRules = []SchemaRule{
	// The API server rejects negative probe timings, a
	// terminationGracePeriodSeconds of 0 or less, and a probe without
	// exactly one handler.
	{
		Owner: reflect.TypeFor[corev1.Probe](),
		Fields: map[string]FieldBounds{
			"initialDelaySeconds":           {Minimum: bound(0)},
			"timeoutSeconds":                {Minimum: bound(0)},
			"periodSeconds":                 {Minimum: bound(0)},
			"successThreshold":              {Minimum: bound(0)},
			"failureThreshold":              {Minimum: bound(0)},
			"terminationGracePeriodSeconds": {Minimum: bound(1)},
		},
		Rules: []CELRule{{
			// An empty probe is not rendered, so only a probe with
			// settings needs its handler.
			Rule: "[has(self.exec), has(self.httpGet), has(self.tcpSocket), has(self.grpc)].filter(h, h).size() == " +
				"(has(self.initialDelaySeconds) || has(self.timeoutSeconds) || has(self.periodSeconds) || has(self.successThreshold) || has(self.failureThreshold) || has(self.terminationGracePeriodSeconds) || " +
				"has(self.exec) || has(self.httpGet) || has(self.tcpSocket) || has(self.grpc) ? 1 : 0)",
			Message: "a probe needs exactly one of exec, httpGet, tcpSocket and grpc",
		}},
	},
	// Liveness and startup probes must have successThreshold 1 (0 is
	// defaulted to 1).
	{
		Owner:  reflect.TypeFor[corev1.Probe](),
		At:     []string{".livenessProbe", ".startupProbe"},
		Fields: map[string]FieldBounds{"successThreshold": {Maximum: bound(1)}},
	},
	// An environment variable name is printable ASCII other than '=' (the
	// rule of Kubernetes 1.30 and later), and value and valueFrom exclude
	// each other.
	{
		Owner:  reflect.TypeFor[corev1.EnvVar](),
		Fields: map[string]FieldBounds{"name": {Pattern: `^[ -<>-~]+$`, MinLength: bound(1)}},
		Rules: []CELRule{{
			Rule:      "!has(self.valueFrom) || !has(self.value) || size(self.value) == 0",
			Message:   "set value or valueFrom, not both",
			FieldPath: ".valueFrom",
		}},
	},
	// readerConfig keeps keys it does not know: tensorparallel would be
	// kept and ignored.
	{Owner: reflect.TypeFor[ReaderConfig](), CaseHints: true},
}
