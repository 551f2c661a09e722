{{/*
The gateway's name: the release's, with the chart's unless the release
already names it; at most 52 bytes, so that a pod's name and its
controller-revision label fit in 63.
*/}}
{{- define "scistream.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "scistream.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "scistream.labels" -}}
{{ include "scistream.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: gateway
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Where the pod mounts what s2cs reads. */}}
{{- define "scistream.configDir" -}}/etc/scistream/config{{- end -}}
{{- define "scistream.tokensFile" -}}/etc/scistream/tokens/tokens{{- end -}}
{{- define "scistream.tlsDir" -}}/etc/scistream/tls{{- end -}}
{{- define "scistream.stateDir" -}}/var/lib/scistream{{- end -}}
{{- define "scistream.etcdDir" -}}/etc/scistream/etcd{{- end -}}

{{- define "scistream.tokensSecret" -}}
{{- .Values.tokens.existingSecret | default (printf "%s-tokens" (include "scistream.fullname" .)) -}}
{{- end -}}

{{- define "scistream.routeHost" -}}
{{- .Values.route.host | default (printf "wildcard.%s" (get .Values.config "wan_domain")) -}}
{{- end -}}

{{/*
scistream.config is s2cs's configuration file: values.config with what
the chart decides (the paths of the Secrets it mounts, the shared WAN
port's advertised address behind the Route), after refusing keys the
chart owns. s2cs --config checks every key and value when the pod
starts; the chart's tests run the same check on the rendered file.
*/}}
{{- define "scistream.config" -}}
{{- $c := deepCopy .Values.config -}}
{{- range $k := list "listener_ip" "bind" "state_dir" "config" "print_config" "version" -}}
{{- if hasKey $c $k -}}
{{- fail (printf "config.%s: the chart sets it (listener_ip from listenerIP or the pod's IP, bind the pod's IP, state_dir the state volume; config, print_config and version are not settings): remove it" $k) -}}
{{- end -}}
{{- end -}}
{{- if or .Values.tokens.existingSecret .Values.tokens.lines -}}
{{- if hasKey $c "tokens" -}}
{{- fail "config.tokens: the chart sets it to the tokens Secret's file; remove it, or give the Secret as tokens.existingSecret" -}}
{{- end -}}
{{- $_ := set $c "tokens" (include "scistream.tokensFile" .) -}}
{{- else if not (get $c "insecure_no_auth") -}}
{{- fail "no authentication: set tokens.existingSecret (a Secret with the key \"tokens\") or tokens.lines (lines from s2uc hash-token), or config.insecure_no_auth: true for an isolated test" -}}
{{- end -}}
{{- if .Values.tls.existingSecret -}}
{{- if or (hasKey $c "server_crt") (hasKey $c "server_key") -}}
{{- fail "config.server_crt/server_key: the chart sets them to tls.existingSecret's files; remove them" -}}
{{- end -}}
{{- $_ := set $c "server_crt" (printf "%s/tls.crt" (include "scistream.tlsDir" .)) -}}
{{- $_ := set $c "server_key" (printf "%s/tls.key" (include "scistream.tlsDir" .)) -}}
{{- end -}}
{{- if .Values.facility.enabled -}}
{{- if not .Values.tls.existingSecret -}}
{{- fail "facility.enabled needs tls.existingSecret: every node presents the same certificate, since a peer pins one per stream (s2cs would generate one per pod)" -}}
{{- end -}}
{{- if not (hasPrefix "etcd://" (toString (get $c "store"))) -}}
{{- fail "facility.enabled needs config.store: etcd://HOST:PORT[,...], the etcd the nodes share their streams in" -}}
{{- end -}}
{{- if hasKey $c "node" -}}
{{- fail "config.node: the chart names each node of the facility after its pod; remove it" -}}
{{- end -}}
{{- if not (hasKey $c "store_facility") -}}
{{- $_ := set $c "store_facility" (include "scistream.fullname" .) -}}
{{- end -}}
{{- else if hasKey $c "node" -}}
{{- fail "config.node: a gateway of one pod is no node of a facility; set facility.enabled to run several" -}}
{{- end -}}
{{- if .Values.route.enabled -}}
{{- if not (get $c "wan_port") -}}
{{- fail "route.enabled needs config.wan_port, the shared WAN port the Route leads to (e.g. 8443)" -}}
{{- end -}}
{{- if not (get $c "wan_domain") -}}
{{- fail "route.enabled needs config.wan_domain, the domain under which the Route's wildcard host lies and the streams' server names are made (e.g. wan.gw1.apps.example.org)" -}}
{{- end -}}
{{- if not (hasKey $c "wan_advertise") -}}
{{- $_ := set $c "wan_advertise" (printf "%s:443" (include "scistream.routeHost" .)) -}}
{{- end -}}
{{- end -}}
{{- toYaml $c -}}
{{- end -}}

{{/* scistream.ports is the data ports of config.port_range, as a list. */}}
{{- define "scistream.dataPorts" -}}
{{- $range := toString (get .Values.config "port_range" | default "5100-5199") -}}
{{- $lohi := splitList "-" $range -}}
{{- if ne (len $lohi) 2 -}}
{{- fail (printf "config.port_range %q: give LO-HI, e.g. 5100-5110" $range) -}}
{{- end -}}
{{- $lo := atoi (first $lohi) -}}
{{- $hi := atoi (last $lohi) -}}
{{- if or (lt $lo 1) (gt $hi 65535) (gt $lo $hi) -}}
{{- fail (printf "config.port_range %q: give LO-HI within 1-65535, LO not above HI" $range) -}}
{{- end -}}
{{- if gt (sub $hi $lo) 255 -}}
{{- fail (printf "config.port_range %q has %d ports: a Service lists each, so give at most 256, or set service.dataPorts: false" $range (add1 (sub $hi $lo))) -}}
{{- end -}}
{{- toJson (untilStep $lo (int (add1 $hi)) 1) -}}
{{- end -}}
