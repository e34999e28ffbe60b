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
{{- $d := dict "enabled" true "channel" "stable" "version" "" "upgradeConstraintPolicy" "CatalogProvided" "name" "" "namespace" "" "catalogSelector" (dict) "installer" (dict "create" true "name" "" "extraRules" (list)) "labels" (dict) "annotations" (dict) }}
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
release is about to remove one of its ClusterExtensions while InferenceStacks
labelled for that major exist. Only meaningful against a cluster (`helm
upgrade`); lookup returns nothing under `helm template` and `helm lint`.
*/}}
{{- define "catalog.guardStacksBeforeExtensions" -}}
{{- if .Values.guards.stacksBeforeExtensions }}
{{- $ceCRD := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" "clusterextensions.olm.operatorframework.io" }}
{{- $stackCRD := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" "inferencestacks.models.takeoff.co" }}
{{- if and $ceCRD $stackCRD }}
{{- $keep := dict }}
{{- range $major, $raw := .Values.extensions }}
{{- $ext := include "catalog.ext.withDefaults" $raw | fromYaml }}
{{- if $ext.enabled }}
{{- $_ := set $keep (include "catalog.ext.name" (dict "root" $ "major" $major "ext" $ext)) true }}
{{- end }}
{{- end }}
{{- $stacks := (lookup "models.takeoff.co/v1alpha1" "InferenceStack" "" "").items | default list }}
{{- range $ce := (lookup "olm.operatorframework.io/v1" "ClusterExtension" "" "").items | default list }}
{{- $ann := $ce.metadata.annotations | default dict }}
{{- $lbl := $ce.metadata.labels | default dict }}
{{- $major := get $lbl "models.takeoff.co/operator-major" }}
{{- if and (eq (get $ann "meta.helm.sh/release-name") $.Release.Name) $major (not (hasKey $keep $ce.metadata.name)) }}
{{- $left := list }}
{{- range $s := $stacks }}
{{- if eq (get ($s.metadata.labels | default dict) "operatorVersion") $major }}
{{- $left = append $left (printf "%s/%s" $s.metadata.namespace $s.metadata.name) }}
{{- end }}
{{- end }}
{{- if $left }}
{{- fail (printf "refusing to remove ClusterExtension %s: %d InferenceStack(s) labelled operatorVersion=%s still exist (%s). Delete them first and wait until they are gone (their operator removes their finalizers), then upgrade again; or set guards.stacksBeforeExtensions=false" $ce.metadata.name (len $left) $major (join ", " $left)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
