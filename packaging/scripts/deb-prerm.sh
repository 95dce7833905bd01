#!/bin/sh
# prerm of {{.Name}}: stop the service on removal (an upgrade restarts it
# in postinst instead).
set -e
{{- if .Unit}}
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
	deb-systemd-invoke stop '{{.Unit}}' >/dev/null || true
fi
{{- end}}
exit 0
