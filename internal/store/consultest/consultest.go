// Package consultest runs real Consul agents for tests: a dev agent
// ([StartDev]) or a three-server cluster ([StartCluster]), each agent on
// its own random 127.x.y.z with Consul's default ports. An address of its
// own, never 127.0.0.1, keeps a stopped agent's ports from being taken
// while it is down: ports picked on 127.0.0.1 by other tests, and the
// source ports of their outgoing connections, are all on 127.0.0.1. Every
// agent lives in a temporary directory, is ready once it knows a leader
// (polled, never slept for) and is killed by its pid at cleanup.
//
// The binary comes from $OSM_CONSUL_BIN, which `make test` sets to what
// hack/build-consul.sh prints; tests that use this package sit behind the
// consulintegration build tag. It imports nothing of osm-vm, so the store,
// osm-server replica and Consul provider tests can all use it.
package consultest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// BinaryEnv names the variable holding the consul binary's path.
const BinaryEnv = "OSM_CONSUL_BIN"

// noCalls keeps an agent from calling HashiCorp's update-check service:
// tests never send traffic off the machine.
const noCalls = `disable_update_check = true`

// readyWithin bounds the wait for a leader: a failure past it, not a sleep.
const readyWithin = 60 * time.Second

// Binary returns the consul binary's path or fails t saying how to get one.
func Binary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv(BinaryEnv)
	if bin == "" {
		t.Fatalf("%s is not set: run `make test`, or `%s=$(hack/build-consul.sh) go test -tags consulintegration ./internal/store/...`", BinaryEnv, BinaryEnv)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s=%s: %v (hack/build-consul.sh builds it)", BinaryEnv, bin, err)
	}
	return bin
}

// Agent is one running consul agent.
type Agent struct {
	// Name is the agent's node name.
	Name string
	// Host is the loopback address it binds (every port is Consul's default).
	Host string
	// HTTPAddr is host:port of its HTTP API (what CONSUL_HTTP_ADDR takes).
	HTTPAddr string

	bin     string
	args    []string
	logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartDev starts `consul agent -dev` on its own random 127.x.y.z with
// Consul's default ports (HTTP 8500, HTTPS 8501 when configured, serf LAN
// and WAN, server RPC; no DNS, no gRPC) and waits for it to elect itself
// leader. Its state is in memory: a restart starts it empty. Each hcl is
// passed with -hcl (as `acl { enabled = true ... }`).
func StartDev(t testing.TB, hcl ...string) *Agent {
	t.Helper()
	// Two agents may draw the same address: one that exits on it is
	// started again on another.
	for attempt := 1; ; attempt++ {
		a := newDev(t, hcl)
		a.start(t)
		err := waitLeaderOrExit(t.Context(), a)
		if err == nil {
			t.Cleanup(func() { a.cleanup(t) })
			return a
		}
		if errors.Is(err, errExited) && strings.Contains(a.Logs(), "address already in use") && attempt < 5 {
			a.Stop()
			continue
		}
		a.cleanup(t)
		t.Fatalf("dev consul at %s: %v\n%s", a.HTTPAddr, err, a.Logs())
	}
}

// errExited: the agent exited before it elected a leader.
var errExited = errors.New("consul exited")

// waitLeaderOrExit is WaitLeader, ended early when the agent exits.
func waitLeaderOrExit(ctx context.Context, a *Agent) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-a.Exited():
			cancel(errExited)
		case <-ctx.Done():
		}
	}()
	err := WaitLeader(ctx, a.HTTPAddr)
	if cause := context.Cause(ctx); errors.Is(cause, errExited) {
		return cause
	}
	return err
}

// newDev describes a dev agent on its own loopback address (not started).
func newDev(t testing.TB, hcl []string) *Agent {
	bin := Binary(t)
	dir := t.TempDir()
	ip := randomLoopback()
	a := &Agent{
		Name:     "dev",
		Host:     ip,
		HTTPAddr: net.JoinHostPort(ip, "8500"),
		bin:      bin,
		args: []string{"agent", "-dev", "-node", "dev",
			"-bind", ip, "-client", ip, "-dns-port", "-1", "-grpc-port", "-1", "-grpc-tls-port", "-1",
			"-data-dir", filepath.Join(dir, "data"), "-log-level", "warn", "-hcl", noCalls},
		logPath: filepath.Join(dir, "consul.log"),
	}
	for _, h := range hcl {
		a.args = append(a.args, "-hcl", h)
	}
	return a
}

// randomLoopback returns a random 127.x.y.z, never 127.0.0.1's /16.
func randomLoopback() string {
	return fmt.Sprintf("127.%d.%d.%d", 1+rand.IntN(250), 1+rand.IntN(250), 1+rand.IntN(250))
}

