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
