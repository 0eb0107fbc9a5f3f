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
{{- $component := get (dict "rbac" "controller" "node-agent" "node-agent" "policy" "admission-policy" "monitoring" "metrics" "webhook" "webhook" "crd" "crds" "critical-pods" "defer-pods" "uninstall" "uninstall") (base (dir .file)) -}}
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

{{/*
kdefer.watchNamespaces: the served namespaces of a namespaced install,
comma-separated (the --namespaces flag of the controller and node agent),
each checked as a namespace name.
*/}}
{{- define "kdefer.watchNamespaces" -}}
{{- range .Values.watchNamespaces }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" .) }}
{{- fail (printf "watchNamespaces: %q is not a namespace name (lowercase letters, digits and '-', at most 63)" .) }}
{{- end }}
{{- end }}
{{- join "," .Values.watchNamespaces }}
{{- end }}

{{/*
kdefer.servedNamespacesRBAC: a generated role.yaml (controller-gen's
ClusterRole from the kubebuilder markers, and its namespaced Roles) for a
namespaced install. The ClusterRole keeps its rules on cluster-scoped
resources only; its rules on namespaced resources go into a Role NAME-namespace
in each served namespace, bound to the ServiceAccount there. The rules are
the generated ones, split by resource, never written again here: one source
(TestNamespacedInstall in test/helmchart checks the split loses and adds
nothing; TestNamespacedInstallRBAC in test/envtest checks every resource's
scope against a real apiserver's discovery). Its other documents pass as
they are.
*/}}
{{- define "kdefer.servedNamespacesRBAC" -}}
{{- $cluster := list "nodes" "persistentvolumes" "namespaces" "tokenreviews" "subjectaccessreviews" "clusterdeferpolicies" }}
{{- $namespaces := splitList "," (include "kdefer.watchNamespaces" .root) }}
{{- range $doc := splitList "\n---\n" (include "kdefer.namespaced" .) }}
{{- $r := fromYaml $doc }}
{{- if eq $r.kind "ClusterRole" }}
{{- $clusterRules := list }}
{{- $nsRules := list }}
{{- range $rule := $r.rules }}
{{- $c := list }}
{{- $n := list }}
{{- range $res := $rule.resources }}
{{- if has (first (splitList "/" $res)) $cluster }}
{{- $c = append $c $res }}
{{- else }}
{{- $n = append $n $res }}
{{- end }}
{{- end }}
{{- if $c }}
{{- $clusterRules = append $clusterRules (set (deepCopy $rule) "resources" $c) }}
{{- end }}
{{- if $n }}
{{- $nsRules = append $nsRules (set (deepCopy $rule) "resources" $n) }}
{{- end }}
{{- end }}
---
{{ toYaml (set (deepCopy $r) "rules" $clusterRules) }}
{{- range $ns := $namespaces }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $r.metadata.name }}-namespace
  namespace: {{ $ns }}
  labels:
    {{- include "kdefer.labels" $.root | nindent 4 }}
rules:
{{- toYaml $nsRules | nindent 0 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $r.metadata.name }}-namespace
  namespace: {{ $ns }}
  labels:
    {{- include "kdefer.labels" $.root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $r.metadata.name }}-namespace
subjects:
- kind: ServiceAccount
  name: {{ $.serviceAccount }}
  namespace: {{ $.serviceAccountNamespace }}
{{- end }}
{{- else if $r }}
---
{{ toYaml $r }}
{{- end }}
{{- end }}
{{- end }}
