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
