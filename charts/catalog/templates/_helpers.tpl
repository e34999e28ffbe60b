{{/*
Labels on every object of this chart (except the CRD, an exact copy of
crds/).
*/}}
{{- define "catalog.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: {{ .Values.packageName }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The label catalogd's mutating webhook sets on every ClusterCatalog, and that
ClusterExtensions select catalogs by. The chart sets it itself, so the
catalog is selectable even before (or without) the webhook.
*/}}
{{- define "catalog.catalogNameLabel" -}}
olm.operatorframework.io/metadata.name
{{- end }}

{{/*
The catalog image reference: catalog.image.ref, else repository@digest,
else repository:tag.
*/}}
{{- define "catalog.imageRef" -}}
{{- $img := .Values.catalog.image }}
{{- if $img.ref }}
{{- $img.ref }}
{{- else if $img.digest }}
{{- if not (regexMatch "^sha256:[a-f0-9]{64}$" $img.digest) }}
{{- fail (printf "catalog.image.digest %q is not a sha256 digest (sha256:<64 hex digits>)" $img.digest) }}
{{- end }}
{{- printf "%s@%s" $img.repository $img.digest }}
{{- else if $img.tag }}
{{- printf "%s:%s" $img.repository $img.tag }}
{{- else }}
{{- fail "catalog.image: set digest (the default, e.g. the digest `make release` printed), tag, or ref" }}
{{- end }}
{{- end }}

{{/*
"true" when the catalog image reference is pinned by digest.
*/}}
{{- define "catalog.imageIsDigest" -}}
{{- if contains "@sha256:" (include "catalog.imageRef" .) }}true{{ end }}
{{- end }}

{{/*
Per-extension names. Call with (dict "root" $ "major" "v0" "ext" $ext).
*/}}
{{- define "catalog.ext.name" -}}
{{- default (printf "%s-%s" .root.Values.packageName .major) .ext.name }}
{{- end }}

{{- define "catalog.ext.namespace" -}}
{{- default (printf "%s-%s" .root.Values.packageName .major) .ext.namespace }}
{{- end }}

{{- define "catalog.ext.installer" -}}
{{- default (printf "%s-%s-installer" .root.Values.packageName .major) .ext.installer.name }}
{{- end }}

{{/*
An extension's values with defaults filled in (a major added with --set
extensions.v1.enabled=true has no other keys), as YAML for fromYaml.
*/}}
{{- define "catalog.ext.withDefaults" -}}
{{- $d := dict "enabled" true "channel" "stable" "version" "" "upgradeConstraintPolicy" "CatalogProvided" "installPlanApproval" "" "name" "" "namespace" "" "catalogSelector" (dict) "installer" (dict "create" true "name" "" "extraRules" (list)) "labels" (dict) "annotations" (dict) }}
{{- toYaml (mergeOverwrite $d (deepCopy (. | default dict))) }}
{{- end }}

{{/*
Fails unless the key of extensions is a major ("v0", "v1", ...).
*/}}
{{- define "catalog.ext.checkMajor" -}}
{{- if not (regexMatch "^v(0|[1-9][0-9]*)$" .) }}
{{- fail (printf "extensions.%s: the key must be an operator major such as v0 or v1" .) }}
{{- end }}
{{- end }}

