package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"

	"github.com/osm-vm/osm-vm/internal/testwait"
	"github.com/osm-vm/osm-vm/provider"
	"github.com/osm-vm/osm-vm/providers/azure/internal/fakearm"
)

const testSub = "6f1c2b3a-4d5e-4f60-8a7b-9c0d1e2f3a4b"

type logWriter struct{ t testing.TB }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// modelOpener serves a fakearm model to the test mode, whatever the
// fixture path says.
func modelOpener(m *fakearm.Model) fixtureOpener {
	return func(string, string) (azcore.TokenCredential, policy.Transporter, func() error, error) {
		return m.Credential(), m.Transport(), nil, nil
	}
}

// startModel configures a provider on model m. extra is merged into the
// config (for example `"resourceGroups": ["rg-a"]`); the poll interval
// defaults to 50ms.
func startModel(ctx context.Context, t *testing.T, m *fakearm.Model, extra string) *provider.Plugin {
	t.Helper()
	p := newProvider(testLogger(t), connectARM, modelOpener(m))
	cfg := fmt.Sprintf(`{"subscriptionId": %q, "testFixture": "in-memory", "pollInterval": "50ms"}`, testSub)
	if extra != "" {
		cfg = cfg[:len(cfg)-1] + ", " + extra + "}"
	}
	if err := p.Configure(ctx, "test", []byte(cfg)); err != nil {
		t.Fatalf("Configure(%s): %v", cfg, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// tags returns the tags that map a resource to svc ("name.namespace") on port.
func tags(svc string, port int) map[string]string {
	return map[string]string{"osm-service": svc, "osm-port": strconv.Itoa(port)}
}

// snapshot renders a provider's services as "namespace/name" -> sorted
// "ip:port" (with "@resource-id-suffix" when ids is set).
func snapshot(ctx context.Context, p provider.Provider, ids bool) (map[string][]string, error) {
	svcs, err := p.ListServices(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, svc := range svcs {
		eps, err := p.ListEndpoints(ctx, svc)
		if err != nil {
			return nil, err
		}
		out[svc.String()] = render(eps, ids)
	}
	return out, nil
}

func render(eps []provider.Endpoint, ids bool) []string {
	out := []string{}
	for _, e := range eps {
		s := e.String()
		if ids {
			id := e.Labels[labelResourceID]
			s += "@" + id[strings.Index(id, "/providers/")+len("/providers/"):]
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// waitFor waits until cond returns "", failing with its last complaint.
func waitFor(t testing.TB, what string, cond func() string) {
	t.Helper()
	testwait.Until(t, what, func() (bool, string) { reason := cond(); return reason == "", reason })
}

// eventLog records the events of one Watch call.
type eventLog struct {
	mu     sync.Mutex
	events []provider.Event
}

func watchEvents(ctx context.Context, t *testing.T, p provider.Provider) *eventLog {
	t.Helper()
	l := &eventLog{}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- p.Watch(ctx, func(ev provider.Event) error {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.events = append(l.events, ev)
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch returned %v after cancel; want nil", err)
		}
	})
	return l
}

// updates returns the endpoint events so far as "svc: eps" lines.
func (l *eventLog) updates() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ev := range l.events {
		switch {
		case ev.Health != nil:
		case ev.Deleted:
			out = append(out, ev.Service.String()+": deleted")
		default:
			out = append(out, ev.Service.String()+": "+strings.Join(render(ev.Endpoints, false), ","))
		}
	}
	return out
}

func (l *eventLog) health() []provider.Health {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []provider.Health
	for _, ev := range l.events {
		if ev.Health != nil {
			out = append(out, *ev.Health)
		}
	}
	return out
}

// ---- a providertest.Backend on a fixture

// layout says how a backend lays a service out in Azure.
type layout string

const (
	layoutUniform    layout = "Uniform"
	layoutFlexible   layout = "Flexible"
	layoutStandalone layout = "standalone"
)

// fixtureBackend keeps a fixture in which each service is one scale set
// (or a group of standalone VMs) per port, and applies every change
// through apply (a model's Set, or a rewrite of a fixture file).
type fixtureBackend struct {
	layout layout
	rg     string
	apply  func(fakearm.Fixture) error

	mu  sync.Mutex
	fx  fakearm.Fixture
	seq int
}

func newFixtureBackend(l layout, rg string, apply func(fakearm.Fixture) error) *fixtureBackend {
	return &fixtureBackend{layout: l, rg: rg, apply: apply, fx: fakearm.Fixture{ResourceGroups: []string{rg}, PageSize: 2}}
}

func resourcePrefix(svc provider.Service) string { return svc.Name + "-" + svc.Namespace + "-" }

func (b *fixtureBackend) SetEndpoints(_ context.Context, svc provider.Service, eps []provider.Endpoint) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.removeLocked(svc)
	byPort := map[uint16][]provider.Endpoint{}
	for _, e := range eps {
		byPort[e.Port] = append(byPort[e.Port], e)
	}
	for _, port := range slices.Sorted(maps.Keys(byPort)) {
		name := resourcePrefix(svc) + strconv.Itoa(int(port))
		t := tags(svc.Name+"."+svc.Namespace, int(port))
		var instances []fakearm.Instance
		for _, e := range byPort[port] {
			b.seq++
			instances = append(instances, fakearm.Instance{Name: fmt.Sprintf("%s-vm%d", name, b.seq), PrivateIP: e.IP.String()})
		}
		if b.layout == layoutStandalone {
			for _, in := range instances {
				b.fx.VirtualMachines = append(b.fx.VirtualMachines, fakearm.VirtualMachine{ResourceGroup: b.rg, Tags: t, Instance: in})
			}
			continue
		}
		if b.layout == layoutUniform {
			for i := range instances {
				instances[i].Name = strconv.Itoa(b.seq*100 + i)
			}
		}
		b.fx.ScaleSets = append(b.fx.ScaleSets, fakearm.ScaleSet{ResourceGroup: b.rg, Name: name, Mode: string(b.layout), Tags: t, Instances: instances})
	}
	return b.apply(b.fx)
}

func (b *fixtureBackend) DeleteService(_ context.Context, svc provider.Service) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.removeLocked(svc)
	return b.apply(b.fx)
}

// Break makes the credential fail; Repair makes it work again.
func (b *fixtureBackend) Break(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fx.CredentialError = "AADSTS7000215: Invalid client secret provided (conformance suite)"
	return b.apply(b.fx)
}

func (b *fixtureBackend) Repair(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fx.CredentialError = ""
	return b.apply(b.fx)
}

func (b *fixtureBackend) removeLocked(svc provider.Service) {
	p := resourcePrefix(svc)
	b.fx.ScaleSets = slices.DeleteFunc(b.fx.ScaleSets, func(s fakearm.ScaleSet) bool { return strings.HasPrefix(s.Name, p) })
	b.fx.VirtualMachines = slices.DeleteFunc(b.fx.VirtualMachines, func(v fakearm.VirtualMachine) bool { return strings.HasPrefix(v.Name, p) })
}

// writeFixture writes fx to path atomically, so a poll never reads half a
// file.
func writeFixture(path string, fx fakearm.Fixture) error {
	b, err := json.MarshalIndent(fx, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".fixture-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// responseError is the *azcore.ResponseError azcore returns for an HTTP
// error response carrying one header.
func responseError(status int, header, value string) error {
	h := http.Header{}
	h.Set(header, value)
	h.Set("x-ms-error-code", "TooManyRequests")
	req, _ := http.NewRequest(http.MethodGet, "https://management.azure.com/subscriptions/x", nil)
	return runtime.NewResponseError(&http.Response{StatusCode: status, Header: h, Body: http.NoBody, Request: req})
}
