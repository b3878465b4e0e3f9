{{/*
Object names are the manifests' own, "gate-admission" and its suffixes, whatever the release is
called (the binaries' defaults name them too: --webhook-config, --lease-name; and a cluster holds
one installation, whose webhook configurations are cluster-scoped). fullnameOverride (else
nameOverride) replaces that prefix; the templates then pass the names to the binaries.
*/}}
{{- define "gate-admission.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{- define "gate-admission.fullname" -}}
{{- default (include "gate-admission.name" .) .Values.fullnameOverride | trunc 30 | trimSuffix "-" -}}
{{- end }}

{{/* Whether object names are the binaries' defaults (no flag needs to repeat them). */}}
{{- define "gate-admission.defaultNames" -}}
{{- if eq (include "gate-admission.fullname" .) "gate-admission" -}}true{{- end -}}
{{- end }}

{{- define "gate-admission.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/*
The labels that select our Pods: fixed for the life of an installation (a Deployment's selector
cannot change; docs/decisions/0074-labels-and-the-selector-change.md).
*/}}
{{- define "gate-admission.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gate-admission.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Every object's labels: the standard ones and commonLabels. */}}
{{- define "gate-admission.labels" -}}
helm.sh/chart: {{ include "gate-admission.chart" . }}
{{ include "gate-admission.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gate-admission
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The selector of one component's Pods; the argument: (list $ "webhook"). */}}
{{- define "gate-admission.componentSelectorLabels" -}}
{{ include "gate-admission.selectorLabels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* One component's labels; the argument: (list $ "webhook"). */}}
{{- define "gate-admission.componentLabels" -}}
{{ include "gate-admission.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/*
An object's labels and commonAnnotations, at the indent of metadata's keys; the argument:
(list $ "webhook") or (list $ "webhook" (dict "some/annotation" "value")).
*/}}
{{- define "gate-admission.metadata" -}}
{{- $ := index . 0 -}}
{{- $annotations := merge (dict) ($.Values.commonAnnotations | default dict) -}}
{{- if gt (len .) 2 }}{{ $annotations = merge $annotations (index . 2 | default dict) }}{{ end -}}
labels:
  {{- include "gate-admission.componentLabels" (list $ (index . 1)) | nindent 2 }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
A monitor's or the alert rule's labels and annotations: ours, and the labels a Prometheus selects
them by (monitoring.serviceMonitor.labels, monitoring.prometheusRule.labels), which win.
The argument: (list $ .Values.monitoring.serviceMonitor), or the prometheusRule's values.
*/}}
{{- define "gate-admission.monitorMetadata" -}}
{{- $ := index . 0 -}}
{{- $labels := merge (dict) ((index . 1).labels | default dict) (fromYaml (include "gate-admission.componentLabels" (list $ "monitoring"))) -}}
labels:
  {{- toYaml $labels | nindent 2 }}
{{- with $.Values.commonAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The image of every Pod: registry/repository, then @digest if given, else :tag (default: appVersion). */}}
{{- define "gate-admission.image" -}}
{{- $repository := .Values.image.repository -}}
{{- with .Values.image.registry }}{{ $repository = printf "%s/%s" . $repository }}{{ end -}}
{{- if .Values.image.digest -}}
{{ $repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ $repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/*
What every Pod of ours shares (Deployments, Jobs, hooks, the test Pod): pull secrets and node
placement. The argument: (list $ "webhook"), the component. Piped through trim by its callers.
*/}}
{{- define "gate-admission.podPlacement" -}}
{{- $ := index . 0 -}}
{{- with $.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Pod template labels and annotations; the argument: (list $ "webhook" (dict ...annotations)). */}}
{{- define "gate-admission.podMetadata" -}}
{{- $ := index . 0 -}}
{{- $annotations := merge (dict) ($.Values.podAnnotations | default dict) (index . 2) -}}
labels:
  {{- include "gate-admission.componentLabels" (list $ (index . 1)) | nindent 2 }}
  {{- with $.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The webhook Service, as the API server and the certificates name it. */}}
{{- define "gate-admission.service" -}}
{{ include "gate-admission.fullname" . }}
{{- end }}

{{- define "gate-admission.serviceHost" -}}
{{ include "gate-admission.service" . }}.{{ .Release.Namespace }}.svc
{{- end }}

{{/* The certificate Secret the webhook Pods mount. */}}
{{- define "gate-admission.tlsSecret" -}}
{{ include "gate-admission.fullname" . }}-tls
{{- end }}

{{/* The Secret of the key approvals are sealed with (docs/decisions/0064). */}}
{{- define "gate-admission.approvalKeySecret" -}}
{{ include "gate-admission.fullname" . }}-approval-key
{{- end }}

{{/* Whether the webhooks are the variant without matchConditions (before Kubernetes 1.30). */}}
{{- define "gate-admission.pre130" -}}
{{- if eq .Values.webhooks.variant "pre-1.30" -}}
true
{{- else if and (eq .Values.webhooks.variant "auto") (semverCompare "<1.30-0" .Capabilities.KubeVersion.Version) -}}
true
{{- end -}}
{{- end }}

{{/* A webhook entry's clientConfig; the argument: (list $ "/validate"). */}}
{{- define "gate-admission.clientConfig" -}}
{{- $ := index . 0 -}}
clientConfig:
  service:
    name: {{ include "gate-admission.service" $ }}
    namespace: {{ $.Release.Namespace }}
    path: {{ index . 1 }}
    port: 443
{{- end }}

{{/*
The namespaces the webhooks never judge: those listed and the release's, unless
webhooks.judgeReleaseNamespace. Never judged, the release namespace keeps a HelmRelease there that
installs gate-admission from deadlocking its own repair; so it must hold no other Flux object,
and Flux's own namespace is refused (docs/operations.md, "Do not gate the gate").
*/}}
{{- define "gate-admission.namespacesNeverJudged" -}}
{{- if .Values.webhooks.judgeReleaseNamespace -}}
{{ .Values.webhooks.namespacesNeverJudged | uniq | toJson }}
{{- else -}}
{{- if eq .Release.Namespace "flux-system" -}}
{{- fail (printf "gate-admission: the release namespace %s would never be judged by the webhooks, so every Flux object in it would escape its gates. Install into a namespace of its own (a HelmRelease: spec.targetNamespace: gate-admission-system, spec.install.createNamespace: true), or set webhooks.judgeReleaseNamespace=true to have the webhooks judge it too, and give the object that installs gate-admission no gates (docs/operations.md, \"Do not gate the gate\")" .Release.Namespace) -}}
{{- end -}}
{{ concat .Values.webhooks.namespacesNeverJudged (list .Release.Namespace) | uniq | toJson }}
{{- end -}}
{{- end }}

{{/* A webhook entry's namespaceSelector: never the namespaces of gate-admission.namespacesNeverJudged. */}}
{{- define "gate-admission.namespaceSelector" -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: {{ include "gate-admission.namespacesNeverJudged" . }}
{{- end }}

{{/*
A Deployment's PodDisruptionBudget; the argument: (list $ "webhook" name values) with the
component's values (replicas, podDisruptionBudget). maxUnavailable by default, so that one
replica never blocks a node drain; a minAvailable that every replica would have to meet is
refused, since no Pod of that Deployment could then ever be evicted.
*/}}
{{- define "gate-admission.pdb" -}}
{{- $ := index . 0 -}}
{{- $values := index . 3 -}}
{{- $pdb := $values.podDisruptionBudget -}}
{{- if $pdb.enabled }}
{{- if and (hasKey $pdb "minAvailable") (ge (int $pdb.minAvailable) (int $values.replicas)) }}
{{- fail (printf "gate-admission: %s.podDisruptionBudget.minAvailable=%v with %v replicas would block every node drain (no %s Pod could ever be evicted). Set maxUnavailable instead (the default, 1), raise the replicas, or set podDisruptionBudget.enabled=false" (ternary "server" "controller" (eq (index . 1) "webhook")) $pdb.minAvailable $values.replicas (index . 1)) }}
{{- end }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ index . 2 }}
  namespace: {{ $.Release.Namespace }}
  {{- include "gate-admission.metadata" (list $ (index . 1)) | nindent 2 }}
spec:
  {{- if hasKey $pdb "minAvailable" }}
  minAvailable: {{ $pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ $pdb.maxUnavailable | default 1 }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "gate-admission.componentSelectorLabels" (list $ (index . 1)) | nindent 6 }}
{{- end }}
{{- end }}

{{/*
The certificate Jobs' arguments, as a flow list: idempotent, they issue the CA and serving
certificate when missing, renew the serving certificate 30 days before expiry (same CA), keep both
webhooks' caBundle, and create the approval key's Secret when missing, never replacing it
(docs/decisions/0064). Add --renew for a new serving certificate now (docs/operations.md,
"Rotating the certificate").
*/}}
{{- define "gate-admission.certsArgs" -}}
{{- $args := list "certs" (printf "--service=%s" (include "gate-admission.service" .)) (printf "--namespace=%s" .Release.Namespace) (printf "--secret=%s" (include "gate-admission.tlsSecret" .)) "--inject" (printf "--approval-key-secret=%s" (include "gate-admission.approvalKeySecret" .)) -}}
{{- if not (include "gate-admission.defaultNames" .) }}
{{- $args = append $args (printf "--webhook-config=%s" (include "gate-admission.fullname" .)) -}}
{{- end -}}
{{ toJson $args }}
{{- end }}

{{/*
The certificate Jobs' Pod template (the install Job, the CronJob, the renewal on demand); the
argument: (list $ args) with args a flow list (gate-admission.certsArgs).
*/}}
{{- define "gate-admission.certsPod" -}}
{{- $ := index . 0 -}}
metadata:
  {{- include "gate-admission.podMetadata" (list $ "certs" (dict)) | nindent 2 }}
spec:
  # No Service links: for the Service gate-admission Kubernetes would set
  # GATE_ADMISSION_PORT=tcp://..., which is the variable of our --port.
  enableServiceLinks: false
  serviceAccountName: {{ include "gate-admission.fullname" $ }}-certs
  {{- include "gate-admission.podPlacement" (list $ "certs") | trim | nindent 2 }}
  restartPolicy: OnFailure
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    seccompProfile: {type: RuntimeDefault}
  containers:
    - name: certs
      image: {{ include "gate-admission.image" $ | quote }}
      imagePullPolicy: {{ $.Values.image.pullPolicy }}
      args: {{ index . 1 }}
      resources:
        {{- toYaml $.Values.certificates.resources | nindent 8 }}
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities: {drop: [ALL]}
      volumeMounts:
        - {name: tmp, mountPath: /tmp}
  volumes:
    - name: tmp
      emptyDir: {medium: Memory, sizeLimit: 1Mi}
{{- end }}
