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

// hub holds the current endpoints of every mesh service and the provider's
// health, and tells watchers what changed. Producers (informer handlers)
// never block on a watcher: each watcher has a set of dirty services and a
// wake-up channel, and sends the current state of each dirty service when
// it runs. A slow watcher therefore sees coalesced changes, never stale
// ones, and memory stays bounded by the number of services.
type hub struct {
	log *slog.Logger

	syncedC chan struct{} // closed by markSynced

	mu       sync.Mutex
	synced   bool
	services map[provider.Service][]provider.Endpoint
	// problems are the current errors by source (an informer, the initial
	// sync); the provider is healthy when there are none.
	problems map[string]error
	reported string // the health message last told to watchers; "" is healthy
	watchers map[*watcher]struct{}
}

type watcher struct {
	dirty       map[provider.Service]struct{}
	healthDirty bool
	wake        chan struct{}
}

func newHub(log *slog.Logger) *hub {
	return &hub{
		log:      log,
		syncedC:  make(chan struct{}),
		services: map[provider.Service][]provider.Endpoint{},
		problems: map[string]error{},
		watchers: map[*watcher]struct{}{},
	}
}

// set records the endpoints of svc; present false means no Kubernetes
// Service maps to it any more. Watchers hear of it only when something
// changed. eps must be sorted (mergeEndpoints does it).
func (h *hub) set(svc provider.Service, eps []provider.Endpoint, present bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	old, had := h.services[svc]
	switch {
	case !present && !had:
		return
	case !present:
		delete(h.services, svc)
		h.log.Debug("service gone", "service", svc)
	case had && sameEndpoints(old, eps):
		return
	default:
		if eps == nil {
			eps = []provider.Endpoint{}
		}
		h.services[svc] = eps
		h.log.Debug("service endpoints changed", "service", svc, "endpoints", len(eps))
	}
	for w := range h.watchers {
		w.dirty[svc] = struct{}{}
		w.poke()
	}
}

// markSynced makes the state visible to List calls.
func (h *hub) markSynced() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.synced {
		h.synced = true
		close(h.syncedC)
	}
	h.setProblemLocked(sourceInitialSync, nil)
}

// notSyncedInTime records that the first complete list is late, unless it
// has arrived meanwhile.
func (h *hub) notSyncedInTime(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.synced {
		h.setProblemLocked(sourceInitialSync, err)
	}
}

const sourceInitialSync = "initial sync"

// setProblem records (err != nil) or clears (err == nil) the problem of one
// source and tells watchers when the overall health changed.
func (h *hub) setProblem(source string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.setProblemLocked(source, err)
}

func (h *hub) setProblemLocked(source string, err error) {
	if err == nil {
		delete(h.problems, source)
	} else {
		h.problems[source] = err
	}
	msg := h.healthMessageLocked()
	if msg == h.reported {
		return
	}
	if msg == "" {
		h.log.Info("kubernetes provider healthy again")
	} else {
		h.log.Warn("kubernetes provider unhealthy", "error", msg)
	}
	h.reported = msg
	for w := range h.watchers {
		w.healthDirty = true
		w.poke()
	}
}

// healthMessageLocked describes the current problems, naming each cause
// once with the sources it affects, for example
// "kubernetes API https://10.0.0.1:6443: dial tcp ...: connection refused; check ...
// (failing: endpointslices in all namespaces, services in all namespaces)".
func (h *hub) healthMessageLocked() string {
	bySource := map[string][]string{}
	for src, err := range h.problems {
		bySource[err.Error()] = append(bySource[err.Error()], src)
	}
	var msgs []string
	for _, detail := range slices.Sorted(maps.Keys(bySource)) {
		msgs = append(msgs, fmt.Sprintf("%s (failing: %s)", detail, strings.Join(slices.Sorted(slices.Values(bySource[detail])), ", ")))
	}
	return strings.Join(msgs, "; also ")
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
	out := slices.Collect(maps.Keys(h.services))
	slices.SortFunc(out, func(a, b provider.Service) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

func (h *hub) listEndpoints(svc provider.Service) ([]provider.Endpoint, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.synced {
		return nil, h.notSyncedLocked()
	}
	eps, ok := h.services[svc]
	if !ok {
		return nil, fmt.Errorf("service %s: no Kubernetes Service maps to it in the watched namespaces: %w", svc, provider.ErrNotFound)
	}
	return cloneEndpoints(eps), nil
}

func (h *hub) notSyncedLocked() error {
	if msg := h.healthMessageLocked(); msg != "" {
		return fmt.Errorf("%w: not yet synced with the cluster: %s", provider.ErrUnavailable, msg)
	}
	return fmt.Errorf("%w: not yet synced with the cluster; retry shortly", provider.ErrUnavailable)
}

// watch sends changes to send until ctx is done. A new watcher first hears
// the provider's health when it is unhealthy.
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
	dirty := slices.SortedFunc(maps.Keys(w.dirty), func(a, b provider.Service) int { return strings.Compare(a.String(), b.String()) })
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

func cloneEndpoints(eps []provider.Endpoint) []provider.Endpoint {
	out := make([]provider.Endpoint, len(eps))
	for i, e := range eps {
		out[i] = provider.Endpoint{IP: e.IP, Port: e.Port, Labels: maps.Clone(e.Labels)}
	}
	return out
}
