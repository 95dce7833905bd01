#!/bin/sh
# postrm of {{.Name}}: remove keeps configuration and data; purge deletes them.
set -e
{{- if .Unit}}
if [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
if [ "$1" = "remove" ]; then
	if [ -x "/usr/bin/deb-systemd-helper" ]; then
		deb-systemd-helper mask '{{.Unit}}' >/dev/null || true
	fi
fi
if [ "$1" = "purge" ]; then
	if [ -x "/usr/bin/deb-systemd-helper" ]; then
		deb-systemd-helper purge '{{.Unit}}' >/dev/null || true
		deb-systemd-helper unmask '{{.Unit}}' >/dev/null || true
	fi
fi
{{- end}}
{{- if .Purge}}
if [ "$1" = "purge" ]; then
	rm -rf{{range .Purge}} {{.}}{{end}}
fi
{{- end}}
exit 0
