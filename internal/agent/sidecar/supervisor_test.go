package sidecar_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/osm-vm/osm-vm/internal/agent/agenttest"
	"github.com/osm-vm/osm-vm/internal/agent/envoy"
	"github.com/osm-vm/osm-vm/internal/agent/sidecar"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/testaddr"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

func TestMain(m *testing.M) {
	agenttest.RunFakeEnvoyIfAsked()
	os.Exit(m.Run())
}

// logRecord is one record the supervisor logged.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// chanHandler sends every record to a channel, so a test can wait for a
// line instead of sleeping.
type chanHandler struct {
	ch    chan logRecord
	attrs []slog.Attr
}

func (h *chanHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *chanHandler) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { rec.attrs[a.Key] = a.Value.String(); return true })
	select {
	case h.ch <- rec:
	default: // a full channel drops records rather than stalling the supervisor
	}
	return nil
}
func (h *chanHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &chanHandler{ch: h.ch, attrs: append(append([]slog.Attr{}, h.attrs...), as...)}
}
func (h *chanHandler) WithGroup(string) slog.Handler { return h }

// waitLog waits for a record whose message contains substr.
func waitLog(t *testing.T, ch <-chan logRecord, substr string) logRecord {
	t.Helper()
	timeout := time.After(testwait.Bound(t))
	for {
		select {
		case r := <-ch:
			if strings.Contains(r.msg, substr) {
				return r
			}
		case <-timeout:
			t.Fatalf("no log line containing %q", substr)
		}
	}
}

type env struct {
	ads    *agenttest.ADSServer
	cn     string
	driver *envoy.Driver
	logs   chan logRecord
	log    *slog.Logger
}