{{/*
Fails if a rule grants a wildcard.
*/}}
{{- define "catalog.checkRules" -}}
{{- range $i, $r := .rules }}
{{- range $k := list "apiGroups" "resources" "verbs" "resourceNames" "nonResourceURLs" }}
{{- range $v := (get $r $k | default list) }}
{{- if contains "*" $v }}
{{- fail (printf "%s[%d].%s: wildcard %q; list exact groups, resources and verbs" $.path $i $k $v) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The uninstall-order guard (guards.stacksBeforeExtensions): fails when this
release is about to remove what installs one major's operator — its
ClusterExtension (OLM v1) or its Subscription and namespace (OLM v0) —
while InferenceStacks labelled for that major exist. Only meaningful against
a cluster (`helm upgrade`); lookup returns nothing under `helm template` and
`helm lint`.
*/}}
{{- define "catalog.guardStacksBeforeExtensions" -}}
{{- if .Values.guards.stacksBeforeExtensions }}
{{- $stackCRD := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" "inferencestacks.models.takeoff.co" }}
{{- if $stackCRD }}
{{- $olm := include "catalog.olm" . }}
{{- /* What this render keeps: "<kind>/<namespace>/<name>". */}}
{{- $keep := dict }}
{{- range $major, $raw := .Values.extensions }}
{{- $ext := include "catalog.ext.withDefaults" $raw | fromYaml }}
{{- if $ext.enabled }}
{{- $args := dict "root" $ "major" $major "ext" $ext }}
{{- $name := include "catalog.ext.name" $args }}
{{- if eq $olm "v1" }}
{{- $_ := set $keep (printf "ClusterExtension//%s" $name) true }}
{{- else }}
{{- $_ := set $keep (printf "Subscription/%s/%s" (include "catalog.ext.namespace" $args) $name) true }}
{{- end }}
{{- end }}
{{- end }}
{{- /* What this release installed before. */}}
{{- $installed := list }}
{{- if lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" "clusterextensions.olm.operatorframework.io" }}
{{- $installed = concat $installed ((lookup "olm.operatorframework.io/v1" "ClusterExtension" "" "").items | default list) }}
{{- end }}
{{- if lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" "subscriptions.operators.coreos.com" }}
{{- $installed = concat $installed ((lookup "operators.coreos.com/v1alpha1" "Subscription" "" "").items | default list) }}
{{- end }}
{{- $stacks := (lookup "models.takeoff.co/v1alpha1" "InferenceStack" "" "").items | default list }}
{{- range $obj := $installed }}
{{- $ann := $obj.metadata.annotations | default dict }}
{{- $lbl := $obj.metadata.labels | default dict }}
{{- $major := get $lbl "models.takeoff.co/operator-major" }}
{{- $key := printf "%s/%s/%s" $obj.kind ($obj.metadata.namespace | default "") $obj.metadata.name }}
{{- if and (eq (get $ann "meta.helm.sh/release-name") $.Release.Name) (eq (get $ann "meta.helm.sh/release-namespace") $.Release.Namespace) $major (not (hasKey $keep $key)) }}
{{- $left := list }}
{{- range $s := $stacks }}
{{- if eq (get ($s.metadata.labels | default dict) "operatorVersion") $major }}
{{- $left = append $left (printf "%s/%s" $s.metadata.namespace $s.metadata.name) }}
{{- end }}
{{- end }}
{{- if $left }}
{{- fail (printf "refusing to remove %s %s: %d InferenceStack(s) labelled operatorVersion=%s still exist (%s). Delete them first and wait until they are gone (their operator removes their finalizers), then upgrade again; or set guards.stacksBeforeExtensions=false" $obj.kind $obj.metadata.name (len $left) $major (join ", " $left)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The OLM generation that installs the operator, "v1" or "v0" (fails on
anything else, naming the value).
*/}}
{{- define "catalog.olm" -}}
{{- $olm := toString .Values.olm }}
{{- if not (has $olm (list "v1" "v0")) }}
{{- fail (printf "olm: %q is not an OLM generation; use v1 (ClusterCatalog and ClusterExtensions) or v0 (CatalogSource, OperatorGroups and Subscriptions)" $olm) }}
{{- end }}
{{- $olm }}
{{- end }}

{{/*
The namespace of the OLM v0 CatalogSource.
*/}}
{{- define "catalog.v0.catalogNamespace" -}}
{{- .Values.olmV0.catalogSource.namespace }}
{{- end }}

{{/*
Fails on extension settings OLM v0 has no equivalent for, rather than
ignoring them. Call with (dict "major" "v0" "ext" $ext).
*/}}
{{- define "catalog.ext.checkV0" -}}
{{- with .ext.version }}
{{- if not (regexMatch "^(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$" .) }}
{{- fail (printf "extensions.%s.version %q: OLM v0 takes no version range, only an exact version to start from (its Subscription's startingCSV), e.g. 0.1.2; with installPlanApproval Manual it stays there until you approve an upgrade" $.major .) }}
{{- end }}
{{- end }}
{{- if .ext.catalogSelector }}
{{- fail (printf "extensions.%s.catalogSelector selects OLM v1 ClusterCatalogs; under OLM v0 a Subscription names one CatalogSource: set catalog.name and olmV0.catalogSource.namespace to it (with catalog.create false for one managed elsewhere)" .major) }}
{{- end }}
{{- end }}
