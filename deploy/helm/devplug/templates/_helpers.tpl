{{/* The release's objects are named after it: "<release>-devplug", or the
release's name alone when it says devplug already. */}}
{{- define "devplug.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains "devplug" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-devplug" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The DaemonSet's selector: never changes between chart versions (a
DaemonSet's selector cannot be updated). */}}
{{- define "devplug.selectorLabels" -}}
app.kubernetes.io/name: devplug
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: devplugd
{{- end -}}

{{- define "devplug.labels" -}}
{{ include "devplug.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* A TOML key: bare when it may be, else quoted. */}}
{{- define "devplug.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . -}}{{ . }}{{- else -}}{{ toJson . }}{{- end -}}
{{- end -}}

{{/* A value as TOML: strings as basic strings (JSON's escapes are TOML's),
whole numbers as integers, lists as arrays, maps as inline tables (keys in
order; null values left out). */}}
{{- define "devplug.tomlValue" -}}
{{- $k := kindOf . -}}
{{- if eq $k "string" -}}
{{- toJson . -}}
{{- else if eq $k "bool" -}}
{{- . -}}
{{- else if or (eq $k "float64") (eq $k "float32") -}}
{{- if eq (floor .) (float64 .) -}}{{ int64 . }}{{- else -}}{{ . }}{{- end -}}
{{- else if hasPrefix "int" $k -}}
{{- . -}}
{{- else if eq $k "slice" -}}
[{{ range $i, $v := . }}{{ if $i }}, {{ end }}{{ include "devplug.tomlValue" $v }}{{ end }}]
{{- else if eq $k "map" -}}
{{- $m := . -}}
{{- $parts := list -}}
{{- range $key := keys $m | sortAlpha -}}
{{- $v := get $m $key -}}
{{- if not (kindIs "invalid" $v) -}}
{{- $parts = append $parts (printf "%s = %s" (include "devplug.tomlKey" $key) (include "devplug.tomlValue" $v)) -}}
{{- end -}}
{{- end -}}
{{- if $parts -}}{ {{ join ", " $parts }} }{{- else -}}{}{{- end -}}
{{- else -}}
{{- fail (printf "devplug: %v (a %s) cannot be written as a TOML value" . $k) -}}
{{- end -}}
{{- end -}}

{{/* The keys of one table, one per line: `first` (a list of keys) in that
order, then the others in alphabetical order; null values left out. */}}
{{- define "devplug.tomlTable" -}}
{{- $t := .table -}}
{{- $order := .first -}}
{{- range $key := keys $t | sortAlpha -}}
{{- if not (has $key $order) -}}{{- $order = append $order $key -}}{{- end -}}
{{- end -}}
{{- $lines := list -}}
{{- range $key := $order -}}
{{- if hasKey $t $key -}}
{{- $v := get $t $key -}}
{{- if not (kindIs "invalid" $v) -}}
{{- $lines = append $lines (printf "%s = %s" (include "devplug.tomlKey" $key) (include "devplug.tomlValue" $v)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- join "\n" $lines -}}
{{- end -}}

{{/* A resource's DRA driver: its dra_driver key, else its name turned
around ("example.com/gpu" -> "gpu.example.com"), lower case, "_" as "-"
(devplugd's own rule). */}}
{{- define "devplug.driver" -}}
{{- if .dra_driver -}}
{{- .dra_driver -}}
{{- else -}}
{{- $parts := splitn "/" 2 .name -}}
{{- $d := .name -}}
{{- if contains "/" .name -}}{{- $d = printf "%s.%s" $parts._1 $parts._0 -}}{{- end -}}
{{- $d | lower | replace "_" "-" -}}
{{- end -}}
{{- end -}}

{{/* The resources served through DRA, as a YAML list of
{name, driver}. */}}
{{- define "devplug.draResources" -}}
{{- $out := list -}}
{{- range .Values.resources -}}
{{- if not .name -}}{{- fail "devplug: every entry of resources needs a name (the extended resource name)" -}}{{- end -}}
{{- if not .module -}}{{- fail (printf "devplug: resource %q needs a module" .name) -}}{{- end -}}
{{- $api := default "device-plugin" .api -}}
{{- if not (has $api (list "device-plugin" "dra" "node-label")) -}}
{{- fail (printf "devplug: resource %q: api is %q; it is \"device-plugin\", \"dra\" or \"node-label\"" .name $api) -}}
{{- end -}}
{{- if has $api (list "dra" "node-label") -}}
{{- $out = append $out (dict "name" .name "driver" (include "devplug.driver" .)) -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{- define "devplug.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
