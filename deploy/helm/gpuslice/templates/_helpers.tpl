{{/* The base name of every object: <release>-gpuslice, or the release name when it already says gpuslice. */}}
{{- define "gpuslice.fullname" -}}
{{- if contains "gpuslice" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-gpuslice" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object; the component is given by the caller. */}}
{{- define "gpuslice.labels" -}}
app.kubernetes.io/name: gpuslice
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gpuslice.selector" -}}
app.kubernetes.io/name: gpuslice
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpuslice.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "gpuslice.webhookName" -}}
{{- printf "%s-webhook" (include "gpuslice.fullname" .) -}}
{{- end -}}

{{- define "gpuslice.webhookSecret" -}}
{{- .Values.webhook.tls.secretName | default (printf "%s-tls" (include "gpuslice.webhookName" .)) -}}
{{- end -}}

{{/* The driver's and the webhook's --no-tenant-namespaces: driver.noTenantNamespaces and the release's namespace (nothing of the chart's there claims GPUs), unless that is default, where users' workloads live. */}}
{{- define "gpuslice.noTenantNamespaces" -}}
{{- $ns := concat (list) (.Values.driver.noTenantNamespaces | default list) -}}
{{- if ne .Release.Namespace "default" -}}
{{- $ns = append $ns .Release.Namespace -}}
{{- end -}}
{{- $ns | uniq | sortAlpha | join "," -}}
{{- end -}}
