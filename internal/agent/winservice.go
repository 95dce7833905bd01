package agent

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/kardianos/service"
)

// ServiceProgram runs the agent under a service manager that calls in
// (Windows' Service Control Manager, through kardianos/service): Start
// returns at once with the agent running, Stop cancels it and waits for
// it to finish, and an agent that fails on its own calls exit with 1, so
// the SCM sees the service die and applies its recovery actions (restart,
// which install configures). On systemd the unit runs `osm-agent run`
// directly and this is not used.
type ServiceProgram struct {
	log  *slog.Logger
	run  func(ctx context.Context) error
	exit func(code int)
	// stopTimeout bounds how long Stop waits for the agent (the SCM kills
	// a service that does not stop within its own limit).
	stopTimeout time.Duration

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan error
}

// NewServiceProgram returns the program for run; exit is os.Exit but in
// tests.
func NewServiceProgram(log *slog.Logger, run func(ctx context.Context) error, exit func(code int)) *ServiceProgram {
	return &ServiceProgram{log: log, run: run, exit: exit, stopTimeout: 20 * time.Second}
}

var _ service.Interface = (*ServiceProgram)(nil)

// Start starts the agent in the background: the SCM wants Start to return
// quickly and reports the service running when it does.
func (p *ServiceProgram) Start(service.Service) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancel != nil {
		return errors.New("the agent is already running")
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan error, 1)
	done := p.done
	go func() {
		err := p.run(ctx)
		if ctx.Err() == nil { // it ended on its own, not by Stop
			p.log.Error("the agent stopped on its own; exiting so the service manager's recovery restarts it", "err", err)
			p.exit(1)
		}
		done <- err
	}()
	return nil
}

// Stop cancels the agent (it drains the proxy) and waits for it.
func (p *ServiceProgram) Stop(service.Service) error {
	p.mu.Lock()
	cancel, done := p.cancel, p.done
	p.cancel = nil
	p.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	case <-time.After(p.stopTimeout):
		return errors.New("the agent did not stop within 20s")
	}
}

// windowsRecovery are the Windows service options install sets: start at
// boot, and restart after 2s when the agent dies, with the failure count
// reset after a day (kardianos/service's OnFailure options; other
// platforms ignore them).
var windowsRecovery = service.KeyValue{
	"StartType":              "automatic",
	"OnFailure":              "restart",
	"OnFailureDelayDuration": "2s",
	"OnFailureResetPeriod":   86400,
}

// UnderServiceManager reports whether this process was started by
// Windows' Service Control Manager, which then expects RunService. On
// other systems it is false: systemd runs `osm-agent run` as a plain
// process.
func UnderServiceManager() bool {
	return runtime.GOOS == "windows" && !service.Interactive()
}

// RunService runs prog as the osm-agent service of the running service
// manager: it reports to it, starts prog, and stops prog when asked.
func RunService(prog service.Interface) error {
	s, err := service.New(prog, &service.Config{Name: ServiceName})
	if err != nil {
		return err
	}
	return s.Run()
}
