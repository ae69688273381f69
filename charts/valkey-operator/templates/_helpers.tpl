{{/* Name of the chart, overridable with nameOverride. */}}
{{- define "valkey-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fully qualified name of the release's objects, overridable with fullnameOverride. */}}
{{- define "valkey-operator.fullname" -}}
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

{{/* Labels that select the operator pod (never change between upgrades: selectors are immutable). */}}
{{- define "valkey-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "valkey-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels on every object of the release. */}}
{{- define "valkey-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "valkey-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: vko
{{- end -}}

{{/* The operator image: the operator runs it, and passes it on (--operator-image) as the image of the
     sidecar, init and observer containers it renders into Valkey pods. */}}
{{- define "valkey-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Namespace of the leader-election Lease. */}}
{{- define "valkey-operator.leaseNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.namespace -}}
{{- end -}}

{{/* Name of the pre-upgrade migration hook's objects. */}}
{{- define "valkey-operator.migrateName" -}}
{{- printf "%s-migrate" (include "valkey-operator.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The operator's ServiceAccount: the release's own, or an existing one (serviceAccount.create=false). */}}
{{- define "valkey-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "valkey-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* A map of labels or annotations with every value quoted (both must be strings; `--set a=false`
     would otherwise reach the API server as a boolean and be refused). */}}
{{- define "valkey-operator.stringMap" -}}
{{- $lines := list -}}
{{- range $key, $value := . -}}
{{- $lines = append $lines (printf "%s: %s" $key ($value | toString | quote)) -}}
{{- end -}}
{{- join "\n" $lines -}}
{{- end -}}
