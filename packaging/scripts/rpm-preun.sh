# %preun of {{.Name}}: what %systemd_preun does (stop and disable on erase).
{{- if .Unit}}
if [ $1 -eq 0 ] && [ -x /usr/bin/systemctl ]; then
	systemctl --no-reload disable --now {{.Unit}} >/dev/null 2>&1 || :
fi
{{- end}}
exit 0
