{{/* The labels every object carries (as packaging/deploy's manifests do). */}}
{{- define "dracni.labels" -}}
app.kubernetes.io/name: dracni
{{- end }}

{{/* The image of all three containers: image.tag, else the chart's appVersion. */}}
{{- define "dracni.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The kubelet's dirs, from kubeletRootDir: where kubelet looks for registration sockets, and
where the driver's own socket lives.  Mounted at the same path as on the host. */}}
{{- define "dracni.registryDir" -}}
{{ .Values.kubeletRootDir }}/plugins_registry
{{- end }}
{{- define "dracni.pluginsDir" -}}
{{ .Values.kubeletRootDir }}/plugins
{{- end }}
