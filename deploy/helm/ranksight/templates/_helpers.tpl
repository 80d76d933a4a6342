{{- define "ranksight.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "ranksight.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "ranksight.image" -}}
{{ required "image.repository is required: build and push the ranksight image (docs/deploy.md), then --set image.repository=REGISTRY/ranksight" .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "ranksight.natsUrl" -}}
{{- if .Values.nats.enabled -}}
nats://{{ include "ranksight.fullname" . }}-nats:4222
{{- else -}}
{{- required "nats.url is required when nats.enabled is false" .Values.nats.url -}}
{{- end -}}
{{- end -}}

{{/* Settings every ranksight process shares: cluster, NATS URL, NATS credentials from a Secret. */}}
{{- define "ranksight.commonEnv" -}}
- name: RANKSIGHT_CLUSTER
  value: {{ .Values.cluster | quote }}
- name: RANKSIGHT_NATS__URL
  value: {{ include "ranksight.natsUrl" . | quote }}
- name: RANKSIGHT_NATS__JETSTREAM_REPLICAS
  value: {{ .Values.nats.jetstreamReplicas | quote }}
{{- if .Values.nats.credentialsSecret }}
- name: RANKSIGHT_NATS__CREDS_FILE
  value: /etc/ranksight/nats/nats.creds
{{- end }}
{{- end -}}

{{- define "ranksight.natsCredsVolume" -}}
{{- if .Values.nats.credentialsSecret }}
- name: nats-creds
  secret:
    secretName: {{ .Values.nats.credentialsSecret }}
    defaultMode: 0400
{{- end }}
{{- end -}}

{{- define "ranksight.natsCredsMount" -}}
{{- if .Values.nats.credentialsSecret }}
- name: nats-creds
  mountPath: /etc/ranksight/nats
  readOnly: true
{{- end }}
{{- end -}}
