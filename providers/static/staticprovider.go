package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/osm-vm/osm-vm/provider"
)

// staticProvider serves the services listed in one YAML file and follows
// edits to it. A malformed edit is reported through health and the last
// good content stays in force.
//
// Lifetime: Configure starts the file watcher, which runs until close (the
// plugin process serves one instance and ends with the host; tests call
// close).
type staticProvider struct {
	log *slog.Logger
	// debounce is how long edits settle before the file is re-read; poll is
	// the safety-net re-read interval for filesystems without inotify.
	debounce, poll time.Duration
	// maxDelay bounds how long a stream of events (a busy directory) can
	// postpone the re-read.
	maxDelay time.Duration

	// entries makes each re-read parse only the entries that changed; the
	// reload loop owns it once Configure has set it.
	entries *entryCache

	mu      sync.Mutex
	file    string
	state   map[provider.Service][]provider.Endpoint // last good content
	sum     [32]byte                                 // hash of the last content read, good or bad
	health  error                                    // nil when the file is good
	subs    map[*subscriber]struct{}
	stop    context.CancelFunc
	stopped sync.WaitGroup
}

var _ provider.Provider = (*staticProvider)(nil)

func newStaticProvider(log *slog.Logger) *staticProvider {
	return &staticProvider{log: log, debounce: 20 * time.Millisecond, maxDelay: 200 * time.Millisecond, poll: 10 * time.Second, subs: map[*subscriber]struct{}{}}
}

type staticConfig struct {
	File string `json:"file"`
}

func (p *staticProvider) Describe(context.Context) (provider.Info, error) {
	version := "dev"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		version = bi.Main.Version
	}
	return provider.Info{Name: "static", Version: version, Description: "endpoints listed in a watched YAML file"}, nil
}

func (p *staticProvider) Configure(_ context.Context, instance string, raw []byte) error {
	var cfg staticConfig
	if err := provider.DecodeConfig(raw, &cfg); err != nil {
		return err
	}
	if cfg.File == "" {
		return fmt.Errorf("%w: `file` is missing: set config: {file: /etc/osm/endpoints.yaml} for provider %q", provider.ErrInvalidConfig, instance)
	}
	file, err := filepath.Abs(cfg.File)
	if err != nil {
		return fmt.Errorf("%w: file %q: %w", provider.ErrInvalidConfig, cfg.File, err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("%w: %w (create the file or fix `file` in the provider config)", provider.ErrInvalidConfig, err)
	}
	entries := &entryCache{}
	state, err := entries.parse(file, data)
	if err != nil {
		return fmt.Errorf("%w: %w", provider.ErrInvalidConfig, err)
	}
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", file, err)
	}
	// Watch the directory: editors and config tools replace files by
	// rename, and Kubernetes swaps a symlinked directory.
	if err := watcher.Add(filepath.Dir(file)); err != nil {
		watcher.Close()
		return fmt.Errorf("watch directory of %s: %w", file, err)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stop != nil {
		watcher.Close()
		return fmt.Errorf("static provider %q is already configured; restart the plugin to change its config", instance)
	}
	p.file, p.state, p.sum, p.entries = file, state, sha256.Sum256(data), entries
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	p.stopped.Go(func() { p.follow(ctx, watcher, file) })
	p.log.Info("static provider configured", "instance", instance, "file", file, "services", len(state))
	return nil
}

// close stops the file watcher and waits for it.
func (p *staticProvider) close() {
	p.mu.Lock()
	stop := p.stop
	p.mu.Unlock()
	if stop != nil {
		stop()
	}
	p.stopped.Wait()
}

func (p *staticProvider) ListServices(context.Context) ([]provider.Service, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == nil {
		return nil, provider.ErrNotConfigured
	}
	svcs := slices.Collect(maps.Keys(p.state))
	slices.SortFunc(svcs, func(a, b provider.Service) int { return strings.Compare(a.String(), b.String()) })
	return svcs, nil
}

func (p *staticProvider) ListEndpoints(_ context.Context, svc provider.Service) ([]provider.Endpoint, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == nil {
		return nil, provider.ErrNotConfigured
	}
	eps, ok := p.state[svc]
	if !ok {
		return nil, fmt.Errorf("service %s is not in %s: %w", svc, p.file, provider.ErrNotFound)
	}
	return slices.Clone(eps), nil
}

// subscriber is one Watch call. Changes mark services dirty and signal;
// the Watch loop reads the current state, so a slow reader coalesces
// changes instead of blocking the file watcher.
type subscriber struct {
	notify chan struct{}
	dirty  map[provider.Service]struct{}
	health bool // health changed since last sent
	// since is when the oldest unsent change was first seen (the first
	// filesystem event before its re-read); zero when nothing is owed.
	since time.Time
}

func (p *staticProvider) Watch(ctx context.Context, send func(provider.Event) error) error {
	sub := &subscriber{notify: make(chan struct{}, 1), dirty: map[provider.Service]struct{}{}}
	p.mu.Lock()
	p.subs[sub] = struct{}{}
	if p.health != nil {
		sub.health = true
		sub.notify <- struct{}{}
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.subs, sub)
		p.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sub.notify:
		}
		events, since := p.pending(sub)
		for _, ev := range events {
			if err := send(ev); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
		if !since.IsZero() {
			p.log.Debug("watch events sent", "events", len(events), "since_file_event", ms(time.Since(since)))
		}
	}
}

