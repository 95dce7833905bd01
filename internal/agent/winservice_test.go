package agent_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/kardianos/service"

	"github.com/osm-vm/osm-vm/internal/agent"
)

// The service program is driven here the way kardianos/service drives it
// for Windows' Service Control Manager: Start must return with the agent
// running, Stop must stop it and wait, and an agent that dies on its own
// must exit the process non-zero so the SCM's recovery restarts it.

func TestServiceProgramStartStop(t *testing.T) {
	running, stopped := make(chan struct{}), make(chan struct{})
	run := func(ctx context.Context) error {
		close(running)
		<-ctx.Done()
		close(stopped)
		return ctx.Err()
	}
	exited := make(chan int, 1)
	var p service.Interface = agent.NewServiceProgram(slog.New(slog.DiscardHandler), run, func(code int) { exited <- code })
	if err := p.Start(nil); err != nil {
		t.Fatalf("Start: %v", err)
	}
	<-running
	if err := p.Stop(nil); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("Stop returned before the agent finished")
	}
	select {
	case code := <-exited:
		t.Errorf("exit(%d) after a requested stop; want no exit (the SCM records a clean stop)", code)
	default:
	}
	if err := p.Stop(nil); err != nil {
		t.Errorf("a second Stop: %v, want nil", err)
	}
}

func TestServiceProgramExitsWhenTheAgentFails(t *testing.T) {
	exited := make(chan int, 1)
	p := agent.NewServiceProgram(slog.New(slog.DiscardHandler), func(context.Context) error {
		return errors.New("proxy certificate: enrollment refused")
	}, func(code int) { exited <- code })
	if err := p.Start(nil); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if code := <-exited; code != 1 {
		t.Errorf("exit(%d), want exit(1) so the service manager restarts the agent", code)
	}
}

func TestServiceProgramRefusesASecondStart(t *testing.T) {
	p := agent.NewServiceProgram(slog.New(slog.DiscardHandler), func(ctx context.Context) error { <-ctx.Done(); return nil }, func(int) {})
	if err := p.Start(nil); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(nil)
	if err := p.Start(nil); err == nil {
		t.Error("a second Start succeeded")
	}
}

// TestServiceRecoveryOptions checks what install hands kardianos/service
// for Windows: automatic start and restart on failure.
func TestServiceRecoveryOptions(t *testing.T) {
	opts := agent.ServiceOptions(t)
	for k, want := range map[string]any{"StartType": "automatic", "OnFailure": "restart", "OnFailureDelayDuration": "2s", "OnFailureResetPeriod": 86400} {
		if opts[k] != want {
			t.Errorf("option %s = %v, want %v", k, opts[k], want)
		}
	}
}
