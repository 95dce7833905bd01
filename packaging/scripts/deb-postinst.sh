#!/bin/sh
# postinst of {{.Name}} (Debian conventions, as dh_installsystemd writes them).
set -e
{{- if .User}}

if [ "$1" = "configure" ]; then
	# The system user the server runs as; kept on purge (Debian policy: a
	# removed user's UID could be reused by another package's files).
	if ! getent passwd {{.User}} >/dev/null; then
		adduser --system --group --home {{.DataDir}} --no-create-home --gecos "osm-vm control plane" {{.User}} >/dev/null
	fi
	install -d -o {{.User}} -g {{.User}} -m 0700 {{.DataDir}}
	# The configuration may hold provider credentials: readable by the
	# server's group only.
	if [ -f {{.Config}} ]; then
		chgrp {{.User}} {{.Config}} && chmod 0640 {{.Config}}
	fi
fi
{{- end}}
{{- if .Unit}}

if [ "$1" = "configure" ] || [ "$1" = "abort-upgrade" ] || [ "$1" = "abort-deconfigure" ] || [ "$1" = "abort-remove" ]; then
	# This will only remove masks created by d-s-h on package removal.
	deb-systemd-helper unmask '{{.Unit}}' >/dev/null || true
	# was-enabled defaults to true, so new installations run enable.
	if deb-systemd-helper --quiet was-enabled '{{.Unit}}'; then
		deb-systemd-helper enable '{{.Unit}}' >/dev/null || true
	else
		deb-systemd-helper update-state '{{.Unit}}' >/dev/null || true
	fi
	if [ -d /run/systemd/system ]; then
		systemctl --system daemon-reload >/dev/null || true
		if [ -n "$2" ]; then
			_dh_action=restart
		else
			_dh_action=start
		fi
		deb-systemd-invoke $_dh_action '{{.Unit}}' >/dev/null || true
	fi
fi
{{- end}}
{{- if .Plugin}}

if [ "$1" = "configure" ]; then
	if [ -n "$2" ]; then
		# An upgrade: osm-server runs plugins from the plugin directory and
		# starts the new binary only when it starts the plugin again.
		if [ -d /run/systemd/system ]; then
			deb-systemd-invoke try-restart osm-server.service >/dev/null || true
		fi
	else
		cat <<'MSG'
{{.Notice}}
MSG
	fi
fi
{{- end}}
{{- if .AgentNotice}}

if [ "$1" = "configure" ] && [ -f /etc/systemd/system/{{.Unit}} ] && [ ! -L /etc/systemd/system/{{.Unit}} ]; then
	echo "note: /etc/systemd/system/{{.Unit}} (written by 'osm-agent install' before this package) overrides the package's unit; run 'osm-agent uninstall' to use the package's."
fi
{{- end}}
exit 0
