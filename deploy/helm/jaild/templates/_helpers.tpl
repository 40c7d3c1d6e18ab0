{{/* The labels that select the release's pods. */}}
{{- define "jaild.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The labels of every object. */}}
{{- define "jaild.labels" -}}
{{ include "jaild.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The socket's path in the container and on the node. */}}
{{- define "jaild.socket" -}}
{{ clean .Values.socket.hostDir }}/jaild.sock
{{- end -}}

{{/* Where the TLS Secret is mounted. */}}
{{- define "jaild.tlsDir" -}}
/etc/jaild/tls
{{- end -}}

{{/*
The configuration as the daemon reads it: .Values.config with the keys the
chart owns (they must agree with the volumes, ports and probes).
*/}}
{{- define "jaild.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- if hasKey $cfg "socket" -}}
{{- fail "config.socket is set by the chart from socket.hostDir: set that instead" -}}
{{- end -}}
{{- $_ := set $cfg "socket" (include "jaild.socket" .) -}}
{{- $tls := get $cfg "tls" | default dict -}}
{{- if .Values.tls.enabled -}}
{{- range $k := list "listen" "cert" "key" "client_ca" -}}
{{- if hasKey $tls $k -}}
{{- fail (printf "config.tls.%s is set by the chart (tls.port, tls.listenHost, tls.secretName): leave it out" $k) -}}
{{- end -}}
{{- end -}}
{{- if not (get $tls "clients") -}}
{{- fail "tls.enabled needs at least one client in config.tls.clients (a listener without clients refuses every connection)" -}}
{{- end -}}
{{- $dir := include "jaild.tlsDir" . -}}
{{- $_ := set $tls "listen" (printf "%s:%d" .Values.tls.listenHost (int .Values.tls.port)) -}}
{{- $_ := set $tls "cert" (printf "%s/tls.crt" $dir) -}}
{{- $_ := set $tls "key" (printf "%s/tls.key" $dir) -}}
{{- $_ := set $tls "client_ca" (printf "%s/ca.crt" $dir) -}}
{{- $_ := set $cfg "tls" $tls -}}
{{- else if get $tls "listen" -}}
{{- fail "config.tls.listen is set but tls.enabled is not: set tls.enabled (the chart then sets the listener, its files and the Service)" -}}
{{- end -}}
{{- toJson $cfg -}}
{{- end -}}

{{/*
A Go duration ("30s", "1m30s") in whole seconds, rounded up; a string that is
not one fails the render.
*/}}
{{- define "jaild.seconds" -}}
{{- $d := toString . -}}
{{- if not (regexMatch "^([0-9]+(\\.[0-9]+)?(h|m|s|ms|us|ns))+$" $d) -}}
{{- fail (printf "%q is not a duration like \"30s\" or \"1m30s\"" $d) -}}
{{- end -}}
{{- $units := dict "h" 3600.0 "m" 60.0 "s" 1.0 "ms" 0.001 "us" 0.000001 "ns" 0.000000001 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(h|ms|us|ns|m|s)" $d -1 -}}
{{- $n := regexFind "^[0-9.]+" . -}}
{{- $total = addf $total (mulf (float64 $n) (get $units (trimPrefix $n .))) -}}
{{- end -}}
{{- ceil $total | int64 -}}
{{- end -}}

{{/*
jaild.toml from a map: top-level keys, then one [table] per map, each
nested map or list of maps inline. Keys are sorted; null values are left out.
*/}}
{{- define "jaild.toml" -}}
{{- range $k, $v := . -}}
{{- if and (not (kindIs "map" $v)) (not (kindIs "invalid" $v)) }}
{{ include "jaild.tomlKey" $k }} = {{ include "jaild.tomlValue" $v }}
{{- end -}}
{{- end -}}
{{- range $k, $v := . -}}
{{- if kindIs "map" $v }}

[{{ include "jaild.tomlKey" $k }}]
{{- range $k2, $v2 := $v -}}
{{- if not (kindIs "invalid" $v2) }}
{{ include "jaild.tomlKey" $k2 }} = {{ include "jaild.tomlValue" $v2 }}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end }}
{{ end -}}

{{- define "jaild.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . -}}{{ . }}{{- else -}}{{ toJson . }}{{- end -}}
{{- end -}}

{{/*
One TOML value. Numbers come from YAML as float64: whole ones are written as
integers, which jaild's integer keys need.
*/}}
{{- define "jaild.tomlValue" -}}
{{- if kindIs "string" . -}}
{{ toJson . }}
{{- else if kindIs "bool" . -}}
{{ . }}
{{- else if or (kindIs "float64" .) (kindIs "int" .) (kindIs "int64" .) -}}
{{- if eq (float64 .) (floor .) -}}{{ int64 . }}{{- else -}}{{ . }}{{- end -}}
{{- else if kindIs "slice" . -}}
[{{ range $i, $e := . }}{{ if $i }}, {{ end }}{{ include "jaild.tomlValue" $e }}{{ end }}]
{{- else if kindIs "map" . -}}
{ {{- $first := true -}}
{{- range $k, $v := . -}}
{{- if not (kindIs "invalid" $v) -}}
{{- if not $first }}, {{ end -}}
{{- $first = false -}}
{{ include "jaild.tomlKey" $k }} = {{ include "jaild.tomlValue" $v }}
{{- end -}}
{{- end -}} }
{{- else -}}
{{- fail (printf "config: a value of kind %s has no TOML form" (kindOf .)) -}}
{{- end -}}
{{- end -}}
