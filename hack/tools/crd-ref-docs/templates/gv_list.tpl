{{- define "gvList" -}}
{{- $groupVersions := . -}}

# API reference

<!-- Generated from api/v1alpha1 by `make generate` (crd-ref-docs, templates in
hack/tools/crd-ref-docs): edit the Go types' comments, not this file. -->

kdefer's two custom resources, field by field, as `kubectl explain` shows them:
`DeferPolicy`, the reusable configuration Jobs name with `kdefer.io/policy`
([docs/usage.md, "DeferPolicy: reusable configuration"](usage.md#deferpolicy-reusable-configuration)),
and `DeferRun`, kdefer's record of one pod's defer run, written by kdefer-controller alone
([docs/design.md, "The life of a pod under kdefer"](design.md#the-life-of-a-pod-under-kdefer)).
The annotations a Job sets instead are in
[docs/usage.md, "Opting in"](usage.md#opting-in-a-label-and-a-few-annotations).

{{ range $groupVersions }}
{{ template "gvDetails" . }}
{{ end }}

{{- end -}}
