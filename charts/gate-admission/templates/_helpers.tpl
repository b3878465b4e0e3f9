{{/*
Object names are the manifests' own (the binaries' defaults name them too: --webhook-config,
--lease-name, the Events' source); only the namespace is the release's.
*/}}

{{/* The image of every Pod. */}}
{{- define "gate-admission.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}

{{/* The webhook Service, as the API server and the certificates name it. */}}
{{- define "gate-admission.service" -}}
gate-admission
{{- end }}

{{- define "gate-admission.serviceHost" -}}
{{ include "gate-admission.service" . }}.{{ .Release.Namespace }}.svc
{{- end }}

{{/* The certificate Secret the webhook Pods mount. */}}
{{- define "gate-admission.tlsSecret" -}}
gate-admission-tls
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
