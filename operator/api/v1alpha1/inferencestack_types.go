package v1alpha1

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// InferenceStack is a gateway plus one reader Deployment per model
// application, templated from the inference-stack chart: the spec is the
// chart's values. The label operatorVersion: v<MAJOR> chooses the operator
// major that reconciles it.
//
// metadata.name is at most 53 characters (it is the Helm release name).
// Object names are <fullname>-gateway and <fullname>-<application>, where
// fullname is fullnameOverride, or the stack's name when it already contains
// the chart name (nameOverride, default "inference-stack"), or
// <name>-<chart name>. Each must be a DNS label (63 characters at most).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=istack;istacks,categories=takeoff
// +kubebuilder:printcolumn:name="Operator",type=string,JSONPath=`.metadata.labels.operatorVersion`,description="Operator major that reconciles this stack"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="Whether every Deployment of the stack is available with all its replicas updated"
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.available`,description="Available replicas of all the stack's Deployments, of those desired"
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`,description="The gateway's in-cluster URL"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,description="Why the stack is (not) ready"
// +kubebuilder:printcolumn:name="Deployed",type=string,priority=1,JSONPath=`.status.conditions[?(@.type=="Deployed")].status`,description="Whether the chart release is applied"
// +kubebuilder:printcolumn:name="Message",type=string,priority=1,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.applications) || (has(self.spec.fullnameOverride) && size(self.spec.fullnameOverride) > 0 ? self.spec.applications.all(app, size(self.spec.fullnameOverride) + size(app) <= 62) : (self.metadata.name.contains((has(self.spec.nameOverride) && size(self.spec.nameOverride) > 0 ? self.spec.nameOverride : 'inference-stack')) ? self.spec.applications.all(app, size(self.metadata.name) + size(app) <= 62) : self.spec.applications.all(app, size(self.metadata.name) + size((has(self.spec.nameOverride) && size(self.spec.nameOverride) > 0 ? self.spec.nameOverride : 'inference-stack')) + size(app) <= 61)))",message="every generated object name <fullname>-<application> must be at most 63 characters: shorten the stack name, the application name or set spec.fullnameOverride",fieldPath=".spec.applications",reason="FieldValueInvalid"
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || size(has(self.spec.fullnameOverride) && size(self.spec.fullnameOverride) > 0 ? self.spec.fullnameOverride : (self.metadata.name.contains(has(self.spec.nameOverride) && size(self.spec.nameOverride) > 0 ? self.spec.nameOverride : 'inference-stack') ? self.metadata.name : self.metadata.name + '-' + (has(self.spec.nameOverride) && size(self.spec.nameOverride) > 0 ? self.spec.nameOverride : 'inference-stack'))) + size('-gateway') <= 63",message="the gateway name <fullname>-gateway must be at most 63 characters: shorten the stack name or set spec.fullnameOverride",fieldPath=".spec",reason="FieldValueInvalid"
type InferenceStack struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec InferenceStackSpec `json:"spec,omitempty"`
	// +optional
	Status InferenceStackStatus `json:"status,omitempty"`
}

// InferenceStackList is a list of InferenceStacks.
//
// +kubebuilder:object:root=true
type InferenceStackList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []InferenceStack `json:"items"`
}

// InferenceStackSpec is the values of the inference-stack chart.
type InferenceStackSpec struct {
	// imagePullSecrets are added to every pod of the stack.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// nameOverride replaces the chart name in generated object names.
	// +optional
	NameOverride string `json:"nameOverride,omitempty"`

	// fullnameOverride replaces the whole name prefix of generated objects.
	// +optional
	FullnameOverride string `json:"fullnameOverride,omitempty"`

	// serviceAccount the stack's pods run as.
	// +optional
	ServiceAccount *ServiceAccountSpec `json:"serviceAccount,omitempty"`

	// gateway is the request router in front of the readers.
	// +optional
	Gateway *GatewaySpec `json:"gateway,omitempty"`

	// applicationTemplate holds defaults deep-merged under every entry of
	// applications (the entry wins; maps merge, lists are replaced).
	// +optional
	ApplicationTemplate *Application `json:"applicationTemplate,omitempty"`

	// applications maps an application name (a DNS label) to its reader
	// settings. Each application gets a ConfigMap, a Deployment and a Service
	// named <fullname>-<application>. At most 32.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!('gateway' in self)",message="an application may not be named gateway: its ConfigMap, Deployment and Service would be <fullname>-gateway, the gateway's names",reason="FieldValueInvalid"
	Applications map[string]Application `json:"applications,omitempty"`
}

