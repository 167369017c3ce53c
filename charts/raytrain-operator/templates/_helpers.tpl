{{/* Names, labels and the RBAC rules shared by the templates. */}}

{{- define "raytrain-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "raytrain-operator.fullname" -}}
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

{{- define "raytrain-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "raytrain-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "raytrain-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "raytrain-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "raytrain-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "raytrain-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "raytrain-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
Rules on namespaced objects: the table in docs/operator.md, "RBAC". The operator creates a
per-job Role granting `trainjobs/status` get/patch and `trainjobs` get to the job's pods, so it
must hold those verbs itself (Kubernetes refuses to let a subject grant what it lacks).
*/}}
{{- define "raytrain-operator.namespacedRules" -}}
- apiGroups: ["raytrain.dev"]
  resources: ["trainjobs"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["raytrain.dev"]
  resources: ["trainjobs/status"]
  verbs: ["get", "patch"]
- apiGroups: ["raytrain.dev"]
  resources: ["trainjobs/finalizers"]
  verbs: ["update"]
- apiGroups: ["raytrain.dev"]
  resources: ["trainjobtemplates"]
  verbs: ["get"]
- apiGroups: ["ray.io"]
  resources: ["rayjobs"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["ray.io"]
  resources: ["rayclusters"]
  verbs: ["list", "watch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "get"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["rolebindings"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "create", "patch", "delete"]
{{- if .Values.networkPolicy.enabled }}
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "create", "patch", "delete"]
{{- end }}
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get"]
{{- if .Values.rbac.readSecrets }}
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- end }}
- apiGroups: ["resource.k8s.io"]
  resources: ["resourceclaimtemplates", "resourceclaims"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- if .Values.peering.enabled }}
- apiGroups: ["kopf.dev"]
  resources: ["kopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end -}}

{{/* Rules on cluster-scoped objects: kopf lists namespaces and scans CRDs; the operator reads
the ClusterTrainJobTemplates jobs name. */}}
{{- define "raytrain-operator.clusterRules" -}}
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
- apiGroups: ["raytrain.dev"]
  resources: ["clustertrainjobtemplates"]
  verbs: ["get"]
{{- if .Values.peering.enabled }}
- apiGroups: ["kopf.dev"]
  resources: ["clusterkopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end -}}

{{/* Rules of the pre-delete hook: find TrainJobs, strip the finalizer or delete them. */}}
{{- define "raytrain-operator.uninstallRules" -}}
- apiGroups: ["raytrain.dev"]
  resources: ["trainjobs"]
  verbs: ["get", "list", "patch"{{ if eq .Values.uninstall.trainJobs "deleteTrainJobs" }}, "delete"{{ end }}]
{{- end -}}

{{/* The ingress rules of each TrainJob's NetworkPolicy beyond the job's own pods, as JSON:
KubeRay's operator pods to the dashboard, then networkPolicy.extraIngress. */}}
{{- define "raytrain-operator.networkPolicyIngress" -}}
{{- $np := .Values.networkPolicy -}}
{{- $peer := dict "podSelector" (dict "matchLabels" $np.kuberay.podLabels) -}}
{{- if $np.kuberay.namespace -}}
{{- $_ := set $peer "namespaceSelector" (dict "matchLabels" (dict "kubernetes.io/metadata.name" $np.kuberay.namespace)) -}}
{{- else -}}
{{- $_ := set $peer "namespaceSelector" (dict) -}}
{{- end -}}
{{- $kuberay := dict "from" (list $peer) "ports" (list (dict "protocol" "TCP" "port" 8265)) -}}
{{- prepend ($np.extraIngress | default list) $kuberay | toJson -}}
{{- end -}}

{{/* The namespace selector as JSON, empty when it selects every namespace. */}}
{{- define "raytrain-operator.namespaceSelector" -}}
{{- $sel := .Values.namespaceSelector | default dict -}}
{{- if or $sel.matchLabels $sel.matchExpressions -}}
{{- $sel | toJson -}}
{{- end -}}
{{- end -}}

{{/* The namespace selector as a CEL expression over the admission request's namespaceObject
(true when the selector selects every namespace). */}}
{{- define "raytrain-operator.namespaceSelectorCEL" -}}
{{- $sel := .Values.namespaceSelector | default dict -}}
{{- $terms := list -}}
{{- range $key, $value := $sel.matchLabels -}}
{{- $terms = append $terms (printf "(%s in variables.nsLabels && variables.nsLabels[%s] == %s)" ($key | toJson) ($key | toJson) ($value | toString | toJson)) -}}
{{- end -}}
{{- range $sel.matchExpressions -}}
{{- $k := .key | toJson -}}
{{- if eq .operator "In" -}}
{{- $terms = append $terms (printf "(%s in variables.nsLabels && variables.nsLabels[%s] in %s)" $k $k (.values | toJson)) -}}
{{- else if eq .operator "NotIn" -}}
{{- $terms = append $terms (printf "!(%s in variables.nsLabels && variables.nsLabels[%s] in %s)" $k $k (.values | toJson)) -}}
{{- else if eq .operator "Exists" -}}
{{- $terms = append $terms (printf "(%s in variables.nsLabels)" $k) -}}
{{- else if eq .operator "DoesNotExist" -}}
{{- $terms = append $terms (printf "!(%s in variables.nsLabels)" $k) -}}
{{- end -}}
{{- end -}}
{{- if $terms -}}{{ join " && " $terms }}{{- else -}}true{{- end -}}
{{- end -}}

{{/* The namespace selector as kubectl writes one (raytrain.dev/enabled=true), or "every namespace". */}}
{{- define "raytrain-operator.namespaceSelectorDescription" -}}
{{- $sel := .Values.namespaceSelector | default dict -}}
{{- $parts := list -}}
{{- range $key, $value := $sel.matchLabels -}}
{{- $parts = append $parts (printf "%s=%s" $key ($value | toString)) -}}
{{- end -}}
{{- range $sel.matchExpressions -}}
{{- $parts = append $parts (printf "%s %s %s" .key .operator (join "," (.values | default list))) -}}
{{- end -}}
{{- if $parts -}}{{ join "," $parts }}{{- else -}}every namespace{{- end -}}
{{- end -}}
