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

{{/* "true" when the release is a Raft cluster (replicas 3 or 5), else empty. */}}
{{- define "queen.clustered" -}}
{{- if gt (int64 .Values.replicas) 1 -}}
true
{{- end -}}
{{- end -}}

{{/* The Secret holding the cluster token: cluster.existingSecret, else the chart's own. */}}
{{- define "queen.clusterSecretName" -}}
{{- if .Values.cluster.existingSecret -}}
{{- .Values.cluster.existingSecret -}}
{{- else if .Values.cluster.token -}}
{{- printf "%s-cluster" (include "queen.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "queen.clusterSecretKey" -}}
{{- if .Values.cluster.existingSecret -}}
{{- .Values.cluster.existingSecretKey -}}
{{- else -}}
cluster-token
{{- end -}}
{{- end -}}

{{/* The DNS suffix every pod's name takes in the headless Service. */}}
{{- define "queen.podDomain" -}}
{{- printf "%s.%s.svc.%s" (include "queen.headlessName" .) .Release.Namespace .Values.cluster.clusterDomain -}}
{{- end -}}

{{/*
peers (QUEEN_PEERS): every pod as <ordinal + 1>=<pod>.<headless>.<ns>.svc.<domain>:<cluster.port>;
the wrapper gives pod <fullname>-<ordinal> node id ordinal + 1.
*/}}
{{- define "queen.peers" -}}
{{- $peers := list -}}
{{- range $i := until (int .Values.replicas) -}}
{{- $peers = append $peers (printf "%d=%s-%d.%s:%d" (add1 $i) (include "queen.fullname" $) $i (include "queen.podDomain" $) (int64 $.Values.cluster.port)) -}}
{{- end -}}
{{- join "," $peers -}}
{{- end -}}

{{/*
peer_http (QUEEN_PEER_HTTP): the same pods on the HTTP port. https:// when the HTTP
listener speaks TLS: followers then answer 503 not_leader naming the leader instead of
relaying (docs/cluster.md "Forwarding": no relay over TLS yet).
*/}}
{{- define "queen.peerHttp" -}}
{{- $scheme := ternary "https" "http" (not (empty .Values.http.tlsSecret)) -}}
{{- $peers := list -}}
{{- range $i := until (int .Values.replicas) -}}
{{- $peers = append $peers (printf "%d=%s://%s-%d.%s:%d" (add1 $i) $scheme (include "queen.fullname" $) $i (include "queen.podDomain" $) (int64 $.Values.http.port)) -}}
{{- end -}}
{{- join "," $peers -}}
{{- end -}}

{{/*
peer_kafka (QUEEN_PEER_KAFKA): each pod's Kafka advertised address, as its command sets it
(QUEEN_KAFKA_ADVERTISED_ADDR below), so every member lists every pod as a broker and names
the leader (docs/kafka-compat.md "Cluster").
*/}}
{{- define "queen.peerKafka" -}}
{{- $peers := list -}}
{{- range $i := until (int .Values.replicas) -}}
{{- $peers = append $peers (printf "%d=%s-%d.%s:%d" (add1 $i) (include "queen.fullname" $) $i (include "queen.podDomain" $) (int64 $.Values.kafka.port)) -}}
{{- end -}}
{{- join "," $peers -}}
{{- end -}}

{{/* Values the schema cannot judge alone; each refusal says what to set. */}}
{{- define "queen.clusterChecks" -}}
{{- if include "queen.clustered" . -}}
{{- if not (include "queen.clusterSecretName" .) -}}
{{- fail (printf "replicas %d needs the cluster token: set cluster.existingSecret (a Secret with key cluster.existingSecretKey, 32 ..= 1008 bytes) or cluster.token" (int64 .Values.replicas)) -}}
{{- end -}}
{{- if and .Values.cluster.token (not .Values.cluster.existingSecret) -}}
{{- $n := len .Values.cluster.token -}}
{{- if or (lt $n 32) (gt $n 1008) -}}
{{- fail (printf "cluster.token is %d bytes; the broker needs 32 ..= 1008" $n) -}}
{{- end -}}
{{- end -}}
{{- if not .Values.persistence.enabled -}}
{{- fail "persistence.enabled=false with replicas > 1: a member restarted on an empty directory rejoins as a new node (pod 0 would initialise the group again; docs/cluster.md A2): keep persistence on" -}}
{{- end -}}
{{- if .Values.kafka.advertisedAddr -}}
{{- fail "kafka.advertisedAddr names one address for every pod; with replicas > 1 each pod advertises its own DNS name: leave kafka.advertisedAddr empty" -}}
{{- end -}}
{{- $port := int64 .Values.cluster.port -}}
{{- if or (eq $port (int64 .Values.http.port)) (and (include "queen.kafkaOn" .) (eq $port (int64 .Values.kafka.port))) -}}
{{- fail (printf "cluster.port %d is also the HTTP or Kafka port: give the Raft listener its own port" $port) -}}
{{- end -}}
{{- $hb := int64 (default 500 .Values.cluster.heartbeatMs) -}}
{{- $eto := int64 (default 5000 .Values.cluster.electionTimeoutMs) -}}
{{- if lt $eto (mul 5 $hb) -}}
{{- fail (printf "cluster.electionTimeoutMs %d is under 5 x cluster.heartbeatMs %d (0 means the broker's default, 5000 and 500): raise electionTimeoutMs or lower heartbeatMs" $eto $hb) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The container command of a cluster pod: a /bin/sh wrapper that sets this pod's node id
(ordinal + 1: the broker refuses 0, and an env value cannot add) and its Kafka advertised
address, then execs the broker with the container's args.
*/}}
{{- define "queen.clusterWrapper" -}}
set -eu
pod="${HOSTNAME:-}"
case "$pod" in
  {{ include "queen.fullname" . }}-[0-{{ sub (int64 .Values.replicas) 1 }}]) ;;
  *) echo "queen: HOSTNAME '$pod' is not {{ include "queen.fullname" . }}-<0..{{ sub (int64 .Values.replicas) 1 }}>: no node id for it" >&2; exit 1 ;;
esac
ordinal="${pod##*-}"
export QUEEN_NODE_ID="$((ordinal + 1))"
{{- if include "queen.kafkaOn" . }}
export QUEEN_KAFKA_ADVERTISED_ADDR="$pod.{{ include "queen.podDomain" . }}:{{ int64 .Values.kafka.port }}"
{{- end }}
exec queen "$@"
{{- end -}}
