# %pre of {{.Name}} (Fedora's packaging guidelines: users created in %pre).
{{- if .User}}
getent group {{.User}} >/dev/null || groupadd -r {{.User}}
getent passwd {{.User}} >/dev/null || useradd -r -g {{.User}} -d {{.DataDir}} -s /sbin/nologin -c "osm-vm control plane" {{.User}}
{{- end}}
exit 0
