{{/* The chart name, or nameOverride. */}}
{{- define "berth.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The base name of every object: the release name, plus the chart name unless it contains it. */}}
{{- define "berth.fullname" -}}
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

{{/* Labels that select the pods: they must never change across upgrades. */}}
{{- define "berth.selectorLabels" -}}
app.kubernetes.io/name: {{ include "berth.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "berth.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "berth.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: berth
{{- end }}

{{/* The Secret with the webhook serving certificate: cert-manager's, or one the user provides. */}}
{{- define "berth.webhookSecret" -}}
{{- if .Values.webhook.certManager.enabled }}
{{- include "berth.fullname" . }}-webhook-tls
{{- else }}
{{- required "webhook.secretName is required when webhook.certManager.enabled is false (a Secret with tls.crt, tls.key and ca.crt)" .Values.webhook.secretName }}
{{- end }}
{{- end }}