// ServiceAccountSpec configures the stack's ServiceAccount.
type ServiceAccountSpec struct {
	// create a ServiceAccount for the stack (default true).
	// +optional
	Create *bool `json:"create,omitempty"`
	// automount the ServiceAccount token into pods (default false: the
	// workloads do not call the Kubernetes API).
	// +optional
	Automount *bool `json:"automount,omitempty"`
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// name of the ServiceAccount; defaults to the fullname.
	// +optional
	Name string `json:"name,omitempty"`
}

// Image names a container image.
//
// +kubebuilder:validation:XValidation:rule="!has(self.digest) || size(self.digest) == 0 || !has(self.tag) || !self.tag.contains('@')",message="set the digest in digest or in tag (tag@sha256:...), not both",fieldPath=".digest",reason="FieldValueInvalid"
type Image struct {
	// +optional
	// +kubebuilder:validation:MinLength=1
	Repository string `json:"repository,omitempty"`
	// +optional
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	PullPolicy corev1.PullPolicy `json:"pullPolicy,omitempty"`
	// tag of the image; defaults to the chart's appVersion with a "-gpu"
	// (readers) or "-cpu" (gateway) suffix. It may carry a digest
	// (tag@sha256:<64 hex digits>), which pins the image: the tag is then
	// only a label for humans.
	// +optional
	// +kubebuilder:validation:MaxLength=200
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(@sha256:[a-f0-9]{64})?)?$`
	Tag string `json:"tag,omitempty"`
	// digest pins the image (sha256:<64 hex digits>): the reference becomes
	// repository@digest, or repository:tag@digest when tag is set, and the
	// registry serves exactly that image whatever the tag points to later.
	// +optional
	// +kubebuilder:validation:MaxLength=71
	// +kubebuilder:validation:Pattern=`^(sha256:[a-f0-9]{64})?$`
	Digest string `json:"digest,omitempty"`
}

// PodSettings are the pod-level settings shared by the gateway and readers.
type PodSettings struct {
	// +optional
	Image *Image `json:"image,omitempty"`
	// env of the main container. Reader entries come first, then the
	// template's entries whose names are not set, then required variables.
	// At most 128 entries, whose values total at most 64 Ki characters.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:XValidation:rule="self.map(e, has(e.value) ? size(e.value) : 0).sum() <= 65536",message="the values of env may total at most 65536 characters"
	Env []corev1.EnvVar `json:"env,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	ReplicaCount *int32 `json:"replicaCount,omitempty"`
	// +optional
	PodAnnotations map[string]string `json:"podAnnotations,omitempty"`
	// +optional
	PodLabels map[string]string `json:"podLabels,omitempty"`
	// podSecurityContext is the pod's securityContext (a Kubernetes
	// PodSecurityContext). Readers default to fsGroup 1000.
	// +optional
	PodSecurityContext *corev1.PodSecurityContext `json:"podSecurityContext,omitempty"`
	// securityContext of the main container (a Kubernetes SecurityContext).
	// Defaults: no privilege escalation, every capability dropped, the
	// RuntimeDefault seccomp profile; each field can be overridden.
	// +optional
	SecurityContext *corev1.SecurityContext `json:"securityContext,omitempty"`
	// resources of the main container (a Kubernetes ResourceRequirements).
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
	// livenessProbe of the main container (a Kubernetes Probe).
	// +optional
	LivenessProbe *corev1.Probe `json:"livenessProbe,omitempty"`
	// readinessProbe of the main container (a Kubernetes Probe).
	// +optional
	ReadinessProbe *corev1.Probe `json:"readinessProbe,omitempty"`
	// startupProbe of the main container (a Kubernetes Probe).
	// +optional
	StartupProbe *corev1.Probe `json:"startupProbe,omitempty"`
	// volumes added to the pod (Kubernetes Volumes), after the chart's own.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Volumes []corev1.Volume `json:"volumes,omitempty"`
	// volumeMounts added to the main container (Kubernetes VolumeMounts).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	VolumeMounts []corev1.VolumeMount `json:"volumeMounts,omitempty"`
	// nodeSelector places the pods, e.g. nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// tolerations of the pods (Kubernetes Tolerations). cuda readers also
	// tolerate the nvidia.com/gpu taint unless a toleration covers it.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// affinity of the pods (a Kubernetes Affinity).
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// strategy is the Deployment's update strategy (a Kubernetes
	// DeploymentStrategy). Readers default to RollingUpdate with maxSurge 0
	// and maxUnavailable 1: an old pod stops before its replacement starts,
	// so a rollout never needs a spare GPU on a full node (with a surge the
	// new pod would wait for a GPU the old one never gives back). The
	// gateway keeps Kubernetes' default (25% surge, 25% unavailable). It
	// lies outside the pod template: changing it replaces no pod.
	// +optional
	Strategy *appsv1.DeploymentStrategy `json:"strategy,omitempty"`
	// progressDeadlineSeconds is how long a rollout may make no progress
	// before the Deployment (and the stack's Ready condition, with reason
	// RolloutStalled) says it is stalled. Default 600, Kubernetes'. It lies
	// outside the pod template: changing it replaces no pod.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`
	// ports maps a port name to the container port it listens on.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.all(p, self[p] >= 0 && self[p] <= 65535)",message="ports maps port names to port numbers 1-65535 (0 drops a default port)"
	Ports map[string]int32 `json:"ports,omitempty"`
}