// setup writes a proxy certificate, the Envoy bootstrap and SDS files for
// an ADS server into a temporary data directory, with the test binary as
// the Envoy binary (the helper process pattern).
func setup(t *testing.T, crash string) *env {
	t.Helper()
	t.Setenv(agenttest.FakeEnvoyEnv, "1")
	t.Setenv(agenttest.FakeEnvoyCrashEnv, crash)
	ca := agenttest.NewCA(t)
	ads := agenttest.StartADS(t, ca)
	dir := t.TempDir()
	id := mesh.NewProxyIdentity(mesh.MeshService{Namespace: "default", Name: "bookstore"})
	certPEM, keyPEM := ca.KeyPair(t, id.CommonName(), time.Hour)
	for name, data := range map[string][]byte{"proxy.crt": certPEM, "proxy.key": keyPEM, "ca.crt": ca.PEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	d, err := envoy.New(sidecar.Options{BinaryPath: exe, DataDir: dir, AdminPort: uint16(testaddr.FreePort(t)), DrainTime: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	files, err := d.Files(sidecar.ProxyConfig{
		NodeID: id.CommonName(), Service: id.Service, XDSAddress: ads.Addr,
		CertFile: filepath.Join(dir, "proxy.crt"), KeyFile: filepath.Join(dir, "proxy.key"), CAFile: filepath.Join(dir, "ca.crt"),
		ControlPlaneID: agenttest.ControlPlaneID,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, envoy.SDSDir), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, f.Mode); err != nil {
			t.Fatal(err)
		}
	}
	logs := make(chan logRecord, 10000)
	return &env{ads: ads, cn: id.CommonName(), driver: d, logs: logs, log: slog.New(&chanHandler{ch: logs})}
}

func waitAck(t *testing.T, e *env) agenttest.Ack {
	t.Helper()
	select {
	case a := <-e.ads.Acks:
		return a
	case <-time.After(testwait.Bound(t)):
		t.Fatal("no ADS ACK from the proxy")
	}
	return agenttest.Ack{}
}

func TestSupervisorRunsProxyAndDrainsOnStop(t *testing.T) {
	e := setup(t, "")
	s := sidecar.NewSupervisor(e.driver, e.log, sidecar.SupervisorOptions{DrainTime: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	ack := waitAck(t, e)
	if diff := cmp.Diff(ack, agenttest.Ack{NodeID: e.cn, PeerCN: e.cn, TypeURL: agenttest.ListenerType, Version: "1"}, cmpopts.IgnoreFields(agenttest.Ack{}, "Node", "Server")); diff != "" {
		t.Errorf("ACK (-got +want):\n%s", diff)
	}
	rec := waitLog(t, e.logs, "lds: ACKed version 1")
	if rec.attrs["proxy"] != "envoy" || rec.attrs["stream"] != "stderr" {
		t.Errorf("forwarded log attrs = %v, want proxy=envoy stream=stderr", rec.attrs)
	}
	if st := s.Status(); !st.Running || st.PID == 0 || st.Restarts != 0 {
		t.Errorf("status while running = %+v, want running with a PID and no restarts", st)
	}

	cancel()
	waitLog(t, e.logs, "draining listeners (graceful=true)")
	waitLog(t, e.logs, "caught SIGTERM")
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil after a stop", err)
		}
	case <-time.After(testwait.Bound(t)):
		t.Fatal("Run did not return after cancel")
	}
	if st := s.Status(); st.Running || st.Restarts != 0 {
		t.Errorf("status after stop = %+v, want not running, no restarts", st)
	}
}

// Restart (the agent's answer to a changed bootstrap) drains and stops the
// proxy and starts a new one at once, which connects again; it is not
// counted as a crash.
func TestSupervisorRestart(t *testing.T) {
	e := setup(t, "")
	s := sidecar.NewSupervisor(e.driver, e.log, sidecar.SupervisorOptions{DrainTime: 100 * time.Millisecond, InitialBackoff: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	waitAck(t, e)
	first := s.Status().PID
	s.Restart("the xDS address changed")
	s.Restart("merged with the first")
	rec := waitLog(t, e.logs, "restarting the proxy")
	if rec.attrs["reason"] != "the xDS address changed" {
		t.Errorf("restart logged reason %q", rec.attrs["reason"])
	}
	waitLog(t, e.logs, "draining listeners (graceful=true)")
	waitAck(t, e) // a new proxy (the backoff is an hour: not a crash restart)
	st := s.Status()
	if !st.Running || st.PID == first || st.PID == 0 || st.Restarts != 0 {
		t.Errorf("status after Restart = %+v, want a new running PID (not %d) and no crash restarts", st, first)
	}
	select {
	case a := <-e.ads.Acks:
		t.Errorf("a third proxy connected (%+v): the merged request restarted it again", a)
	case <-time.After(500 * time.Millisecond):
	}

	// A restart without a reason is a restart all the same.
	second := s.Status().PID
	s.Restart("")
	waitAck(t, e)
	if st := s.Status(); !st.Running || st.PID == second || st.Restarts != 0 {
		t.Errorf("status after Restart(\"\") = %+v, want a new running PID (not %d) and no crash restarts", st, second)
	}
}

func TestSupervisorRestartsCrashLoopWithGrowingBackoff(t *testing.T) {
	e := setup(t, "ack")
	exits := make(chan sidecar.Event, 100)
	s := sidecar.NewSupervisor(e.driver, e.log, sidecar.SupervisorOptions{
		InitialBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, ResetAfter: time.Hour,
		OnEvent: func(ev sidecar.Event) {
			if ev.Kind == sidecar.Exited {
				exits <- ev
			}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	var backoffs []time.Duration
	for i := range 4 {
		waitAck(t, e) // each run connects and ACKs before it crashes
		select {
		case ev := <-exits:
			backoffs = append(backoffs, ev.Backoff)
			if ev.Restarts != i+1 || ev.Err == nil || !strings.Contains(ev.Err.Error(), "exit status 3") {
				t.Errorf("exit %d = %+v, want restarts %d and exit status 3", i, ev, i+1)
			}
		case <-time.After(testwait.Bound(t)):
			t.Fatalf("no exit %d", i)
		}
	}
	want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 40 * time.Millisecond}
	if diff := cmp.Diff(backoffs, want); diff != "" {
		t.Errorf("backoffs (-got +want):\n%s", diff)
	}
	if st := s.Status(); st.Restarts < 4 || !strings.Contains(st.LastExit, "exit status 3") {
		t.Errorf("status = %+v, want at least 4 restarts and the last exit", st)
	}
	rec := waitLog(t, e.logs, "crashing after ACK")
	if rec.level != slog.LevelError {
		t.Errorf("a [critical] proxy line was logged at %v, want ERROR", rec.level)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil: a crash loop never ends the supervisor", err)
		}
	case <-time.After(testwait.Bound(t)):
		t.Fatal("Run did not return after cancel")
	}
}

func TestSupervisorMissingBinary(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "envoy")
	d, err := envoy.New(sidecar.Options{BinaryPath: missing, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var events []sidecar.Event
	s := sidecar.NewSupervisor(d, slog.New(slog.DiscardHandler), sidecar.SupervisorOptions{OnEvent: func(e sidecar.Event) { events = append(events, e) }})
	err = s.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "--envoy-path") {
		t.Errorf("Run = %v, want one error naming %s and --envoy-path", err, missing)
	}
	if len(events) != 0 {
		t.Errorf("events = %v, want none: nothing was started", events)
	}
}

func TestRegistry(t *testing.T) {
	var r sidecar.Registry
	if err := r.Register(envoy.Name, envoy.Factory); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(envoy.Name, envoy.Factory); err == nil {
		t.Error("registering envoy twice succeeded, want an error")
	}
	if err := r.Register("nil", nil); err == nil {
		t.Error("registering a nil factory succeeded, want an error")
	}
	d, err := r.New("envoy", sidecar.Options{DataDir: t.TempDir()})
	if err != nil || d.Name() != "envoy" {
		t.Errorf("New(envoy) = %v, %v; want the envoy driver", d, err)
	}
	_, err = r.New("pipy", sidecar.Options{DataDir: t.TempDir()})
	if want := `sidecar driver "pipy" is not known (known: envoy)`; err == nil || err.Error() != want {
		t.Errorf("New(pipy) = %v, want %s", err, want)
	}
}

func ExampleRegistry() {
	var r sidecar.Registry
	_ = r.Register(envoy.Name, envoy.Factory)
	fmt.Println(r.Names())
	// Output: [envoy]
}

// processless is a driver that runs no process, like the agent's "none".
type processless struct{ commands int }

func (processless) Name() string                                      { return "none" }
func (processless) Files(sidecar.ProxyConfig) ([]sidecar.File, error) { return nil, nil }
func (processless) BootstrapFile() string                             { return "grpc-bootstrap.json" }
func (processless) Check() error                                      { return nil }
func (p *processless) Command() *exec.Cmd                             { p.commands++; return nil }
func (processless) Drain(context.Context) error                       { return nil }

func TestSupervisorWithoutAProcessWaitsForItsContext(t *testing.T) {
	logs := make(chan logRecord, 100)
	var events []sidecar.Event
	d := &processless{}
	s := sidecar.NewSupervisor(d, slog.New(&chanHandler{ch: logs}), sidecar.SupervisorOptions{OnEvent: func(e sidecar.Event) { events = append(events, e) }})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitLog(t, logs, "no proxy process to run")
	if st := s.Status(); st.Running || st.Driver != "none" {
		t.Errorf("status %+v, want driver none, not running", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if len(events) != 0 || d.commands != 1 {
		t.Errorf("events %+v after %d Command calls, want no events after 1 call", events, d.commands)
	}
}