// StartCluster starts n servers (-server -bootstrap-expect n -retry-join
// each other), each on its own 127.x.y.z with Consul's default ports, and
// waits until each knows the leader. The x.y is random, so clusters and
// dev agents of concurrent tests rarely share addresses.
func StartCluster(t testing.TB, n int) []*Agent {
	t.Helper()
	bin := Binary(t)
	x, y := 1+rand.IntN(250), 1+rand.IntN(250)
	ips := make([]string, n)
	for i := range ips {
		ips[i] = fmt.Sprintf("127.%d.%d.%d", x, y, i+1)
	}
	agents := make([]*Agent, n)
	for i, ip := range ips {
		dir := t.TempDir()
		args := []string{"agent", "-server", "-bootstrap-expect", strconv.Itoa(n),
			"-node", fmt.Sprintf("server-%d", i+1), "-bind", ip, "-client", ip,
			"-dns-port", "-1", "-grpc-port", "-1", "-grpc-tls-port", "-1",
			"-data-dir", filepath.Join(dir, "data"), "-log-level", "warn", "-hcl", noCalls}
		for j, peer := range ips {
			if j != i {
				args = append(args, "-retry-join", peer)
			}
		}
		agents[i] = &Agent{Name: fmt.Sprintf("server-%d", i+1), Host: ip, HTTPAddr: net.JoinHostPort(ip, "8500"),
			bin: bin, args: args, logPath: filepath.Join(dir, "consul.log")}
		agents[i].start(t)
		t.Cleanup(func() { agents[i].cleanup(t) })
	}
	for _, a := range agents {
		if err := WaitLeader(t.Context(), a.HTTPAddr); err != nil {
			t.Fatalf("consul %s at %s: %v\n%s", a.Name, a.HTTPAddr, err, a.Logs())
		}
	}
	return agents
}

func (a *Agent) start(t testing.TB) {
	t.Helper()
	logf, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(a.bin, a.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s %v: %v", a.bin, a.args, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	a.mu.Lock()
	a.cmd, a.exited = cmd, exited
	a.mu.Unlock()
}

// Stop kills the agent by its pid and waits for it to exit.
func (a *Agent) Stop() {
	a.mu.Lock()
	cmd, exited := a.cmd, a.exited
	a.cmd = nil
	a.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-exited
}

// Restart stops the agent and starts it again with the same flags and
// ports, then waits for a leader. A dev agent comes back empty, its Raft
// index starting again from the beginning.
func (a *Agent) Restart(t testing.TB) {
	t.Helper()
	a.Stop()
	a.start(t)
	if err := waitLeaderOrExit(t.Context(), a); err != nil {
		t.Fatalf("consul %s at %s after restart: %v\n%s", a.Name, a.HTTPAddr, err, a.Logs())
	}
}

// Exited is closed when the agent's current process has exited.
func (a *Agent) Exited() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.exited
}

// Logs returns what the agent wrote to stdout and stderr.
func (a *Agent) Logs() string {
	b, _ := os.ReadFile(a.logPath)
	return string(b)
}

func (a *Agent) cleanup(t testing.TB) {
	a.Stop()
	if t.Failed() {
		logs := a.Logs()
		if len(logs) > 8<<10 {
			logs = "...\n" + logs[len(logs)-8<<10:]
		}
		t.Logf("consul %s (%s) log:\n%s", a.Name, a.HTTPAddr, logs)
	}
}

// WaitLeader polls httpAddr's /v1/status/leader until it names a leader,
// ctx ends, or readyWithin passes.
func WaitLeader(ctx context.Context, httpAddr string) error {
	ctx, cancel := context.WithTimeout(ctx, readyWithin)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		leader, err := leaderOf(ctx, httpAddr)
		if err == nil && leader != "" {
			return nil
		}
		if err != nil {
			last = err
		} else {
			last = errors.New("no leader yet")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no leader within %s: %w", readyWithin, last)
		case <-tick.C:
		}
	}
}

func leaderOf(ctx context.Context, httpAddr string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/v1/status/leader", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, buf.String())
	}
	var leader string
	if err := json.Unmarshal(buf.Bytes(), &leader); err != nil {
		return "", fmt.Errorf("status/leader: %w", err)
	}
	return leader, nil
}

// Leader returns the server address (ip:8300) of the leader httpAddr's
// agent knows, "" when there is none.
func Leader(ctx context.Context, httpAddr string) (string, error) {
	return leaderOf(ctx, httpAddr)
}

// Start starts an agent stopped with Stop again, with the same flags and
// ports, without waiting for a leader (a cluster member may be waiting
// for its peers).
func (a *Agent) Start(t testing.TB) {
	t.Helper()
	a.start(t)
}