// GatewaySpec configures the gateway.
type GatewaySpec struct {
	PodSettings `json:",inline"`

	// config of the gateway, written in snake_case into its config.yaml under
	// takeoff.server_config.
	// +optional
	Config *GatewayConfig `json:"config,omitempty"`

	// service exposing the gateway.
	// +optional
	Service *GatewayService `json:"service,omitempty"`

	// ingress in front of the gateway service.
	// +optional
	Ingress *Ingress `json:"ingress,omitempty"`
}

// GatewayConfig is the gateway's server configuration. Keys not listed here
// are kept and rendered in snake_case too.
//
// +kubebuilder:pruning:PreserveUnknownFields
// +kubebuilder:validation:MaxProperties=64
type GatewayConfig struct {
	// internalPort the readers connect to (default 3005).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	InternalPort *int32 `json:"internalPort,omitempty"`
}

// ServicePort maps a Service port to a named or numbered container port.
type ServicePort struct {
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// +optional
	TargetPort *intstr.IntOrString `json:"targetPort,omitempty"`
}

// GatewayService configures the gateway's Service.
type GatewayService struct {
	// +optional
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	Type corev1.ServiceType `json:"type,omitempty"`
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// ports maps a Service port name to its port and target.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	Ports map[string]ServicePort `json:"ports,omitempty"`
}

// ApplicationService configures a reader's Service.
type ApplicationService struct {
	// +optional
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	Type corev1.ServiceType `json:"type,omitempty"`
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Ingress exposes the gateway outside the cluster.
//
// +kubebuilder:validation:XValidation:rule="!has(self.enabled) || !self.enabled || (has(self.hosts) && size(self.hosts) > 0)",message="an enabled ingress needs at least one host",fieldPath=".hosts"
type Ingress struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// +optional
	ClassName string `json:"className,omitempty"`
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Hosts []IngressHost `json:"hosts,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	TLS []IngressTLS `json:"tls,omitempty"`
}

// IngressHost is one host rule of the gateway's Ingress.
type IngressHost struct {
	// +kubebuilder:validation:MinLength=1
	Host string `json:"host"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Paths []IngressPath `json:"paths,omitempty"`
}

