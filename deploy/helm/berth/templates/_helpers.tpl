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

{{/* A mounted Secret with the webhook serving certificate (cert-manager's, or one the user provides); empty when Berth keeps its own. */}}
{{- define "berth.webhookSecret" -}}
{{- if .Values.webhook.certManager.enabled }}
{{- include "berth.fullname" . }}-webhook-tls
{{- else if .Values.webhook.secretName }}
{{- .Values.webhook.secretName }}
{{- end }}
{{- end }}

{{/* The Secret where Berth keeps its own webhook CA and serving certificate, shared by the replicas. */}}
{{- define "berth.webhookCertSecret" -}}
{{- include "berth.fullname" . }}-webhook-cert
{{- end }}

{{/* The image: by digest when image.digest is set (what runs is then exactly what was pushed), else by tag. */}}
{{- define "berth.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest | quote }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) | quote }}
{{- end }}
{{- end }}
