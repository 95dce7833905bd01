package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/kardianos/service"
	"github.com/spf13/cobra"

	"github.com/osm-vm/osm-vm/internal/agent"
)

// agentCommands are run, bootstrap, install, uninstall, start, stop and
// status, added to the root command in main.go.
func agentCommands(stdout, stderr io.Writer) []*cobra.Command {
	return []*cobra.Command{
		newRunCmd(stdout, stderr),
		newBootstrapCmd(stdout),
		newInstallCmd(stdout, stderr),
		newControlCmd(stdout, "uninstall", "Remove the osm-agent system service (keeps the config and data directories)",
			uninstall, "Uninstalled the osm-agent service."),
		newControlCmd(stdout, "start", "Start the osm-agent system service", service.Service.Start, "Started the osm-agent service."),
		newControlCmd(stdout, "stop", "Stop the osm-agent system service (drains Envoy first)", service.Service.Stop, "Stopped the osm-agent service."),
		newStatusCmd(stdout),
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// uninstall removes the unit `osm-agent install` wrote; the osm-agent
// package's own unit is the package manager's to remove.
func uninstall(s service.Service) error {
	if unit, ok := agent.PackagedUnit("/"); ok {
		if _, err := os.Stat(agent.InstalledUnit("/")); err != nil {
			return fmt.Errorf("the unit %s belongs to the osm-agent package: remove the package (apt remove osm-agent, dnf remove osm-agent) or disable it (systemctl disable --now osm-agent)", unit)
		}
	}
	_ = s.Stop()
	return s.Uninstall()
}
