// Package v1alpha1 holds the InferenceStack API (models.takeoff.co/v1alpha1).
//
// The operator reconciles InferenceStacks as unstructured objects (the spec is
// the values of the inference-stack chart); these types exist to generate the
// CRD's structural schema and the chart's values.schema.json from one source.
//
// # Validation
//
// A stack's validation is defined here and only here: the kubebuilder
// markers on the types; NameRules (names.go), the Kubernetes name formats
// of the fields that become object names; SchemaRules (schemarules.go),
// what markers cannot express (rules on the embedded Kubernetes types,
// rules derived from a type's fields, the bound of metadata.name); and
// BoundRules and KubernetesDefault (bounds.go), the size bounds of what
// markers cannot reach (map values, the embedded Kubernetes types).
// `make generate` writes them into the CRD (crds/), and from the CRD into
// the chart's values.schema.json, which the operator validates every
// release's values with before Helm renders them. Nothing else declares a
// rule.
//
// # Adding a spec field
//
//  1. Declare the field, its documentation and its markers on its struct in
//     inferencestack_types.go, with a size bound if it is a string, list or
//     map (MaxLength, MaxItems, MaxProperties; see bounds.go). A rule
//     markers cannot express goes in schemarules.go (an embedded Kubernetes
//     type, a derived rule), for a field that becomes an object name or a
//     label in NameRules in names.go, and for a map's values in BoundRules
//     in bounds.go.
//  2. Use it in the chart: charts/inference-stack/templates/, with its
//     default and a "# --" comment in charts/inference-stack/values.yaml if
//     it has one.
//  3. Run `make generate` (go run ./tools/generate): it rewrites
//     zz_generated.deepcopy.go, crds/models.takeoff.co_inferencestacks.yaml
//     and charts/inference-stack/values.schema.json (and the RBAC it also
//     owns). `make test` fails while any of them is stale.
package v1alpha1
