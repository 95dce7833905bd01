# %post of {{.Name}}{{if .Unit}}: what %systemd_post does (enable per preset on first install){{end}}.
{{- if .Unit}}
if [ $1 -eq 1 ] && [ -x /usr/bin/systemctl ]; then
	systemctl --no-reload preset {{.Unit}} >/dev/null 2>&1 || :
fi
{{- end}}
{{- if .Plugin}}
if [ $1 -eq 1 ]; then
	cat <<'MSG'
{{.Notice}}
MSG
fi
{{- end}}
exit 0
