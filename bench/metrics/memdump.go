package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/osm-vm/osm-vm/bench/peer"
)

// dumpMemory writes, while the fleet is connected (right after M7's RSS is
// read), where the server's memory is: /proc/<pid>/status and
// smaps_rollup for every server; for every server that serves pprof, its
// heap profile (/debug/pprof/heap, for go tool pprof) and the same with
// debug=1 (the runtime.MemStats block: HeapInuse, HeapIdle, HeapReleased,
// StackInuse, Sys, ...); and for O the goroutine counts
// (goroutine?debug=1) and /debug/proxies. Files are DIR/<server>-<what>.
func dumpMemory(ctx context.Context, dir, name string, srv *peer.Server) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var errs []error
	for _, f := range []string{"status", "smaps_rollup"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", srv.Proc.PID(), f))
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name+"-"+f+".txt"), b, 0o644)
		}
		errs = append(errs, err)
	}
	if srv.DebugAddr == "" {
		if srv.PprofAddr != "" {
			// L's and F's runtime.MemStats and heap profiles too, to set
			// O's heap and stacks against theirs.
			for _, p := range []struct{ query, file string }{{"", "heap.pb.gz"}, {"?debug=1", "heap.txt"}} {
				errs = append(errs, fetchTo(ctx, fmt.Sprintf("http://%s/debug/pprof/heap%s", srv.PprofAddr, p.query), srv.DebugToken, filepath.Join(dir, name+"-"+p.file)))
			}
		}
		return errors.Join(errs...)
	}
	// /debug/proxies (per proxy and type the versions sent and ACKed, and
	// when each ACK was read) comes last: it leaves a few MB of garbage.
	for _, p := range []struct{ path, file string }{
		{"pprof/heap", "heap.pb.gz"},
		{"pprof/heap?debug=1", "heap.txt"},
		{"pprof/goroutine?debug=1", "goroutine.txt"},
		{"proxies", "proxies.json"},
	} {
		errs = append(errs, fetchTo(ctx, fmt.Sprintf("http://%s/debug/%s", srv.DebugAddr, p.path), srv.DebugToken, filepath.Join(dir, name+"-"+p.file)))
	}
	return errors.Join(errs...)
}

// profileIdle starts, for O with --profile-dir, a CPU profile of M1's idle
// window (DIR/O-idle.cpu.pb.gz). The function it returns waits for the
// profile and writes the window's start (DIR/O-idle.start), to compare
// with the ACK times dumpMemory saves.
func (m *Measurer) profileIdle(ctx context.Context, srv *peer.Server, name string) (wait func() error) {
	if srv.DebugAddr == "" {
		return func() error { return nil } // O only
	}
	start := time.Now()
	profiled := m.profileCPU(ctx, srv, name+"-idle", int(m.plan.IdleWindow.Seconds()))
	return func() error {
		err := profiled()
		if m.plan.ProfileDir == "" || srv.DebugAddr == "" || err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(m.plan.ProfileDir, name+"-idle.start"), []byte(start.UTC().Format(time.RFC3339Nano)+"\n"), 0o644)
	}
}

// fillProfileSeconds is how much of the fleet fill --profile-dir profiles.
const fillProfileSeconds = 15

// profileFill, with --profile-dir, profiles each server's CPU and
// allocations over the first fillProfileSeconds of the fleet fill
// (DIR/<server>-fill.cpu.pb.gz and DIR/<server>-fill.allocs.pb.gz), so
// that O's shares can be set against L-mux's in the same run. The function
// it returns waits for the profiles.
func (m *Measurer) profileFill(ctx context.Context, srv *peer.Server, name string) (wait func() error) {
	return m.profileWindow(ctx, srv, name+"-fill", fillProfileSeconds)
}

