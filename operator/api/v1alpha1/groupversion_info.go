// +kubebuilder:object:generate=true
// +groupName=models.takeoff.co
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the InferenceStack API.
	GroupVersion = schema.GroupVersion{Group: "models.takeoff.co", Version: "v1alpha1"}

	// SchemeBuilder registers the API types with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the API types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Kind is the kind of the custom resource.
const Kind = "InferenceStack"

// OperatorVersionLabel selects which operator major reconciles a stack; its
// value is "v<MAJOR>" (for example "v0").
const OperatorVersionLabel = "operatorVersion"
