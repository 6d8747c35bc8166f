{{/* Chart name, truncated to the 63 characters a DNS label allows. */}}
{{- define "queen.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: release-chart unless the release name already contains the chart name. */}}
{{- define "queen.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The headless Service that gives each pod a stable DNS name (peers). */}}
{{- define "queen.headlessName" -}}
{{- printf "%s-headless" (include "queen.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "queen.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "queen.selectorLabels" -}}
app.kubernetes.io/name: {{ include "queen.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "queen.labels" -}}
helm.sh/chart: {{ include "queen.chart" . }}
{{ include "queen.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "queen.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "queen.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Name of the Secret holding the JWT secret; empty when auth is off. */}}
{{- define "queen.jwtSecretName" -}}
{{- if .Values.auth.existingSecret -}}
{{- .Values.auth.existingSecret -}}
{{- else if .Values.auth.jwtSecret -}}
{{- printf "%s-auth" (include "queen.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "queen.jwtSecretKey" -}}
{{- if .Values.auth.existingSecret -}}
{{- .Values.auth.existingSecretKey -}}
{{- else -}}
jwt-secret
{{- end -}}
{{- end -}}

{{- define "queen.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
The broker's memory budget (memory_limit_bytes): config.memory_limit_bytes when set, else
memoryBudgetPercent of resources.limits.memory, so the broker's caches and refusals keep it
inside the pod's limit (docs/memory.md). Empty when neither is known (or the limit is a
fractional quantity): the broker then derives 75 % of the cgroup limit itself.
*/}}
{{- define "queen.memoryLimitBytes" -}}
{{- $set := int64 (default 0 .Values.config.memory_limit_bytes) -}}
{{- if gt $set 0 -}}
{{- $set -}}
{{- else -}}
{{- $limit := toString (dig "limits" "memory" "" (.Values.resources | default dict)) -}}
{{- if regexMatch "^[0-9]+(Ki|Mi|Gi|Ti|k|M|G|T)?$" $limit -}}
{{- $units := dict "" 1 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 -}}
{{- $unit := regexFind "(Ki|Mi|Gi|Ti|k|M|G|T)$" $limit -}}
{{- $n := int64 (trimSuffix $unit $limit) -}}
{{- $bytes := mul $n (get $units $unit) -}}
{{- div (mul $bytes (int64 .Values.memoryBudgetPercent)) 100 -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
"true" when the Kafka listener runs: kafka.enabled and no JWT secret (the broker does not
start the Kafka port while authentication is on, having no SASL yet), else empty.
*/}}
{{- define "queen.kafkaOn" -}}
{{- if and .Values.kafka.enabled (or (not (include "queen.jwtSecretName" .)) (include "queen.saslUsersSecret" .)) -}}
true
{{- end -}}
{{- end -}}

{{/* The Secret holding the Kafka SASL users file, if any. */}}
{{- define "queen.saslUsersSecret" -}}
{{- with .Values.kafka.sasl -}}{{- .usersSecret | default "" -}}{{- end -}}
{{- end -}}

{{/* The key of the users file in that Secret. */}}
{{- define "queen.saslUsersKey" -}}
{{- with .Values.kafka.sasl -}}{{- .usersSecretKey | default "users.toml" -}}{{- else -}}users.toml{{- end -}}
{{- end -}}

{{/* The address Metadata gives Kafka clients: kafka.advertisedAddr, else the client Service. */}}
{{- define "queen.kafkaAdvertisedAddr" -}}
{{- if .Values.kafka.advertisedAddr -}}
{{- .Values.kafka.advertisedAddr -}}
{{- else -}}
{{- printf "%s.%s.svc:%d" (include "queen.fullname" .) .Release.Namespace (int64 .Values.service.kafkaPort) -}}
{{- end -}}
{{- end -}}
