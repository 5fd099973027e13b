{{/*
Labels of every object: the two the kustomize bases set (name, part-of) and Helm's own.
Call with (dict "name" "iadeep-extender" "ctx" $).
*/}}
{{- define "iadeep.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: iadeep
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Pod template labels: a workload's selector (its name) plus part-of and the release. */}}
{{- define "iadeep.podLabels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: iadeep
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- end -}}

{{/* repository:tag of a component (dict "c" .Values.extender "ctx" $): its own image fields over image. */}}
{{- define "iadeep.image" -}}
{{- $img := merge (dict) (.c.image | default dict) .ctx.Values.image -}}
{{- printf "%s:%s" $img.repository (toString ($img.tag | default .ctx.Chart.AppVersion)) -}}
{{- end -}}

{{- define "iadeep.pullPolicy" -}}
{{- $img := merge (dict) (.c.image | default dict) .ctx.Values.image -}}
{{- $img.pullPolicy -}}
{{- end -}}

{{/* KUBERNETES_SERVICE_HOST/PORT entries when kubernetesAPI sets them. */}}
{{- define "iadeep.kubeAPIEnv" -}}
{{- with .Values.kubernetesAPI.host }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ . | quote }}
{{- end }}
{{- with .Values.kubernetesAPI.port }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ . | toString | quote }}
{{- end }}
{{- end -}}

{{/* Host network: the pod uses the node's network and still resolves cluster names. */}}
{{- define "iadeep.hostNetwork" -}}
{{- if .hostNetwork }}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
{{- end -}}

{{/* nodeSelector, tolerations, affinity of a component (dict "c" .Values.X). */}}
{{- define "iadeep.placement" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The probes of the services' /healthz and /readyz on their `http` port; a slow import is
not killed: liveness checks start once /healthz has answered (up to 5 min). */}}
{{- define "iadeep.probes" -}}
startupProbe:
  httpGet:
    path: /healthz
    port: http
  periodSeconds: 5
  failureThreshold: 60
readinessProbe:
  httpGet:
    path: /readyz
    port: http
  periodSeconds: 5
  {{- with .readinessFailureThreshold }}
  failureThreshold: {{ . }}
  {{- end }}
livenessProbe:
  httpGet:
    path: /healthz
    port: http
  periodSeconds: 10
  {{- with .livenessFailureThreshold }}
  failureThreshold: {{ . }}
  {{- end }}
{{- end -}}

{{/* Pod-level security context of the services (non-root UID 65532). */}}
{{- define "iadeep.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  {{- if .fsGroup }}
  fsGroup: 65532
  {{- end }}
  seccompProfile:
    type: RuntimeDefault
{{- end -}}

{{- define "iadeep.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
{{- end -}}

{{/* The service's ConfigMap entries shared by extender and node services. */}}
{{- define "iadeep.etcdConfig" -}}
IADEEP_ETCD_ENDPOINTS: {{ join "," .Values.etcd.endpoints | quote }}
IADEEP_ETCD_PREFIX: {{ .Values.etcd.prefix | quote }}
{{- end -}}

{{/* The `iadeep` command imports matplotlib, which needs a writable cache directory
(MPLCONFIGDIR=/tmp/matplotlib in the image): /tmp is the one writable place. */}}
{{- define "iadeep.tmpMount" -}}
- name: tmp
  mountPath: /tmp
{{- end -}}
