{{/*
kdefer.labels: the labels of every object the chart makes (called with the
root context). app.kubernetes.io/name is the one kustomize's deploy/ puts on
every kdefer object; the rest are the standard labels Helm charts carry
(instance, version, part-of, managed-by, helm.sh/chart), which kustomize's
objects lack: TestChartMatchesKustomize leaves them out of its comparison.
The component is each object's own (kdefer.componentLabels).
*/}}
{{- define "kdefer.labels" -}}
app.kubernetes.io/name: kdefer
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: kdefer
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* kdefer.componentLabels: kdefer.labels and app.kubernetes.io/component (dict "root" . "component" NAME). */}}
{{- define "kdefer.componentLabels" -}}
{{ include "kdefer.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
kdefer.withLabels: obj (a parsed manifest) with the chart's labels added to
its own (its own win: a component it names stays). Returns nothing: it sets
obj's metadata.labels.
*/}}
{{- define "kdefer.withLabels" -}}
{{- $_ := set .obj.metadata "labels" (merge (dict) (default dict .obj.metadata.labels) (include "kdefer.componentLabels" . | fromYaml)) -}}
{{- end }}

{{/*
kdefer.selectorLabels: the controller's pods, as deploy/ selects them. The
Deployment's and PodDisruptionBudget's selectors and the Services' are these
and nothing else: a Deployment's selector cannot change on upgrade.
*/}}
{{- define "kdefer.selectorLabels" -}}
app.kubernetes.io/name: kdefer
app.kubernetes.io/component: controller
{{- end }}

{{/* kdefer.image: repository:tag, the tag the chart's appVersion unless set. */}}
{{- define "kdefer.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end }}

{{/*
kdefer.namespaced: a manifest of deploy/ (copied into files/ by make
generate) with its namespace, kdefer-system, replaced by the release's, and
the chart's labels added: the objects are kustomize's, so the two installs
cannot drift apart.
*/}}
{{- define "kdefer.namespaced" -}}
{{- $ns := .root.Release.Namespace -}}
{{- $text := .root.Files.Get .file | replace "namespace: kdefer-system" (printf "namespace: %s" $ns) | replace "system:serviceaccount:kdefer-system:" (printf "system:serviceaccount:%s:" $ns) -}}
{{- /* Each object with the chart's labels, its component its directory's. */ -}}
{{- $component := get (dict "rbac" "controller" "node-agent" "node-agent" "policy" "admission-policy" "monitoring" "metrics" "webhook" "webhook" "crd" "crds" "critical-pods" "defer-pods") (base (dir .file)) -}}
{{- $docs := list -}}
{{- range splitList "\n---\n" (printf "\n%s" $text) -}}
{{- $obj := fromYaml . -}}
{{- if $obj -}}
{{- include "kdefer.withLabels" (dict "root" $.root "component" $component "obj" $obj) -}}
{{- $docs = append $docs (toYaml $obj) -}}
{{- end -}}
{{- end -}}
{{- join "\n---\n" $docs -}}
{{- end }}
