{{/*
Chart name, honouring nameOverride.
*/}}
{{- define "inference-stack.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fullname: fullnameOverride, else the release name when it already contains
the chart name, else <release>-<chart name>; cut to 63 characters.
*/}}
{{- define "inference-stack.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Name of every gateway object. Fails rather than truncating: the readers and
the KEDA scaler address the gateway by this name, so it must be exact.
*/}}
{{- define "inference-stack.gateway.name" -}}
{{- $name := printf "%s-gateway" (include "inference-stack.fullname" .) }}
{{- if gt (len $name) 63 }}
{{- fail (printf "inference-stack: the gateway name %q is %d characters, more than the 63 Kubernetes allows; use a shorter release name or set fullnameOverride" $name (len $name)) }}
{{- end }}
{{- $name }}
{{- end }}

{{- define "inference-stack.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels. Selectors are immutable, so they only hold labels that never
change for the life of a release (no version or chart labels).
Takes (dict "root" $ "component" "gateway").
*/}}
{{- define "inference-stack.selectorLabels" -}}
app.kubernetes.io/name: {{ include "inference-stack.name" .root | quote }}
app.kubernetes.io/instance: {{ .root.Release.Name | quote }}
{{- with .component }}
app.kubernetes.io/component: {{ . | quote }}
{{- end }}
{{- end }}

{{/*
All labels of an object. Takes (dict "root" $ "component" "gateway").
*/}}
{{- define "inference-stack.labels" -}}
helm.sh/chart: {{ include "inference-stack.chart" .root | quote }}
{{ include "inference-stack.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service | quote }}
{{- end }}

{{/*
Pod template labels: the selector labels and managed-by, then the user's
podLabels. Never the chart or app version: a pod template that changes rolls
every pod, so an operator release that only bumps the chart version would
restart every model server. Version labels stay on the objects' metadata.
Built as a dict so a podLabels key that repeats a chart label cannot produce
a duplicate key or break the selector; values become strings, as labels
must. Takes (dict "root" $ "component" c "podLabels" map).
*/}}
{{- define "inference-stack.podLabels" -}}
{{- $labels := include "inference-stack.selectorLabels" . | fromYaml }}
{{- $_ := set $labels "app.kubernetes.io/managed-by" .root.Release.Service }}
{{- range $key, $value := .podLabels }}
{{- if not (hasKey $labels $key) }}
{{- $_ := set $labels $key (toString $value) }}
{{- end }}
{{- end }}
{{- toYaml $labels }}
{{- end }}

{{/*
Pod template annotations: the user's podAnnotations plus checksum/config, the
sha256 of the pod's rendered config, so a config change rolls the pods and an
unchanged config does not. Takes (dict "podAnnotations" map "config" string).
It hashes exactly the ConfigMap's config.yaml (a "|-" block, so no trailing
newline), so anyone can check the annotation against the ConfigMap.
*/}}
{{- define "inference-stack.podAnnotations" -}}
{{- $annotations := dict }}
{{- range $key, $value := .podAnnotations }}
{{- $_ := set $annotations $key (toString $value) }}
{{- end }}
{{- $_ := set $annotations "checksum/config" (sha256sum .config) }}
{{- toYaml $annotations }}
{{- end }}

{{- define "inference-stack.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "inference-stack.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image reference: <repository>:<tag>, the tag defaulting to
<appVersion>-<suffix>; with a digest, <repository>@<digest>, or
<repository>:<tag>@<digest> when the tag is set (a tag may also carry the
digest itself: tag@sha256:...). Takes (dict "root" $ "image" map "suffix"
"gpu").
*/}}
{{- define "inference-stack.image" -}}
{{- $tag := .image.tag | default "" | toString }}
{{- $digest := .image.digest | default "" | toString }}
{{- if and $digest (contains "@" $tag) }}
{{- fail (printf "inference-stack: image %s: set the digest in digest or in tag (tag@sha256:...), not both" .image.repository) }}
{{- end }}
{{- if and $digest (not $tag) }}
{{- printf "%s@%s" .image.repository $digest }}
{{- else if $digest }}
{{- printf "%s:%s@%s" .image.repository $tag $digest }}
{{- else }}
{{- printf "%s:%s" .image.repository ($tag | default (printf "%s-%s" .root.Chart.AppVersion .suffix)) }}
{{- end }}
{{- end }}

{{/*
camelCase map -> snake_case keys (top level only). Takes (dict "in" map
"out" map) and fills .out, so values keep their types (include can only
return strings).
*/}}
{{- define "inference-stack.snakeKeys" -}}
{{- range $key, $value := .in }}
{{- $_ := set $.out (snakecase $key) $value }}
{{- end }}
{{- end }}

{{- define "inference-stack.internalPort" -}}
{{- dig "config" "internalPort" 3005 (.Values.gateway | default dict) | default 3005 }}
{{- end }}

{{/*
Container ports from a name -> port map, in name order; 0 or empty drops a
port (a CR cannot null out a map entry inherited from the defaults).
*/}}
{{- define "inference-stack.containerPorts" -}}
{{- $ports := list }}
{{- range $name, $port := . }}
{{- if $port }}
{{- $ports = append $ports (dict "name" $name "containerPort" $port "protocol" "TCP") }}
{{- end }}
{{- end }}
{{- if $ports }}
{{- toYaml $ports }}
{{- end }}
{{- end }}

{{/*
Checks an application name and returns "<fullname>-<name>", the name of all
its objects. Takes (dict "root" $ "name" name).
*/}}
{{- define "inference-stack.application.fullname" -}}
{{- $name := toString .name }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $name) }}
{{- fail (printf "inference-stack: application name %q must be a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit" $name) }}
{{- end }}
{{- $component := printf "application-%s" $name }}
{{- if gt (len $component) 63 }}
{{- fail (printf "inference-stack: application name %q is too long: its label value %q is %d characters, more than 63" $name $component (len $component)) }}
{{- end }}
{{- $fullname := printf "%s-%s" (include "inference-stack.fullname" .root) $name }}
{{- if gt (len $fullname) 63 }}
{{- fail (printf "inference-stack: the name %q of application %q is %d characters, more than the 63 Kubernetes allows; shorten the application name, the release name or fullnameOverride" $fullname $name (len $fullname)) }}
{{- end }}
{{- $fullname }}
{{- end }}