// IngressPath is one path of an IngressHost.
type IngressPath struct {
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/`
	Path string `json:"path"`
	// +optional
	// +kubebuilder:validation:Enum=Exact;Prefix;ImplementationSpecific
	PathType string `json:"pathType,omitempty"`
}

// IngressTLS is one TLS entry of the gateway's Ingress.
type IngressTLS struct {
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Hosts []string `json:"hosts,omitempty"`
	// +optional
	SecretName string `json:"secretName,omitempty"`
}

// Application is one model application (a reader Deployment), or the
// template merged under every application.
//
// +kubebuilder:validation:XValidation:rule="!has(self.scaling) || !has(self.scaling.enabled) || !self.scaling.enabled || !has(self.replicaCount)",message="replicaCount cannot be set when scaling is enabled: KEDA owns the replica count",fieldPath=".replicaCount"
// +kubebuilder:validation:XValidation:rule="!has(self.accessTokenFrom) || !has(self.readerConfig) || !has(self.readerConfig.accessToken)",message="set accessTokenFrom or readerConfig.accessToken, not both",fieldPath=".accessTokenFrom",reason="FieldValueInvalid"
type Application struct {
	PodSettings `json:",inline"`

	// readerConfig is the reader's configuration, written in snake_case into
	// its config.yaml under takeoff.readers_config.<application>.
	// +optional
	ReaderConfig *ReaderConfig `json:"readerConfig,omitempty"`

	// modelsVolume is the volume mounted at /code/models (without a name); an
	// application's value replaces the template's wholesale. Default: an
	// in-memory emptyDir.
	// +optional
	ModelsVolume *corev1.VolumeSource `json:"modelsVolume,omitempty"`

	// scaling with KEDA (a ScaledObject is created only when KEDA's API is
	// installed).
	// +optional
	Scaling *Scaling `json:"scaling,omitempty"`

	// service exposing the reader.
	// +optional
	Service *ApplicationService `json:"service,omitempty"`

	// accessTokenFrom gives the reader its model hub access token from a
	// Secret, as an environment variable or a mounted file: the token never
	// enters the stack, its Helm release or the reader's ConfigMap (unlike
	// readerConfig.accessToken).
	// +optional
	AccessTokenFrom *AccessTokenSource `json:"accessTokenFrom,omitempty"`
}

// AccessTokenSource is where a reader's model hub access token comes from.
//
// +kubebuilder:validation:XValidation:rule="!has(self.envName) || !(self.envName in ['TAKEOFF_ADD_READER_ID_SUFFIX', 'TAKEOFF_HEADLESS', 'POD_NAME'])",message="envName may not be one of the variables the chart sets",fieldPath=".envName",reason="FieldValueInvalid"
type AccessTokenSource struct {
	// secretKeyRef selects the key of a Secret in the stack's namespace
	// that holds the token.
	SecretKeyRef SecretKeyRef `json:"secretKeyRef"`
	// mountAs: Env (the default) sets the environment variable envName
	// (default TAKEOFF_ACCESS_TOKEN) from the Secret; File mounts the key
	// read-only at /var/run/secrets/takeoff/access-token/token and sets
	// envName (default HF_TOKEN_PATH, which the Hugging Face hub client
	// reads) to that path, so the token is not in the environment either.
	// +optional
	// +kubebuilder:validation:Enum=Env;File
	MountAs string `json:"mountAs,omitempty"`
	// envName is the variable that carries the token (Env) or its file's
	// path (File).
	// +optional
	EnvName string `json:"envName,omitempty"`
}

// SecretKeyRef selects a key of a Secret in the stack's namespace.
type SecretKeyRef struct {
	// name of the Secret.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// key in the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// ReaderConfig is a reader's configuration. Keys not listed here are kept
// (for readers newer than this API) and rendered in snake_case too.
//
// +kubebuilder:pruning:PreserveUnknownFields
// +kubebuilder:validation:MaxProperties=64
// +kubebuilder:validation:XValidation:rule="!(has(self.device) && self.device == 'cpu' && has(self.tensorParallel) && self.tensorParallel > 1)",message="tensorParallel above 1 needs device: cuda",fieldPath=".tensorParallel"
type ReaderConfig struct {
	// modelName is the model to serve (a hub name or a path under /code/models).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ModelName string `json:"modelName,omitempty"`
	// device the reader runs on; cuda readers get a GPU by default.
	// +optional
	// +kubebuilder:validation:Enum=cpu;cuda
	Device string `json:"device,omitempty"`
	// consumerGroup the reader serves.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`
	ConsumerGroup string `json:"consumerGroup,omitempty"`
	// +optional
	BufferRequests *bool `json:"bufferRequests,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxBatchSize *int32 `json:"maxBatchSize,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxSequenceLength *int32 `json:"maxSequenceLength,omitempty"`
	// tensorParallel is the number of GPUs one reader shards the model over;
	// it is the default GPU request of a cuda reader.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	TensorParallel *int32 `json:"tensorParallel,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=64
	QuantType string `json:"quantType,omitempty"`
	// accessToken is the model hub token in plain text. Deprecated: it is
	// stored in the stack, its Helm release and the reader's ConfigMap,
	// readable by anyone who can read those, and earns the stack a
	// PlaintextAccessToken condition; put the token in a Secret and use
	// accessTokenFrom.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	AccessToken string `json:"accessToken,omitempty"`
}

