{{- define "model-orchestra.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "model-orchestra.fullname" -}}
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

{{- define "model-orchestra.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* (dict "root" $ "component" c) */}}
{{- define "model-orchestra.selectorLabels" -}}
app.kubernetes.io/name: {{ include "model-orchestra.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Every label, pod templates included (the chart version among them). */}}
{{- define "model-orchestra.labels" -}}
helm.sh/chart: {{ include "model-orchestra.chart" .root }}
{{ include "model-orchestra.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end }}

{{- define "model-orchestra.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "model-orchestra.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Top-level keys in snake_case, values written as they come (unquoted). */}}
{{- define "model-orchestra.snakeConfig" -}}
{{- range $key, $value := . }}
{{ $key | snakecase }}: {{ $value }}
{{- end }}
{{- end }}
