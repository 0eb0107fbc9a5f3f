{{- define "type_members" -}}
{{- $field := . -}}
{{- if eq $field.Name "metadata" -}}
Refer to Kubernetes API documentation for fields of `metadata`.
{{- else -}}
{{- /* A Go comment's line breaks are not the author's: join each paragraph's lines. */ -}}
{{ $field.Doc | replace "\n\n" "\x00" | replace "\n" " " | replace "\x00" "\n" | markdownRenderFieldDoc }}
{{- end -}}
{{- end -}}
