package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/osm-vm/osm-vm/provider"
)

// hub holds the last good endpoints of every mesh service and the
// provider's health, and tells watchers what changed. The poller never
// blocks on a watcher: each watcher has a set of dirty services and a
// wake-up channel and sends the current state of each dirty service when
// it runs, so a slow watcher sees coalesced changes, never stale ones.
type hub struct {
	log *slog.Logger

	polled chan struct{} // closed after the first poll, good or not

	mu       sync.Mutex
	synced   bool // a complete read has succeeded
	services map[provider.Service][]provider.Endpoint
	// problems are the current health problems by source ("arm", "tags").
	problems map[string]string
	reported string // health message last told to watchers; "" is healthy
	watchers map[*watcher]struct{}
}

type watcher struct {
	dirty       map[provider.Service]struct{}
	healthDirty bool
	wake        chan struct{}
}

const (
	sourceARM  = "arm"
	sourceTags = "tags"
)

func newHub(log *slog.Logger) *hub {
	return &hub{
		log:      log,
		polled:   make(chan struct{}),
		services: map[provider.Service][]provider.Endpoint{},
		problems: map[string]string{},
		watchers: map[*watcher]struct{}{},
	}
}

// replace makes next the current state and tells watchers about the
// services whose endpoints changed or that went away. Endpoint lists must
// be sorted (discover does it).
func (h *hub) replace(next map[provider.Service][]provider.Endpoint) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var changed []provider.Service
	for svc, eps := range next {
		if old, ok := h.services[svc]; !ok || !sameEndpoints(old, eps) {
			changed = append(changed, svc)
		}
	}
	for svc := range h.services {
		if _, ok := next[svc]; !ok {
			changed = append(changed, svc)
		}
	}
	h.services = next
	h.synced = true
	for _, svc := range changed {
		h.log.Debug("service endpoints changed", "service", svc, "endpoints", len(next[svc]))
		for w := range h.watchers {
			w.dirty[svc] = struct{}{}
			w.poke()
		}
	}
}

// pollDone marks that the first poll has ended.
func (h *hub) pollDone() {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.polled:
	default:
		close(h.polled)
	}
}

// setProblem records (msg != "") or clears (msg == "") the problem of one
// source and tells watchers when the overall health changed.
func (h *hub) setProblem(source, msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if msg == "" {
		delete(h.problems, source)
	} else {
		h.problems[source] = msg
	}
	var msgs []string
	for _, src := range slices.Sorted(maps.Keys(h.problems)) {
		msgs = append(msgs, h.problems[src])
	}
	health := strings.Join(msgs, "; also ")
	if health == h.reported {
		return
	}
	if health == "" {
		h.log.Info("azure provider healthy again")
	} else {
		h.log.Warn("azure provider unhealthy", "error", health)
	}
	h.reported = health
	for w := range h.watchers {
		w.healthDirty = true
		w.poke()
	}
}

// health returns the current health as an error (nil when healthy).
func (h *hub) health() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reported == "" {
		return nil
	}
	return errors.New(h.reported)
}

func (h *hub) listServices() ([]provider.Service, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.synced {
		return nil, h.notSyncedLocked()
	}
	return slices.SortedFunc(maps.Keys(h.services), compareServices), nil
}

func (h *hub) listEndpoints(svc provider.Service) ([]provider.Endpoint, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.synced {
		return nil, h.notSyncedLocked()
	}
	eps, ok := h.services[svc]
	if !ok {
		return nil, fmt.Errorf("service %s: no scale set or VM is tagged with it: %w", svc, provider.ErrNotFound)
	}
	return cloneEndpoints(eps), nil
}

func (h *hub) notSyncedLocked() error {
	if h.reported != "" {
		return fmt.Errorf("%w: no complete read of Azure Resource Manager yet: %s", provider.ErrUnavailable, h.reported)
	}
	return fmt.Errorf("%w: no complete read of Azure Resource Manager yet; retry shortly", provider.ErrUnavailable)
}

// watch sends changes to send until ctx is done. A new watcher first
// hears the provider's health when it is unhealthy.
func (h *hub) watch(ctx context.Context, send func(provider.Event) error) error {
	w := &watcher{dirty: map[provider.Service]struct{}{}, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	h.watchers[w] = struct{}{}
	if h.reported != "" {
		w.healthDirty = true
		w.poke()
	}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.watchers, w)
		h.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.wake:
		}
		for _, ev := range h.drain(w) {
			if err := send(ev); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
	}
}

// drain returns the events a watcher is owed and clears its dirty state.
func (h *hub) drain(w *watcher) []provider.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var evs []provider.Event
	if w.healthDirty {
		w.healthDirty = false
		if h.reported == "" {
			evs = append(evs, provider.HealthChanged(nil))
		} else {
			evs = append(evs, provider.HealthChanged(errors.New(h.reported)))
		}
	}
	dirty := slices.SortedFunc(maps.Keys(w.dirty), compareServices)
	clear(w.dirty)
	for _, svc := range dirty {
		if eps, ok := h.services[svc]; ok {
			evs = append(evs, provider.Updated(svc, cloneEndpoints(eps)))
		} else {
			evs = append(evs, provider.Deleted(svc))
		}
	}
	return evs
}

func (w *watcher) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func compareServices(a, b provider.Service) int { return strings.Compare(a.String(), b.String()) }

func sameEndpoints(a, b []provider.Endpoint) bool {
	return slices.EqualFunc(a, b, func(x, y provider.Endpoint) bool {
		return x.IP == y.IP && x.Port == y.Port && maps.Equal(x.Labels, y.Labels)
	})
}

func cloneEndpoints(eps []provider.Endpoint) []provider.Endpoint {
	out := make([]provider.Endpoint, len(eps))
	for i, e := range eps {
		out[i] = provider.Endpoint{IP: e.IP, Port: e.Port, Labels: maps.Clone(e.Labels)}
	}
	return out
}
