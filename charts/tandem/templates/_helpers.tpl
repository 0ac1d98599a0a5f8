{{/*
Chart name, truncated to 63 characters (a DNS label).
*/}}
{{- define "tandem.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Full name of the release's objects. Truncated to 55 characters so suffixes such as
"-metrics" still fit in a 63-character name.
*/}}
{{- define "tandem.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 55 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 55 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tandem.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Selector labels: immutable for the life of the Deployment, so no version in here.
*/}}
{{- define "tandem.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tandem.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/*
Standard labels on every object of the chart.
*/}}
{{- define "tandem.labels" -}}
{{ include "tandem.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: tandem
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "tandem.chart" . }}
{{- end -}}

{{- define "tandem.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tandem.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
Images: the operator's, and the data-plane images it passes to the pods it renders.
*/}}
{{- define "tandem.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "tandem.dataPlaneImage" -}}
{{- $repository := default .Values.image.repository .Values.dataPlane.image.repository -}}
{{- $tag := default (default .Chart.AppVersion .Values.image.tag) .Values.dataPlane.image.tag -}}
{{- printf "%s:%s" $repository $tag -}}
{{- end -}}

{{- define "tandem.trtllmImage" -}}
{{- printf "%s:%s" .Values.dataPlane.trtllmImage.repository (default .Chart.AppVersion .Values.dataPlane.trtllmImage.tag) -}}
{{- end -}}

{{/*
The leader Lease's name; `tandem operator run` uses the same default.
*/}}
{{- define "tandem.leaseName" -}}
tandem-operator
{{- end -}}

{{/*
The operator's rules on what it manages in a namespace: a ClusterRole's when it watches
every namespace, a Role's in each of operator.watchNamespaces otherwise. Least privilege:
each rule lists only the verbs the operator uses (docs/operator.md).
*/}}
{{- define "tandem.operatorNamespacedRules" -}}
  # Read the clusters, write only their status.
  - apiGroups: ["tandem.dev"]
    resources: ["inferenceclusters"]
    verbs: ["list", "watch"]
  - apiGroups: ["tandem.dev"]
    resources: ["inferenceclusters/status", "workerpools/status"]
    verbs: ["patch"]
  # Owner references with blockOwnerDeletion need update on the owner's finalizers.
  - apiGroups: ["tandem.dev"]
    resources: ["inferenceclusters/finalizers", "workerpools/finalizers"]
    verbs: ["update"]
  # Server-side apply creates (create) and updates (patch) what it renders.
  - apiGroups: ["tandem.dev"]
    resources: ["workerpools"]
    verbs: ["list", "watch", "create", "patch"]
  - apiGroups: ["apps"]
    resources: ["deployments"]
    verbs: ["list", "watch", "create", "patch", "delete"]
  - apiGroups: ["leaderworkerset.x-k8s.io"]
    resources: ["leaderworkersets"]
    verbs: ["list", "watch", "create", "patch", "delete"]
  # GB200: one ComputeDomain per cluster (NVIDIA's DRA driver) for multi-node NVLink.
  - apiGroups: ["resource.nvidia.com"]
    resources: ["computedomains"]
    verbs: ["list", "watch", "create", "patch", "delete"]
  - apiGroups: [""]
    resources: ["services", "configmaps"]
    verbs: ["list", "watch", "create", "patch", "delete"]
  # Each frontend gets its own ServiceAccount and a Role to watch its pools'
  # EndpointSlices (operator access.py). RBAC lets the operator grant only what it
  # holds, hence list/watch on endpointslices here too.
  - apiGroups: [""]
    resources: ["serviceaccounts"]
    verbs: ["list", "watch", "create", "patch", "delete"]
  - apiGroups: ["rbac.authorization.k8s.io"]
    resources: ["roles", "rolebindings"]
    verbs: ["list", "watch", "create", "patch", "delete"]
  - apiGroups: ["discovery.k8s.io"]
    resources: ["endpointslices"]
    verbs: ["list", "watch"]
  - apiGroups: ["policy"]
    resources: ["poddisruptionbudgets"]
    verbs: ["list", "watch", "create", "patch", "delete"]
  # Planning an engine without a step-time database (the reference engine on cpu): one
  # profiling Job per cluster; deleted when what it profiles changes (its pod template
  # cannot). Its table is read from the finished pod's status (pods: list/watch above).
  - apiGroups: ["batch"]
    resources: ["jobs"]
    verbs: ["list", "watch", "create", "patch", "delete"]
  # Each cluster's credentials Secret (its CA bundle and member certificate) and, for
  # workers spanning nodes, its MPI SSH key Secret, created and rotated by the operator.
  # RBAC cannot narrow list/watch to our own Secrets; the operator's watch asks for its
  # label only (app.kubernetes.io/managed-by). get: an MPI key Secret made by hand (no
  # such label) is read by name to adopt it; list grants that read already.
  - apiGroups: [""]
    resources: ["secrets"]
    verbs: ["get", "list", "watch", "create", "patch"]
  # Each cluster's NetworkPolicy: workers accept only their own cluster's pods.
  - apiGroups: ["networking.k8s.io"]
    resources: ["networkpolicies"]
    verbs: ["list", "watch", "create", "patch"]
  # The autoscaler (builtin mode) resizes pools through /scale, as HPA or KEDA would.
  - apiGroups: ["tandem.dev"]
    resources: ["workerpools/scale"]
    verbs: ["patch"]
  # Pods: their conditions explain why a pool is short (InsufficientGPU); the only write
  # is the autoscaler's pod-deletion-cost annotation, so a scale-down removes idle workers.
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["list", "watch", "patch"]
  - apiGroups: [""]
    resources: ["events"]
    verbs: ["create"]
{{- end }}
