{{/*
The labels kustomize's deploy/ puts on every kdefer object; the chart uses
the same ones (and no Helm-specific ones), so the objects it installs are
the ones `kubectl apply -k deploy/` installs (TestChartMatchesKustomize).
*/}}
{{- define "kdefer.labels" -}}
app.kubernetes.io/name: kdefer
{{- end }}

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
generate) with its namespace, kdefer-system, replaced by the release's:
the text is kustomize's, so the two installs cannot drift apart.
*/}}
{{- define "kdefer.namespaced" -}}
{{- $ns := .root.Release.Namespace -}}
{{- .root.Files.Get .file | replace "namespace: kdefer-system" (printf "namespace: %s" $ns) | replace "system:serviceaccount:kdefer-system:" (printf "system:serviceaccount:%s:" $ns) -}}
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
{{- $cluster := list "nodes" "persistentvolumes" "namespaces" "tokenreviews" "subjectaccessreviews" }}
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
    {{- include "kdefer.labels" $ | nindent 4 }}
rules:
{{- toYaml $nsRules | nindent 0 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $r.metadata.name }}-namespace
  namespace: {{ $ns }}
  labels:
    {{- include "kdefer.labels" $ | nindent 4 }}
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
