package main

import (
	"io"
	"log/slog"

	"github.com/kardianos/service"
	"github.com/spf13/cobra"
)

// agentCommands are run, bootstrap, install, uninstall, start, stop and
// status, added to the root command in main.go.
func agentCommands(stdout, stderr io.Writer) []*cobra.Command {
	return []*cobra.Command{
		newRunCmd(stderr),
		newBootstrapCmd(stdout),
		newInstallCmd(stdout),
		newControlCmd(stdout, "uninstall", "Remove the osm-agent system service (keeps the config and data directories)",
			func(s service.Service) error { _ = s.Stop(); return s.Uninstall() }, "Uninstalled the osm-agent service."),
		newControlCmd(stdout, "start", "Start the osm-agent system service", service.Service.Start, "Started the osm-agent service."),
		newControlCmd(stdout, "stop", "Stop the osm-agent system service (drains Envoy first)", service.Service.Stop, "Stopped the osm-agent service."),
		newStatusCmd(stdout),
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
