package provider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// State is what a provider knows of its backend now: the endpoints of every
// service it reports, and its own health. A Driver's Run keeps it up to
// date; State answers the plugin contract's List and Watch calls from it.
//
// Writers (SetEndpoints, DeleteService, ReplaceAll, SetHealthy,
// SetUnhealthy) never block on a watcher: each Watch call has a set of
// services it is owed and a wake-up signal, and sends the current state of
// each when it runs. A slow watcher therefore sees coalesced changes, never
// stale ones, and memory stays bounded by the number of services. Events
// are level-triggered: an update carries the service's complete endpoints.
//
// Until the first ReplaceAll (the driver's first complete read of its
// backend) the List calls return ErrUnavailable, so the host keeps the
// instance's previous endpoints instead of withdrawing them.
//
// State keeps the endpoint slices it is given and never modifies them; the
// caller must not modify them afterwards either. It is safe for concurrent
// use.
type State struct {
	log *slog.Logger

	mu       sync.Mutex
	complete bool // a ReplaceAll has happened
	services map[Service][]Endpoint
	health   string // the driver's health: "" is healthy
	late     string // set when the first complete read is late; cleared by ReplaceAll
	reported string // the health last told to watchers: "" is healthy
	stopped  error  // why the driver stopped; nil while it runs
	watchers map[*watcher]struct{}
}

// watcher is one Watch call (or Plugin.Configure waiting for the first
// read): what it is owed, and its wake-up signal.
type watcher struct {
	dirty       map[Service]struct{}
	healthDirty bool
	since       time.Time // when the oldest change it is owed was made; zero when none
	wake        chan struct{}
}

// NewState returns an empty State whose first complete read is still to
// come. Plugin makes one for its driver; tests of a driver can make their
// own and pass it to Run.
func NewState(log *slog.Logger) *State {
	return &State{log: log, services: map[Service][]Endpoint{}, watchers: map[*watcher]struct{}{}}
}

// SetEndpoints makes eps the complete current endpoints of svc, adding svc
// if it is new; an empty eps keeps svc with no endpoints. Watchers hear of
// it only when something changed: eps is compared in order, so give it in a
// stable order (sorted, or as the backend lists it). It reports whether
// anything changed.
func (s *State) SetEndpoints(svc Service, eps []Endpoint) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.services[svc]; ok && sameEndpoints(old, eps) {
		return false
	}
	if eps == nil {
		eps = []Endpoint{}
	}
	s.services[svc] = eps
	s.markLocked(time.Now(), svc)
	return true
}

// DeleteService removes svc; watchers hear of it if it was there. It
// reports whether svc was there.
func (s *State) DeleteService(svc Service) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.services[svc]; !ok {
		return false
	}
	delete(s.services, svc)
	s.markLocked(time.Now(), svc)
	return true
}

// ReplaceAll makes services the complete current state, the result of one
// complete read of the backend: services it does not name are deleted.
// The first call makes the state visible to List calls. It returns how
// many services changed (added, deleted, or with other endpoints).
func (s *State) ReplaceAll(services map[Service][]Endpoint) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replaceAllLocked(services)
}

// ReplaceAllWithHealth is ReplaceAll and SetUnhealthy(problems) (healthy
// for nil) in one step, for a driver whose complete read also finds
// problems: no reader sees one read's endpoints with another's health.
func (s *State) ReplaceAllWithHealth(services map[Service][]Endpoint, problems error) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.health = ""
	if problems != nil {
		s.health = problems.Error()
	}
	n := s.replaceAllLocked(services)
	s.healthChangedLocked()
	return n
}

func (s *State) replaceAllLocked(services map[Service][]Endpoint) int {
	var changed []Service
	for svc, eps := range services {
		if old, ok := s.services[svc]; !ok || !sameEndpoints(old, eps) {
			changed = append(changed, svc)
		}
	}
	for svc := range s.services {
		if _, ok := services[svc]; !ok {
			changed = append(changed, svc)
		}
	}
	next := make(map[Service][]Endpoint, len(services))
	for svc, eps := range services {
		if eps == nil {
			eps = []Endpoint{}
		}
		next[svc] = eps
	}
	s.services = next
	if !s.complete {
		s.complete = true
		s.late = ""
		s.healthChangedLocked()
		s.pokeAllLocked() // Plugin.Configure waits for this
	}
	s.markLocked(time.Now(), changed...)
	return len(changed)
}

// SetHealthy says the backend is fine again.
func (s *State) SetHealthy() { s.setHealth("") }

// SetUnhealthy says the backend failed, with err as the cause: name what
// failed and the fix, and say that the last good endpoints stay served
// (they do). A nil err is the same as SetHealthy. Watchers hear of a
// change of the message, not of a repeat.
func (s *State) SetUnhealthy(err error) {
	if err == nil {
		s.setHealth("")
		return
	}
	s.setHealth(err.Error())
}

func (s *State) setHealth(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.health = msg
	s.healthChangedLocked()
}

// Health returns the current health as an error; nil is healthy.
func (s *State) Health() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reported == "" {
		return nil
	}
	return errors.New(s.reported)
}

// firstReadLate records that the first complete read has not come within
// wait, unless it has meanwhile; ReplaceAll clears it.
func (s *State) firstReadLate(wait time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.complete {
		return
	}
	s.late = fmt.Sprintf("no complete read of the backend within %v of start; the provider serves nothing until it has one and keeps trying", wait)
	s.healthChangedLocked()
}