{{/*
The effective values of one application, stored in .out.values (a dict is
passed back rather than YAML text so values keep their types).
Takes (dict "root" $ "name" name "out" dict).

- applications.<name> deep-merged over a copy of applicationTemplate;
- modelsVolume (a volume source, without name) replaced wholesale,
  defaulting to a memory-backed emptyDir;
- env: the application's entries, then the template's entries whose names
  are not set, then the required ones that are not set;
- GPU defaults for device cuda (see inference-stack.application.gpu).
*/}}
{{- define "inference-stack.application.values" -}}
{{- $template := .root.Values.applicationTemplate | default dict }}
{{- $entry := index (.root.Values.applications | default dict) .name | default dict }}
{{- /* mergeOverwrite mutates its first argument and links in maps of the
second: copy both so neither the template nor the user's values change. */}}
{{- $app := mustMergeOverwrite (deepCopy $template) (deepCopy (omit $entry "modelsVolume" "env")) }}

{{- $volume := $template.modelsVolume }}
{{- if hasKey $entry "modelsVolume" }}
{{- $volume = $entry.modelsVolume }}
{{- end }}
{{- if empty $volume }}
{{- /* Bounded: without a limit a memory-backed volume may grow to the
node's allocatable memory (or the pod's memory limit), starving other pods
before anything notices. A volume the user chose is theirs to size. */}}
{{- $volume = dict "emptyDir" (dict "medium" "Memory" "sizeLimit" "32Gi") }}
{{- end }}
{{- $_ := set $app "modelsVolume" (omit (deepCopy $volume) "name") }}

