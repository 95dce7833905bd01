package sidecar

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// SupervisorOptions tune a Supervisor. Zero fields take the defaults.
type SupervisorOptions struct {
	// InitialBackoff is the wait before the first restart (default 1s); it
	// doubles after each quick exit up to MaxBackoff (default 30s).
	InitialBackoff, MaxBackoff time.Duration
	// ResetAfter is how long a run must last for the backoff to reset to
	// InitialBackoff (default 30s).
	ResetAfter time.Duration
	// DrainTime is how long a stop waits after Drain before terminating the
	// proxy (default 5s); StopTimeout how long it then waits before killing
	// it (default 5s).
	DrainTime, StopTimeout time.Duration
	// OnEvent, when set, is called synchronously for each start and exit.
	OnEvent func(Event)
}

func (o *SupervisorOptions) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&o.InitialBackoff, time.Second)
	set(&o.MaxBackoff, 30*time.Second)
	set(&o.ResetAfter, 30*time.Second)
	set(&o.DrainTime, 5*time.Second)
	set(&o.StopTimeout, 5*time.Second)
}

// EventKind says what happened to the proxy process.
type EventKind string

// The event kinds.
const (
	Started  EventKind = "started"
	Exited   EventKind = "exited"   // exited on its own; a restart follows after Backoff
	Draining EventKind = "draining" // stop requested; Drain was called
	Stopped  EventKind = "stopped"  // exited after a stop request
)

// Event reports a change of the proxy process.
type Event struct {
	Kind     EventKind
	PID      int
	Restarts int
	// Backoff is the wait before the next start (Exited only).
	Backoff time.Duration
	// Err is the exit or start error (Exited only).
	Err error
}

// Status is a snapshot of the supervised proxy, for `osm-agent status`.
type Status struct {
	Driver    string        `json:"driver"`
	Running   bool          `json:"running"`
	PID       int           `json:"pid,omitempty"`
	StartedAt time.Time     `json:"startedAt,omitzero"`
	Restarts  int           `json:"restarts"`
	LastExit  string        `json:"lastExit,omitempty"`
	ExitedAt  time.Time     `json:"exitedAt,omitzero"`
	Backoff   time.Duration `json:"backoffNanos,omitempty"`
}

// Supervisor runs one driver's proxy process.
type Supervisor struct {
	driver Driver
	log    *slog.Logger
	opts   SupervisorOptions

	// restart asks Run to drain and stop the proxy and start it again at
	// once; it holds at most one request.
	restart chan string

	mu     sync.Mutex
	status Status
}

// errRestarted is what runOnce returns when the proxy was stopped by
// Restart.
var errRestarted = errors.New("restarted")

// NewSupervisor returns a supervisor for d that logs to log, tagged with
// the driver's name.
func NewSupervisor(d Driver, log *slog.Logger, opts SupervisorOptions) *Supervisor {
	opts.defaults()
	return &Supervisor{
		driver:  d,
		log:     log.With("proxy", d.Name()),
		opts:    opts,
		status:  Status{Driver: d.Name()},
		restart: make(chan string, 1),
	}
}

// Restart asks Run to drain and stop the running proxy and start it again
// right away, for reason (logged), so that it reads a changed bootstrap.
// It does not wait; requests made while one is pending are merged, and a
// proxy started after the request reads the bootstrap as it is then, so
// it is not restarted again. Without a process to run it does nothing.
func (s *Supervisor) Restart(reason string) {
	select {
	case s.restart <- reason:
	default:
	}
}

// Status returns the proxy's current status.
func (s *Supervisor) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

func (s *Supervisor) update(f func(*Status)) Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.status)
	return s.status
}

func (s *Supervisor) emit(e Event) {
	if s.opts.OnEvent != nil {
		s.opts.OnEvent(e)
	}
}

// Run starts the proxy and keeps it running until ctx is done, then drains
// and stops it. It returns an error only when the proxy cannot be started
// at all (Driver.Check fails); a proxy that exits is restarted with backoff,
// however often it exits. For a driver that runs no process (Command
// returns nil) Run only waits for ctx: the status never shows it running.
func (s *Supervisor) Run(ctx context.Context) error {
	if err := s.driver.Check(); err != nil {
		return err
	}
	cmd := s.driver.Command()
	if cmd == nil {
		s.log.Info("no proxy process to run: applications read the bootstrap themselves")
		<-ctx.Done()
		return nil
	}
	backoff := s.opts.InitialBackoff
	for {
		started := time.Now()
		err := s.runOnce(ctx, cmd)
		if ctx.Err() != nil {
			return nil
		}
		if !errors.Is(err, errRestarted) {
			if !s.afterExit(ctx, err, time.Since(started), &backoff) {
				return nil
			}
		}
		if cmd = s.driver.Command(); cmd == nil {
			return fmt.Errorf("sidecar driver %s stopped returning a command to run", s.driver.Name())
		}
	}
}

