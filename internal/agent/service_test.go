package agent_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/agent"
)

func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze not found: apt-get install systemd (the generated unit must be checked)")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	unit, err := agent.SystemdUnit(agent.UnitSpec{Executable: exe, ConfigPath: "/etc/osm-agent/agent.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Restart=always\n", "RestartSec=2s\n", "After=network-online.target\n", "Wants=network-online.target\n", "KillMode=control-group\n", "ExecStart=" + exe + " run --config /etc/osm-agent/agent.yaml\n"} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %q:\n%s", want, unit)
		}
	}
	if strings.Contains(unit, "RestartSec=120") || strings.Contains(unit, "{{") {
		t.Errorf("unit holds kardianos/service's template or its 120s restart:\n%s", unit)
	}
	path := filepath.Join(dir, agent.ServiceName+".service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", "--man=no", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify (%v):\n%s\nunit:\n%s", err, out, unit)
	}
}

func TestSystemdUnitQuotingAndRejects(t *testing.T) {
	unit, err := agent.SystemdUnit(agent.UnitSpec{Executable: "/opt/osm agent/osm-agent", ConfigPath: "/etc/osm-agent/100%.yaml", DrainTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`ExecStart="/opt/osm agent/osm-agent" run --config /etc/osm-agent/100%%.yaml`, "TimeoutStopSec=45s"} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %q:\n%s", want, unit)
		}
	}
	for _, bad := range []agent.UnitSpec{
		{Executable: "osm-agent", ConfigPath: "/etc/osm-agent/agent.yaml"},
		{Executable: "/usr/bin/osm-agent", ConfigPath: "/etc/{{Path}}"},
		{Executable: "/usr/bin/osm-agent\nExecStartPre=/bin/evil", ConfigPath: "/etc/a.yaml"},
	} {
		if _, err := agent.SystemdUnit(bad); err == nil {
			t.Errorf("SystemdUnit(%+v) succeeded, want an error", bad)
		}
	}
}

// TestPackagedUnitIsTheGeneratedOne keeps the static unit the packages
// ship identical to what `osm-agent install` writes.
func TestPackagedUnitIsTheGeneratedOne(t *testing.T) {
	want, err := agent.SystemdUnit(agent.UnitSpec{Executable: "/usr/bin/osm-agent", ConfigPath: "/etc/osm-agent/agent.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "packaging", "systemd", "osm-agent.service")
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if diff := cmp.Diff(string(got), want); diff != "" {
		t.Errorf("%s differs from SystemdUnit (-file +generated; go test -update rewrites it):\n%s", path, diff)
	}
}

func TestCheckServiceManager(t *testing.T) {
	_, statErr := os.Stat("/run/systemd/system")
	err := agent.CheckServiceManager()
	if (statErr == nil) != (err == nil) {
		t.Errorf("CheckServiceManager = %v with /run/systemd/system stat error %v", err, statErr)
	}
	if err != nil && !strings.Contains(err.Error(), "osm-agent run") {
		t.Errorf("CheckServiceManager = %q, want it to suggest `osm-agent run`", err)
	}
}
