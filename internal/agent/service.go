package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/kardianos/service"
)

// ServiceName is the system service's name (osm-agent.service).
const ServiceName = "osm-agent"

// UnitSpec is what the systemd unit runs.
type UnitSpec struct {
	// Executable is the absolute path of osm-agent.
	Executable string
	// ConfigPath is the absolute path of agent.yaml.
	ConfigPath string
	// DrainTimeout bounds how long a stop drains the proxy; systemd waits
	// that plus a margin before killing.
	DrainTimeout time.Duration
}

// SystemdUnit renders the unit osm-agent installs: restart on failure
// after 2s (kardianos/service's built-in unit waits 120s), after the
// network is online, the whole control group (the proxy too) stopped with
// the agent. It is plain text built here, checked by systemd-analyze in
// the tests, and handed to kardianos/service verbatim.
func SystemdUnit(u UnitSpec) (string, error) {
	for _, p := range []struct{ what, v string }{{"executable", u.Executable}, {"config path", u.ConfigPath}} {
		if !strings.HasPrefix(p.v, "/") {
			return "", fmt.Errorf("systemd unit: %s %q must be an absolute path", p.what, p.v)
		}
		if strings.ContainsAny(p.v, "\n\r\"\\") || strings.Contains(p.v, "{{") {
			return "", fmt.Errorf("systemd unit: %s %q holds a newline, quote, backslash or \"{{\"", p.what, p.v)
		}
	}
	drain := u.DrainTimeout
	if drain <= 0 {
		drain = 5 * time.Second
	}
	stopTimeout := int((drain + 15*time.Second + time.Second - 1) / time.Second)
	var b strings.Builder
	fmt.Fprintf(&b, `# osm-agent: joins this machine to the osm-vm service mesh and runs its
# proxy. The osm-agent package ships it (and then owns it: 'osm-agent
# install' only writes the config); without the package 'osm-agent install'
# writes it and 'osm-agent uninstall' removes it.
[Unit]
Description=osm-vm agent (osm-agent)
Documentation=https://github.com/osm-vm/osm-vm/blob/main/docs/operator-guide.md
After=network-online.target
Wants=network-online.target
StartLimitIntervalSec=0
# Enabled at package install, it starts once 'osm-agent install' wrote the config.
ConditionPathExists=%s

[Service]
Type=simple
ExecStart=%s run --config %s
Restart=always
RestartSec=2s
# The proxy is the agent's child: stop and kill them together.
KillMode=control-group
KillSignal=SIGTERM
TimeoutStopSec=%ds
LimitNOFILE=1048576

[Install]
WantedBy=multi-user.target
`, unitArg(u.ConfigPath), unitArg(u.Executable), unitArg(u.ConfigPath), stopTimeout)
	return b.String(), nil
}

// unitArg quotes a path for ExecStart and escapes systemd's specifiers.
func unitArg(s string) string {
	s = strings.ReplaceAll(s, "%", "%%")
	if strings.ContainsAny(s, " \t'") {
		return `"` + s + `"`
	}
	return s
}

// CheckServiceManager reports whether a service manager is running that
// install can register with. On Linux that is systemd as PID 1
// (/run/systemd/system exists); containers usually have none.
func CheckServiceManager() error {
	if runtime.GOOS != "linux" {
		return nil
	}
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		return errors.New("no service manager is running here (systemd is not PID 1: /run/systemd/system is missing, as in most containers); run `osm-agent run --config FILE` in the foreground under your own supervisor instead")
	}
	return nil
}

// nopProgram satisfies kardianos/service for control operations; the
// service itself runs `osm-agent run`, not through kardianos.
type nopProgram struct{}

func (nopProgram) Start(service.Service) error { return nil }
func (nopProgram) Stop(service.Service) error  { return nil }

// SystemService returns the kardianos/service handle for install,
// uninstall, start, stop and status. On systemd it installs SystemdUnit.
func SystemService(u UnitSpec) (service.Service, error) {
	unit, err := SystemdUnit(u)
	if err != nil {
		return nil, err
	}
	return service.New(nopProgram{}, &service.Config{
		Name:        ServiceName,
		DisplayName: "osm-vm agent",
		Description: "Joins this machine to the osm-vm service mesh and runs its proxy",
		Executable:  u.Executable,
		Arguments:   []string{"run", "--config", u.ConfigPath},
		Option:      serviceOptions(unit),
	})
}

// packagedUnitPaths are where the osm-agent package installs its unit:
// Debian's and Fedora's unit directories.
var packagedUnitPaths = []string{"lib/systemd/system/" + ServiceName + ".service", "usr/lib/systemd/system/" + ServiceName + ".service"}

// PackagedUnit returns the osm-agent package's unit under root ("/" but
// in tests) if the package is installed. The package then owns the unit:
// install writes only the configuration, and uninstall leaves the unit to
// the package manager.
func PackagedUnit(root string) (string, bool) {
	for _, p := range packagedUnitPaths {
		path := filepath.Join(root, p)
		if _, err := os.Stat(path); err == nil {
			return path, true
		}
	}
	return "", false
}

// InstalledUnit is where `osm-agent install` (kardianos/service) writes
// its unit on systemd; it overrides a packaged one.
func InstalledUnit(root string) string {
	return filepath.Join(root, "etc/systemd/system", ServiceName+".service")
}

func serviceOptions(unit string) service.KeyValue {
	opts := service.KeyValue{"SystemdScript": unit, "Restart": "always"}
	for k, v := range windowsRecovery {
		opts[k] = v
	}
	return opts
}