{{- $env := list }}
{{- $seen := dict }}
{{- range ($entry.env | default list) }}
{{- $env = append $env (deepCopy .) }}
{{- $_ := set $seen (toString .name) true }}
{{- end }}
{{- $required := list
      (dict "name" "TAKEOFF_ADD_READER_ID_SUFFIX" "value" "true")
      (dict "name" "TAKEOFF_HEADLESS" "value" "true")
      (dict "name" "POD_NAME" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.name"))) }}
{{- range concat ($template.env | default list) $required }}
{{- if not (hasKey $seen (toString .name)) }}
{{- $env = append $env (deepCopy .) }}
{{- $_ := set $seen (toString .name) true }}
{{- end }}
{{- end }}
{{- $_ := set $app "env" $env }}

{{- include "inference-stack.application.accessToken" (dict "app" $app "name" .name) }}
{{- include "inference-stack.application.gpu" $app }}
{{- include "inference-stack.application.requests" $app }}
{{- $_ := set .out "values" $app }}
{{- end }}

{{/*
The reader's access token from a Secret (accessTokenFrom), mutating the
application values passed in: an env var from the Secret (mountAs Env), or
the Secret's key mounted read-only as a file whose path an env var gives
(mountAs File). The token itself never reaches the chart's output, so it is
in no ConfigMap, release manifest or stack status. Sets .app.tokenVolume
and .app.tokenMount for the Deployment. Takes (dict "app" values "name"
name).
*/}}
{{- define "inference-stack.application.accessToken" -}}
{{- with .app.accessTokenFrom }}
{{- if dig "readerConfig" "accessToken" "" $.app }}
{{- fail (printf "inference-stack: application %s: accessTokenFrom and readerConfig.accessToken are both set (after merging applicationTemplate); keep accessTokenFrom" $.name) }}
{{- end }}
{{- $ref := dict "name" .secretKeyRef.name "key" .secretKeyRef.key }}
{{- $asFile := eq (.mountAs | default "Env") "File" }}
{{- $envName := .envName | default (ternary "HF_TOKEN_PATH" "TAKEOFF_ACCESS_TOKEN" $asFile) }}
{{- range $.app.env }}
{{- if eq (toString .name) $envName }}
{{- fail (printf "inference-stack: application %s: env sets %s, which accessTokenFrom sets; remove it from env or choose accessTokenFrom.envName" $.name $envName) }}
{{- end }}
{{- end }}
{{- if $asFile }}
{{- $dir := "/var/run/secrets/takeoff/access-token" }}
{{- $_ := set $.app "env" (append $.app.env (dict "name" $envName "value" (printf "%s/token" $dir))) }}
{{- $_ := set $.app "tokenVolume" (dict "name" "access-token" "secret" (dict "secretName" $ref.name "items" (list (dict "key" $ref.key "path" "token")))) }}
{{- $_ := set $.app "tokenMount" (dict "name" "access-token" "mountPath" $dir "readOnly" true) }}
{{- else }}
{{- $_ := set $.app "env" (append $.app.env (dict "name" $envName "valueFrom" (dict "secretKeyRef" $ref))) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Default requests for a reader (mutating the application values passed in):
a container without requests is BestEffort, the first evicted under memory
pressure and invisible to the scheduler's accounting. Each default applies
only where the user set neither a request nor a limit for that resource (a
limit alone makes Kubernetes request as much), so nothing the user set is
overridden.
*/}}
{{- define "inference-stack.application.requests" -}}
{{- $resources := .resources | default dict }}
{{- $limits := $resources.limits | default dict }}
{{- $requests := $resources.requests | default dict }}
{{- range $resource, $quantity := dict "cpu" "1" "memory" "2Gi" }}
{{- if not (or (hasKey $requests $resource) (hasKey $limits $resource)) }}
{{- $_ := set $requests $resource $quantity }}
{{- end }}
{{- end }}
{{- $_ := set $resources "requests" $requests }}
{{- $_ := set . "resources" $resources }}
{{- end }}

{{/*
GPU defaults for a cuda reader (mutates the application values passed in).
The old chart left these to the user, so a cuda reader could be scheduled on
a node without a GPU, or not at all on tainted GPU nodes.
- Unless the user already chose the GPU resources (any nvidia.com/* limit,
  or an nvidia.com/* request other than nvidia.com/gpu, e.g. a MIG profile),
  request and limit nvidia.com/gpu: the requested nvidia.com/gpu if given
  (an extended resource's limit must equal its request), else
  tensorParallel, else 1.
- Tolerate the usual nvidia.com/gpu:NoSchedule taint unless a toleration
  that already covers it is present.
*/}}
{{- define "inference-stack.application.gpu" -}}
{{- if eq (toString (dig "readerConfig" "device" "" .)) "cuda" }}
{{- $gpu := "nvidia.com/gpu" }}
{{- $resources := .resources | default dict }}
{{- $limits := $resources.limits | default dict }}
{{- $requests := $resources.requests | default dict }}
{{- $userChoseGPU := false }}
{{- range $key, $_ := $limits }}
{{- if hasPrefix "nvidia.com/" $key }}
{{- $userChoseGPU = true }}
{{- end }}
{{- end }}
{{- range $key, $_ := $requests }}
{{- if and (hasPrefix "nvidia.com/" $key) (ne $key $gpu) }}
{{- $userChoseGPU = true }}
{{- end }}
{{- end }}
{{- if not $userChoseGPU }}
{{- $count := get $requests $gpu | default (dig "readerConfig" "tensorParallel" 1 .) | default 1 }}
{{- $_ := set $limits $gpu $count }}
{{- $_ := set $requests $gpu $count }}
{{- $_ := set $resources "limits" $limits }}
{{- $_ := set $resources "requests" $requests }}
{{- $_ := set . "resources" $resources }}
{{- end }}

{{- $tolerations := .tolerations | default list }}
{{- $covered := false }}
{{- range $tolerations }}
{{- $key := toString (.key | default "") }}
{{- $effect := toString (.effect | default "") }}
{{- if and (eq (toString .operator) "Exists") (has $key (list "" $gpu)) (has $effect (list "" "NoSchedule")) }}
{{- $covered = true }}
{{- end }}
{{- end }}
{{- if not $covered }}
{{- $tolerations = append $tolerations (dict "key" $gpu "operator" "Exists" "effect" "NoSchedule") }}
{{- end }}
{{- $_ := set . "tolerations" $tolerations }}
{{- end }}
{{- end }}

{{/*
A reader's config.yaml. Rendered with toYaml from a dict so user values keep
their YAML type (a colon in a model name, or the string "yes", stays a
string). internalGatewayIp defaults to the gateway Service.
Takes (dict "root" $ "name" name "app" values).
*/}}
{{- define "inference-stack.application.config" -}}
{{- $reader := dict "internal_gateway_ip" (include "inference-stack.gateway.name" .root) }}
{{- include "inference-stack.snakeKeys" (dict "in" .app.readerConfig "out" $reader) }}
{{- $serverConfig := dict "internal_port" (include "inference-stack.internalPort" .root | atoi) }}
{{- toYaml (dict "takeoff" (dict "server_config" $serverConfig "readers_config" (dict .name $reader))) }}
{{- end }}

{{/*
The gateway's config.yaml: gateway.config in snake_case (internal_port 3005
unless given) and no readers of its own.
*/}}
{{- define "inference-stack.gateway.config" -}}
{{- $serverConfig := dict "internal_port" 3005 }}
{{- include "inference-stack.snakeKeys" (dict "in" .Values.gateway.config "out" $serverConfig) }}
{{- toYaml (dict "takeoff" (dict "server_config" $serverConfig "readers_config" dict)) }}
{{- end }}

{{/*
Gateway env: the user's entries plus TAKEOFF_ADD_READER_ID_SUFFIX unless set.
*/}}
{{- define "inference-stack.gateway.env" -}}
{{- $env := .Values.gateway.env | default list }}
{{- $seen := dict }}
{{- range $env }}
{{- $_ := set $seen (toString .name) true }}
{{- end }}
{{- if not (hasKey $seen "TAKEOFF_ADD_READER_ID_SUFFIX") }}
{{- $env = append $env (dict "name" "TAKEOFF_ADD_READER_ID_SUFFIX" "value" "true") }}
{{- end }}
{{- toYaml $env }}
{{- end }}

{{/*
Whether KEDA ScaledObjects can be created: "true" or "".
*/}}
{{- define "inference-stack.kedaAvailable" -}}
{{- if .Capabilities.APIVersions.Has "keda.sh/v1alpha1/ScaledObject" }}true{{- end }}
{{- end }}

{{/*
A Deployment's strategy from the merged values: rollingUpdate is dropped
for type Recreate (an application may set Recreate over the template's
rolling update; Kubernetes refuses both together).
*/}}
{{- define "inference-stack.strategy" -}}
{{- $s := deepCopy . }}
{{- if eq (toString ($s.type | default "RollingUpdate")) "Recreate" }}
{{- $s = omit $s "rollingUpdate" }}
{{- end }}
{{- toYaml $s }}
{{- end }}