// afterExit records a proxy exit and waits out the backoff before the next
// start (doubling it for the next time); false when ctx ended meanwhile.
func (s *Supervisor) afterExit(ctx context.Context, err error, ran time.Duration, backoff *time.Duration) bool {
	if ran >= s.opts.ResetAfter {
		*backoff = s.opts.InitialBackoff
	}
	if cerr := s.driver.Check(); cerr != nil {
		err = fmt.Errorf("%w; %w", err, cerr)
	}
	wait := *backoff
	st := s.update(func(st *Status) {
		st.Running, st.PID = false, 0
		st.Restarts++
		st.LastExit = err.Error()
		st.ExitedAt = time.Now()
		st.Backoff = wait
	})
	s.log.Error("proxy exited; restarting", "err", err, "restarts", st.Restarts, "backoff", wait)
	s.emit(Event{Kind: Exited, Restarts: st.Restarts, Backoff: wait, Err: err})
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	*backoff = min(wait*2, s.opts.MaxBackoff)
	return true
}

// runOnce runs the proxy until it exits (the error says how), Restart is
// called (it is then drained and stopped, and runOnce returns
// errRestarted) or ctx is done (drained and stopped, and it returns nil).
func (s *Supervisor) runOnce(ctx context.Context, cmd *exec.Cmd) error {
	select { // this start reads the bootstrap as it is now
	case <-s.restart:
	default:
	}
	prepare(cmd)
	stdout := &logWriter{log: s.log, stream: "stdout"}
	stderr := &logWriter{log: s.log, stream: "stderr"}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = time.Second // a grandchild holding the pipes open must not hang Wait
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	pid := cmd.Process.Pid
	st := s.update(func(st *Status) { st.Running, st.PID, st.StartedAt, st.Backoff = true, pid, time.Now(), 0 })
	s.log.Info("proxy started", "pid", pid, "path", cmd.Path)
	s.emit(Event{Kind: Started, PID: pid, Restarts: st.Restarts})

	done := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		stdout.flush()
		stderr.flush()
		done <- err
	}()
	restarted := false
	select {
	case err := <-done:
		if err == nil {
			err = errors.New("exited with status 0")
		}
		return err
	case <-ctx.Done():
	case reason := <-s.restart:
		restarted = true
		s.log.Info("restarting the proxy", "reason", reason, "pid", pid)
	}
	s.stop(ctx, cmd, done)
	s.update(func(st *Status) { st.Running, st.PID = false, 0 })
	s.emit(Event{Kind: Stopped, PID: pid})
	if restarted && ctx.Err() == nil {
		return errRestarted
	}
	return nil
}

// stop drains the proxy, waits DrainTime (or until it exits), terminates
// it, and kills it after StopTimeout. It returns once the process is gone.
func (s *Supervisor) stop(ctx context.Context, cmd *exec.Cmd, done <-chan error) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.DrainTime)
	defer cancel()
	s.emit(Event{Kind: Draining, PID: cmd.Process.Pid})
	if err := s.driver.Drain(dctx); err != nil {
		s.log.Warn("proxy drain failed; terminating it now", "err", err)
	} else {
		s.log.Info("proxy draining", "drainTime", s.opts.DrainTime)
		select {
		case err := <-done:
			s.log.Info("proxy exited while draining", "err", err)
			return
		case <-dctx.Done():
		}
	}
	if err := terminate(cmd.Process); err != nil {
		s.log.Warn("terminate proxy", "err", err)
	}
	t := time.NewTimer(s.opts.StopTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		s.log.Info("proxy stopped", "err", err)
	case <-t.C:
		s.log.Error("proxy did not exit after termination; killing it", "timeout", s.opts.StopTimeout)
		cmd.Process.Kill()
		<-done
	}
}

// logWriter forwards a proxy's output to the logger, one record per line.
// Envoy's default format "[time][thread][level][logger] msg" sets the level.
type logWriter struct {
	log    *slog.Logger
	stream string
	mu     sync.Mutex
	buf    []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 { // a runaway line: emit what we have
		w.emit(string(w.buf))
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

func (w *logWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.emit(string(w.buf))
		w.buf = nil
	}
}

func (w *logWriter) emit(line string) {
	line = strings.TrimRight(line, "\r")
	if line == "" {
		return
	}
	w.log.Log(context.Background(), lineLevel(line), line, "stream", w.stream)
}

// lineLevel reads the level from an Envoy-format log line.
func lineLevel(line string) slog.Level {
	switch {
	case strings.Contains(line, "][critical]"), strings.Contains(line, "][error]"):
		return slog.LevelError
	case strings.Contains(line, "][warning]"):
		return slog.LevelWarn
	case strings.Contains(line, "][debug]"), strings.Contains(line, "][trace]"):
		return slog.LevelDebug
	}
	return slog.LevelInfo
}