// pending returns the events owed to sub and when the oldest of them was
// first seen, and clears its dirty state.
func (p *staticProvider) pending(sub *subscriber) ([]provider.Event, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	since := sub.since
	sub.since = time.Time{}
	var out []provider.Event
	if sub.health {
		out = append(out, provider.HealthChanged(p.health))
		sub.health = false
	}
	for svc := range sub.dirty {
		if eps, ok := p.state[svc]; ok {
			out = append(out, provider.Updated(svc, slices.Clone(eps)))
		} else {
			out = append(out, provider.Deleted(svc))
		}
	}
	clear(sub.dirty)
	return out, since
}

// follow re-reads the file after filesystem events settle, and on a slow
// timer, until ctx is done. A file renamed over the watched one (how
// atomic writers replace it) is complete when it appears, so it is read at
// once instead of after the debounce.
func (p *staticProvider) follow(ctx context.Context, watcher *fsnotify.Watcher, file string) {
	defer watcher.Close()
	poll := time.NewTicker(p.poll)
	defer poll.Stop()
	var (
		settle  <-chan time.Time
		first   time.Time // the first event since the last re-read
		renamed bool      // the last event moved a file away: a rename's first half
	)
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-watcher.Events:
			if !ok {
				return
			}
			// Any change in the directory may be ours (renames, symlink
			// swaps); reading an unchanged file is a no-op.
			now := time.Now()
			if settle == nil {
				first = now
			}
			// inotify reports a rename within the directory as the old
			// name's Rename then the new name's Create, next to each other.
			if renamed && ev.Has(fsnotify.Create) && ev.Name == file {
				settle, renamed = nil, false
				p.reload(first)
				continue
			}
			// Only a rename onto the file is a complete replacement: the
			// file moved away and a new one created in its place may
			// still be empty.
			renamed = ev.Has(fsnotify.Rename) && ev.Name != file
			settle = time.After(min(p.debounce, max(0, first.Add(p.maxDelay).Sub(now))))
		case err, ok := <-watcher.Errors:
			if !ok {
				return
			}
			p.log.Warn("file watcher error; relying on the periodic re-read", "error", err)
		case <-settle:
			settle = nil
			p.reload(first)
		case <-poll.C:
			p.reload(time.Now())
		}
	}
}

// reload reads the file and, when it is good and different, publishes the
// changes; when it is bad, reports it and keeps the last good content.
// seen is when the change was first noticed (the first filesystem event).
func (p *staticProvider) reload(seen time.Time) {
	p.mu.Lock()
	file := p.file
	p.mu.Unlock()
	start := time.Now()
	data, err := os.ReadFile(file)
	var (
		state  map[provider.Service][]provider.Endpoint
		parsed time.Time
		sum    [32]byte
	)
	if err == nil {
		sum = sha256.Sum256(data)
		p.mu.Lock()
		same := sum == p.sum && p.health == nil
		p.mu.Unlock()
		if same {
			return // a poll of an unchanged file: nothing to parse
		}
		state, err = p.entries.parse(file, data)
		parsed = time.Now()
	} else {
		err = fmt.Errorf("%w; the last good content stays in force until the file is back", err)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if p.health == nil || p.health.Error() != err.Error() {
			p.log.Error("endpoints file rejected; keeping the last good content", "file", file, "error", err)
			p.health = err
			p.sum = [32]byte{}
			p.markHealth()
		}
		return
	}
	p.sum = sum // only reload (the follow goroutine) writes sum and health
	if p.health != nil {
		p.log.Info("endpoints file good again", "file", file)
		p.health = nil
		p.markHealth()
	}
	var changed []provider.Service
	for svc, eps := range state {
		if old, ok := p.state[svc]; !ok || !sameEndpoints(old, eps) {
			changed = append(changed, svc)
		}
	}
	for svc := range p.state {
		if _, ok := state[svc]; !ok {
			changed = append(changed, svc)
		}
	}
	p.state = state
	if len(changed) == 0 {
		return
	}
	// Where an edit's time goes before it leaves the plugin: waiting for
	// the directory to settle, then reading and parsing the file.
	p.log.Info("endpoints file changed", "file", file, "services_changed", len(changed), "entries_parsed", p.entries.parsed, "parsed_whole", p.entries.whole,
		"settle", ms(start.Sub(seen)), "read_parse", ms(parsed.Sub(start)), "diff", ms(time.Since(parsed)))
	for sub := range p.subs {
		for _, svc := range changed {
			sub.dirty[svc] = struct{}{}
		}
		if sub.since.IsZero() {
			sub.since = seen
		}
		signal(sub)
	}
}

// markHealth tells every subscriber the health changed. p.mu is held.
func (p *staticProvider) markHealth() {
	for sub := range p.subs {
		sub.health = true
		signal(sub)
	}
}

// ms formats a duration for the JSON log the host re-logs ("36.2ms";
// slog's JSON handler would write nanoseconds).
func ms(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }

func signal(sub *subscriber) {
	select {
	case sub.notify <- struct{}{}:
	default:
	}
}

// sameEndpoints compares two parses of a service's endpoints; an entry
// that did not change shares its parse (the same slice) with the last one.
func sameEndpoints(a, b []provider.Endpoint) bool {
	if len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) {
		return true
	}
	return slices.EqualFunc(a, b, endpointEqual)
}

func endpointEqual(a, b provider.Endpoint) bool {
	return a.IP == b.IP && a.Port == b.Port && maps.Equal(a.Labels, b.Labels)
}
