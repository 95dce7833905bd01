# %postun of {{.Name}}: what %systemd_postun_with_restart does (restart on
# upgrade). Configuration (%config(noreplace), saved as .rpmsave when
# changed) and data are kept on erase: RPM has no purge.
{{- if .Unit}}
if [ -x /usr/bin/systemctl ]; then
	systemctl daemon-reload >/dev/null 2>&1 || :
	if [ $1 -ge 1 ]; then
		systemctl try-restart {{.Unit}} >/dev/null 2>&1 || :
	fi
fi
{{- end}}
{{- if .Plugin}}
if [ $1 -ge 1 ] && [ -x /usr/bin/systemctl ]; then
	systemctl try-restart osm-server.service >/dev/null 2>&1 || :
fi
{{- end}}
exit 0