// Scaling configures KEDA autoscaling of a reader from the gateway's queue.
//
// +kubebuilder:validation:XValidation:rule="!has(self.enabled) || !self.enabled || has(self.metricTarget)",message="scaling.metricTarget is required when scaling is enabled",fieldPath=".metricTarget"
type Scaling struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// +optional
	MetricTarget *MetricTarget `json:"metricTarget,omitempty"`
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// +optional
	Spec *ScalingSpec `json:"spec,omitempty"`
}

// MetricTarget is the queue length per replica KEDA aims for.
type MetricTarget struct {
	// +kubebuilder:validation:Minimum=1
	Value int32 `json:"value"`
}

// ScalingSpec holds the ScaledObject's scaling parameters.
//
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicaCount) || !has(self.maxReplicaCount) || self.minReplicaCount <= self.maxReplicaCount",message="minReplicaCount must not exceed maxReplicaCount",fieldPath=".minReplicaCount"
type ScalingSpec struct {
	// +optional
	// +kubebuilder:validation:Minimum=1
	PollingInterval *int32 `json:"pollingInterval,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	InitialCooldownPeriod *int32 `json:"initialCooldownPeriod,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	CooldownPeriod *int32 `json:"cooldownPeriod,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	MinReplicaCount *int32 `json:"minReplicaCount,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxReplicaCount *int32 `json:"maxReplicaCount,omitempty"`
	// advanced is passed through to the ScaledObject's spec.advanced.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:MaxProperties=16
	Advanced *apiextensionsv1.JSON `json:"advanced,omitempty"`
}

// InferenceStackStatus is written by the operator: the release's
// conditions (Initialized, Deployed, ReleaseFailed, Irreconcilable, Paused,
// Retrying, Managed), the Ready condition and the readiness below (from the
// stack's Deployments), and the deployed release.
type InferenceStackStatus struct {
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []Condition `json:"conditions,omitempty"`
	// +optional
	DeployedRelease *DeployedRelease `json:"deployedRelease,omitempty"`
	// observedGeneration is the generation of the spec the deployed
	// release renders: while it is behind metadata.generation, a change is
	// still being applied.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// endpoint is the gateway's in-cluster URL
	// (http://<service>.<namespace>.svc:<port>, its http port).
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// ingressURLs are the gateway's URLs through its Ingress, when it has
	// one.
	// +optional
	// +listType=atomic
	IngressURLs []string `json:"ingressURLs,omitempty"`
	// available is "<available>/<desired>" replicas over all the stack's
	// Deployments. It comes with the stack's first readiness report, as do
	// endpoint, ingressURLs and applications: a stack just installed has
	// none of them until a replica is available, it is Ready, a problem is
	// found, or its rollout is a minute old.
	// +optional
	Available string `json:"available,omitempty"`
	// applications are the readers, one per application.
	// +optional
	// +listType=map
	// +listMapKey=name
	Applications []ApplicationStatus `json:"applications,omitempty"`
	// verifiedDigest identifies what the operator last applied or
	// verified: the release revision, what it was rendered from besides
	// the spec, and the version of each of its objects. An operator that
	// computes the same digest from its caches (after a restart, say)
	// knows nothing changed and reads nothing.
	// +optional
	VerifiedDigest string `json:"verifiedDigest,omitempty"`
}

// ApplicationStatus is what one application's reader Deployment runs.
type ApplicationStatus struct {
	// name of the application.
	Name string `json:"name"`
	// desiredReplicas, readyReplicas, updatedReplicas and availableReplicas
	// are the Deployment's.
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas"`
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas"`
	// +optional
	AvailableReplicas int32 `json:"availableReplicas"`
	// gpusPerReplica is the nvidia.com/gpu each reader pod asks for.
	// +optional
	GPUsPerReplica int64 `json:"gpusPerReplica,omitempty"`
	// gpuProduct is the GPU product the readers are placed on (their
	// nvidia.com/gpu.product node selector), if any.
	// +optional
	GPUProduct string `json:"gpuProduct,omitempty"`
}

// Condition is one observation of the stack's reconciliation, as written by
// helm-operator-plugins (which sets no observedGeneration).
type Condition struct {
	// +kubebuilder:validation:MinLength=1
	Type string `json:"type"`
	// +kubebuilder:validation:Enum=True;False;Unknown
	Status corev1.ConditionStatus `json:"status"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	// +nullable
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
}

// DeployedRelease is the Helm release last applied for the stack.
type DeployedRelease struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Manifest string `json:"manifest,omitempty"`
}

func init() {
	SchemeBuilder.Register(&InferenceStack{}, &InferenceStackList{})
}
