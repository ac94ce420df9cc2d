{{/*
hotplugd.objects renders every object of a file of deploy/kubernetes (a
link in files/) with the release's namespace: in metadata.namespace where
the object has one, and in the ServiceAccount subjects of bindings. Extra
labels (a dict) are added to metadata.labels. Argument: (list $ "file" labels).
*/}}
{{- define "hotplugd.objects" -}}
{{- $ := index . 0 -}}
{{- $file := index . 1 -}}
{{- $labels := index . 2 -}}
{{- range $doc := regexSplit "(?m)^---\\s*$" ($.Files.Get (printf "files/%s" $file)) -1 -}}
{{- $obj := fromYaml $doc -}}
{{- if $obj }}
{{- if hasKey $obj.metadata "namespace" }}
{{- $_ := set $obj.metadata "namespace" $.Release.Namespace }}
{{- end }}
{{- range $s := $obj.subjects | default list }}
{{- if eq $s.kind "ServiceAccount" }}
{{- $_ := set $s "namespace" $.Release.Namespace }}
{{- end }}
{{- end }}
{{- if $labels }}
{{- $_ := set $obj.metadata "labels" (merge (dict) $labels ($obj.metadata.labels | default dict)) }}
{{- end }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
hotplugd.mergeByKey merges the list patch into the list base by the field
key, as a strategic merge patch does for these lists: an entry of the patch
replaces the base's entry with the same key in place, others are appended.
Argument: (list base patch key); result: YAML {items: [...]}.
*/}}
{{- define "hotplugd.mergeByKey" -}}
{{- $base := index . 0 | default list -}}
{{- $patch := index . 1 | default list -}}
{{- $key := index . 2 -}}
{{- $out := list -}}
{{- range $b := $base -}}
{{- $item := $b -}}
{{- range $p := $patch -}}
{{- if eq (toString (index $p $key)) (toString (index $b $key)) -}}
{{- $item = $p -}}
{{- end -}}
{{- end -}}
{{- $out = append $out $item -}}
{{- end -}}
{{- range $p := $patch -}}
{{- $found := false -}}
{{- range $b := $base -}}
{{- if eq (toString (index $p $key)) (toString (index $b $key)) -}}
{{- $found = true -}}
{{- end -}}
{{- end -}}
{{- if not $found -}}
{{- $out = append $out $p -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "items" $out) -}}
{{- end -}}

{{/*
hotplugd.image is the image reference: values' repository with a digest
(image.digest, else the tag, else the digest deploy/kubernetes pins).
*/}}
{{- define "hotplugd.image" -}}
{{- $pin := index (.Files.Get "files/kustomization.yaml" | fromYaml).images 0 -}}
{{- $repo := .Values.image.repository | default $pin.newName -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repo .Values.image.digest -}}
{{- else if .Values.image.tag -}}
{{- printf "%s:%s" $repo .Values.image.tag -}}
{{- else -}}
{{- printf "%s@%s" $repo $pin.digest -}}
{{- end -}}
{{- end -}}