// profileWindow, with --profile-dir, profiles a server that serves pprof
// (O on its debug listener, L and F on their control listener): its CPU
// over the next seconds into DIR/<file>.cpu.pb.gz, and its allocations
// from now until the returned function is called (the end of the fill or
// the storm) as two heap profiles, DIR/<file>.allocs-start.pb.gz and
// DIR/<file>.allocs.pb.gz, each taken right after a collection the
// harness asks for: the runtime publishes allocations only when a
// collection ends, so a delta profile over a window holds what the
// collections before it happened to publish (an enrollment's, or not the
// last seconds of a fill). Read them with go tool pprof
// -sample_index=alloc_space -diff_base FILE.allocs-start.pb.gz
// FILE.allocs.pb.gz. The collection at the start is made before the
// window's CPU is read; the one at the end after.
func (m *Measurer) profileWindow(ctx context.Context, srv *peer.Server, file string, seconds int) (wait func() error) {
	if m.plan.ProfileDir == "" || srv.PprofAddr == "" {
		return func() error { return nil }
	}
	heap := func(suffix string) error {
		return fetchHeapAfterGC(ctx, srv.PprofAddr, srv.DebugToken, filepath.Join(m.plan.ProfileDir, file+suffix))
	}
	if err := os.MkdirAll(m.plan.ProfileDir, 0o755); err != nil {
		return func() error { return err }
	}
	if err := heap(".allocs-start.pb.gz"); err != nil {
		return func() error { return fmt.Errorf("allocations at the start: %w", err) }
	}
	cpu := m.profileCPU(ctx, srv, file, seconds)
	return func() error { return errors.Join(cpu(), heap(".allocs.pb.gz")) }
}

// profileCPU, with --profile-dir, starts a CPU profile of the next seconds
// of a server that serves pprof (O always; L and F for the fill) into
// DIR/<file>.cpu.pb.gz; the function it returns waits for it.
func (m *Measurer) profileCPU(ctx context.Context, srv *peer.Server, file string, seconds int) (wait func() error) {
	dir := m.plan.ProfileDir
	if dir == "" || srv.PprofAddr == "" {
		return func() error { return nil }
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return func() error { return err }
	}
	done := make(chan error, 1)
	go func() {
		done <- fetchTo(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", srv.PprofAddr, seconds), srv.DebugToken, filepath.Join(dir, file+".cpu.pb.gz"))
	}()
	fleet := profileSelf(ctx, filepath.Join(dir, file+".fleet.cpu.pb.gz"), time.Duration(seconds)*time.Second)
	return func() error { return errors.Join(<-done, fleet()) }
}

// profileSelf writes a CPU profile of this process, the fleet, over the
// next d to path: what the server's answers cost its clients, beside the
// Server's own profile of the same window. The function it returns waits
// for it.
func profileSelf(ctx context.Context, path string, d time.Duration) (wait func() error) {
	f, err := os.Create(path)
	if err != nil {
		return func() error { return err }
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		os.Remove(path)
		return func() error { return fmt.Errorf("the fleet's CPU profile: %w", err) }
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		pprof.StopCPUProfile()
	}()
	return func() error {
		<-done
		return f.Close()
	}
}

// profileFleetHeap, with --profile-dir, writes the heap profile of this
// process, the fleet, right after a collection, to
// DIR/<file>.fleet.heap.pb.gz: what the fleet holds for the server's
// connections (go tool pprof -sample_index=inuse_space), beside another
// Server's.
func (m *Measurer) profileFleetHeap(file string) error {
	if m.plan.ProfileDir == "" {
		return nil
	}
	runtime.GC()
	f, err := os.Create(filepath.Join(m.plan.ProfileDir, file+".fleet.heap.pb.gz"))
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fetchHeapAfterGC writes the heap profile of the process serving pprof
// at addr, taken right after a collection it makes, to path.
func fetchHeapAfterGC(ctx context.Context, addr, token, path string) error {
	return fetchTo(ctx, fmt.Sprintf("http://%s/debug/pprof/heap?gc=1", addr), token, path)
}

// fetchTo writes the body of GET url, sent with the admin token, to path.
func fetchTo(ctx context.Context, url, token, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token) // the /debug/ routes need the admin token
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}