// stop records that the driver stopped (err says why): every Watch call
// returns err, so the host restarts the plugin.
func (s *State) stop(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped == nil {
		s.stopped = err
		s.pokeAllLocked()
	}
}

// healthChangedLocked tells watchers when the health message changed.
func (s *State) healthChangedLocked() {
	msg := s.health
	if s.late != "" {
		msg = strings.Join(slices.DeleteFunc([]string{s.health, s.late}, func(m string) bool { return m == "" }), "; also ")
	}
	if msg == s.reported {
		return
	}
	if msg == "" {
		s.log.Info("provider healthy again")
	} else {
		s.log.Warn("provider unhealthy; serving the last good endpoints", "error", msg)
	}
	s.reported = msg
	for w := range s.watchers {
		w.healthDirty = true
		w.poke()
	}
}

func (s *State) markLocked(at time.Time, changed ...Service) {
	if len(changed) == 0 {
		return
	}
	s.log.Debug("services changed", "services", len(changed), "total", len(s.services))
	for w := range s.watchers {
		for _, svc := range changed {
			w.dirty[svc] = struct{}{}
		}
		if w.since.IsZero() {
			w.since = at
		}
		w.poke()
	}
}

func (s *State) pokeAllLocked() {
	for w := range s.watchers {
		w.poke()
	}
}

// ListServices returns every service, sorted, or ErrUnavailable before the
// first complete read.
func (s *State) ListServices(context.Context) ([]Service, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.complete {
		return nil, s.unavailableLocked()
	}
	return slices.SortedFunc(maps.Keys(s.services), compareServices), nil
}

// ListEndpoints returns a copy of the endpoints of svc; an unknown service
// is ErrNotFound.
func (s *State) ListEndpoints(_ context.Context, svc Service) ([]Endpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.complete {
		return nil, s.unavailableLocked()
	}
	eps, ok := s.services[svc]
	if !ok {
		return nil, fmt.Errorf("service %s: the provider's backend does not have it (any more): %w", svc, ErrNotFound)
	}
	return cloneEndpoints(eps), nil
}

func (s *State) unavailableLocked() error {
	if s.reported != "" {
		return fmt.Errorf("%w: no complete read of the backend yet: %s", ErrUnavailable, s.reported)
	}
	return fmt.Errorf("%w: no complete read of the backend yet; retry shortly", ErrUnavailable)
}

// Watch sends every change to send until ctx is done (returning nil), send
// fails (returning its error) or the driver stops (returning why). A new
// watcher first hears the current health when it is unhealthy; it gets no
// initial state (the host lists after subscribing).
func (s *State) Watch(ctx context.Context, send func(Event) error) error {
	w := s.subscribe()
	defer s.unsubscribe(w)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.wake:
		}
		evs, since, stopped := s.drain(w)
		for _, ev := range evs {
			if err := send(ev); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
		if len(evs) > 0 && !since.IsZero() {
			s.log.Debug("watch events sent", "events", len(evs), "since_change", millis(time.Since(since)))
		}
		if stopped != nil {
			return stopped
		}
	}
}

func (s *State) subscribe() *watcher {
	w := &watcher{dirty: map[Service]struct{}{}, wake: make(chan struct{}, 1)}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watchers[w] = struct{}{}
	if s.reported != "" {
		w.healthDirty = true
	}
	if s.reported != "" || s.stopped != nil {
		w.poke()
	}
	return w
}

// Watchers returns how many Watch calls are subscribed now. A test that
// starts a Watch and then changes the backend waits for it first: a
// change made before the subscription is not sent (Watch sends no initial
// state).
func (s *State) Watchers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watchers)
}

func (s *State) unsubscribe(w *watcher) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.watchers, w)
}

// drain returns the events w is owed, when the oldest of them was made, and
// whether the driver stopped; it clears what w is owed.
func (s *State) drain(w *watcher) ([]Event, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var evs []Event
	if w.healthDirty {
		w.healthDirty = false
		evs = append(evs, HealthChanged(s.healthLocked()))
	}
	for _, svc := range slices.SortedFunc(maps.Keys(w.dirty), compareServices) {
		if eps, ok := s.services[svc]; ok {
			evs = append(evs, Updated(svc, cloneEndpoints(eps)))
		} else {
			evs = append(evs, Deleted(svc))
		}
	}
	clear(w.dirty)
	since := w.since
	w.since = time.Time{}
	return evs, since, s.stopped
}

func (s *State) healthLocked() error {
	if s.reported == "" {
		return nil
	}
	return errors.New(s.reported)
}

func (w *watcher) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func compareServices(a, b Service) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// sameEndpoints compares two lists of endpoints in order. A driver that
// reuses an unchanged list (the same slice) is answered without comparing.
func sameEndpoints(a, b []Endpoint) bool {
	if len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) {
		return true
	}
	return slices.EqualFunc(a, b, func(x, y Endpoint) bool {
		return x.IP == y.IP && x.Port == y.Port && maps.Equal(x.Labels, y.Labels)
	})
}

func cloneEndpoints(eps []Endpoint) []Endpoint {
	out := make([]Endpoint, len(eps))
	for i, e := range eps {
		out[i] = Endpoint{IP: e.IP, Port: e.Port, Labels: maps.Clone(e.Labels)}
	}
	return out
}

// millis formats a duration for a JSON log line that the host re-logs
// ("36.2ms"; slog's JSON handler would write nanoseconds).
func millis(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }
