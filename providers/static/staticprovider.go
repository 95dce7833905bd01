package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/osm-vm/osm-vm/provider"
)

// staticDriver serves the services listed in one YAML file and follows
// edits to it. A malformed edit is reported through health and the last
// good content stays in force. The SDK's Plugin does the rest of the
// plugin contract.
type staticDriver struct {
	log *slog.Logger
	// debounce is how long edits settle before the file is re-read; poll is
	// the safety-net re-read interval for filesystems without inotify.
	debounce, poll time.Duration
	// maxDelay bounds how long a stream of events (a busy directory) can
	// postpone the re-read.
	maxDelay time.Duration

	// Set by Configure; then owned by Run.
	file    string
	initial map[provider.Service][]provider.Endpoint // the content read by Configure
	watcher *fsnotify.Watcher
	// entries makes each re-read parse only the entries that changed.
	entries *entryCache
	sum     [32]byte // hash of the last good content read
	bad     error    // why the file is rejected; nil when it is good
}

var _ provider.Driver = (*staticDriver)(nil)

func newStaticDriver(log *slog.Logger) *staticDriver {
	return &staticDriver{log: log, debounce: 20 * time.Millisecond, maxDelay: 200 * time.Millisecond, poll: 10 * time.Second}
}

type staticConfig struct {
	File string `json:"file"`
}

func (d *staticDriver) Describe() provider.Info {
	version := "dev"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		version = bi.Main.Version
	}
	return provider.Info{Name: "static", Version: version, Description: "endpoints listed in a watched YAML file"}
}

// Configure reads and parses the file, so a missing or malformed file is
// refused at start, and starts watching its directory.
func (d *staticDriver) Configure(_ context.Context, instance string, raw []byte) error {
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
	d.log = d.log.With("instance", instance)
	d.file, d.initial, d.watcher, d.entries, d.sum = file, state, watcher, entries, sha256.Sum256(data)
	d.log.Info("static provider configured", "file", file, "services", len(state))
	return nil
}

// Run publishes the content read by Configure, then re-reads the file
// after filesystem events settle, and on a slow timer, until ctx is done.
// A file renamed over the watched one (how atomic writers replace it) is
// complete when it appears, so it is read at once instead of after the
// debounce.
func (d *staticDriver) Run(ctx context.Context, s *provider.State) error {
	defer d.watcher.Close()
	s.ReplaceAll(d.initial)
	d.initial = nil
	poll := time.NewTicker(d.poll)
	defer poll.Stop()
	var (
		settle  <-chan time.Time
		first   time.Time // the first event since the last re-read
		renamed bool      // the last event moved a file away: a rename's first half
	)
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-d.watcher.Events:
			if !ok {
				return errors.New("the file watcher stopped")
			}
			// Any change in the directory may be ours (renames, symlink
			// swaps); reading an unchanged file is a no-op.
			now := time.Now()
			if settle == nil {
				first = now
			}
			// inotify reports a rename within the directory as the old
			// name's Rename then the new name's Create, next to each other.
			if renamed && ev.Has(fsnotify.Create) && ev.Name == d.file {
				settle, renamed = nil, false
				d.reload(s, first)
				continue
			}
			// Only a rename onto the file is a complete replacement: the
			// file moved away and a new one created in its place may
			// still be empty.
			renamed = ev.Has(fsnotify.Rename) && ev.Name != d.file
			settle = time.After(min(d.debounce, max(0, first.Add(d.maxDelay).Sub(now))))
		case err, ok := <-d.watcher.Errors:
			if !ok {
				return errors.New("the file watcher stopped")
			}
			d.log.Warn("file watcher error; relying on the periodic re-read", "error", err)
		case <-settle:
			settle = nil
			d.reload(s, first)
		case <-poll.C:
			d.reload(s, time.Now())
		}
	}
}

// reload reads the file and, when it is good and different, publishes it;
// when it is bad, reports it and keeps the last good content. seen is when
// the change was first noticed (the first filesystem event).
func (d *staticDriver) reload(s *provider.State, seen time.Time) {
	start := time.Now()
	data, err := os.ReadFile(d.file)
	var (
		state  map[provider.Service][]provider.Endpoint
		parsed time.Time
		sum    [32]byte
	)
	if err == nil {
		sum = sha256.Sum256(data)
		if sum == d.sum && d.bad == nil {
			return // a poll of an unchanged file: nothing to parse
		}
		state, err = d.entries.parse(d.file, data)
		parsed = time.Now()
	} else {
		err = fmt.Errorf("%w; the last good content stays in force until the file is back", err)
	}
	if err != nil {
		if d.bad == nil || d.bad.Error() != err.Error() {
			d.log.Error("endpoints file rejected; keeping the last good content", "file", d.file, "error", err)
		}
		d.bad = err
		s.SetUnhealthy(err)
		return
	}
	d.sum = sum
	if d.bad != nil {
		d.log.Info("endpoints file good again", "file", d.file)
		d.bad = nil
		s.SetHealthy()
	}
	changed := s.ReplaceAll(state)
	if changed == 0 {
		return
	}
	// Where an edit's time goes before it leaves the plugin: waiting for
	// the directory to settle, then reading and parsing the file.
	d.log.Info("endpoints file changed", "file", d.file, "services_changed", changed, "entries_parsed", d.entries.parsed, "parsed_whole", d.entries.whole,
		"settle", ms(start.Sub(seen)), "read_parse", ms(parsed.Sub(start)), "diff", ms(time.Since(parsed)))
}

// ms formats a duration for the JSON log the host re-logs ("36.2ms";
// slog's JSON handler would write nanoseconds).
func ms(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }
