package testrig

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/osm-vm/osm-vm/internal/testaddr"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// rig is a plain (not xDS) backend in this process and a gRPC-Go client of it.
type rig struct {
	ctl        Control
	grpc, http string
	conn       *grpc.ClientConn
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{grpc: testaddr.Free(t), http: testaddr.Free(t), ctl: Control{Addr: testaddr.Free(t)}}
	b, err := NewBackend(BackendOptions{Name: "b1", GRPC: r.grpc, HTTP: r.http, Control: r.ctl.Addr, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testwait.For(t, "the control endpoint answers", func() bool { _, err := r.ctl.State(t.Context()); return err == nil })
	r.conn, err = grpc.NewClient("passthrough:///"+r.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.conn.Close() })
	return r
}

func (r *rig) set(t *testing.T, b Behaviour) {
	t.Helper()
	if _, err := r.ctl.Set(t.Context(), b); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) state(t *testing.T) State {
	t.Helper()
	s, err := r.ctl.State(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (r *rig) calls(t *testing.T, b Batch) []Result {
	t.Helper()
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var out []Result
	CallBatch(t.Context(), r.conn, b, func(res Result) { mu.Lock(); out = append(out, res); mu.Unlock() })
	return out
}

func count(rs []Result) map[string]int {
	n := map[string]int{}
	for _, r := range rs {
		n[r.Code+" from "+r.From]++
	}
	return n
}

func TestBackendBehaviours(t *testing.T) {
	r := newRig(t)

	t.Run("healthy", func(t *testing.T) {
		before := r.state(t).Calls
		rs := r.calls(t, Batch{N: 20, Concurrency: 4, DeadlineMS: 60_000})
		if n := count(rs); n["OK from b1"] != 20 {
			t.Errorf("healthy backend: %v, want 20 OK from b1", n)
		}
		if got := r.state(t).Calls - before; got != 20 {
			t.Errorf("the backend counted %d calls, want 20", got)
		}
	})

	t.Run("slow", func(t *testing.T) {
		r.set(t, Behaviour{Delay: Duration(200 * time.Millisecond)})
		for _, res := range r.calls(t, Batch{N: 4, Concurrency: 4, DeadlineMS: 60_000}) {
			if !res.OK || res.Duration() < 200*time.Millisecond {
				t.Errorf("slow backend (200ms): %v, want OK after 200ms or more", res)
			}
		}
		// A caller whose deadline is shorter gives up.
		for _, res := range r.calls(t, Batch{N: 2, DeadlineMS: 50}) {
			if res.Code != "DEADLINE_EXCEEDED" {
				t.Errorf("slow backend, 50ms deadline: %v, want DEADLINE_EXCEEDED", res)
			}
		}
	})

	t.Run("hang until the caller gives up", func(t *testing.T) {
		r.set(t, Behaviour{Hang: true})
		before := r.state(t).Calls
		rs := r.calls(t, Batch{N: 3, Concurrency: 3, DeadlineMS: 1000})
		if got := r.state(t).Calls - before; got != 3 {
			t.Errorf("the backend counted %d calls, want 3", got)
		}
		for _, res := range rs {
			if res.Code != "DEADLINE_EXCEEDED" || res.Duration() < time.Second {
				t.Errorf("hanging backend, 1s deadline: %v, want DEADLINE_EXCEEDED after 1s or more", res)
			}
		}
		testwait.For(t, "no call in flight once the callers gave up", func() bool { return r.state(t).InFlight == 0 })
	})

	t.Run("hanging calls released by the next behaviour", func(t *testing.T) {
		r.set(t, Behaviour{Hang: true})
		var rs []Result
		done := make(chan struct{})
		go func() { defer close(done); rs = r.calls(t, Batch{N: 3, Concurrency: 3, DeadlineMS: 600_000}) }()
		testwait.For(t, "3 calls in flight", func() bool { return r.state(t).InFlight == 3 })
		r.set(t, Behaviour{Fail: 1, Code: "INTERNAL"})
		<-done
		if n := count(rs); n["INTERNAL from b1"] != 3 {
			t.Errorf("hanging calls released into failing: %v, want 3 INTERNAL from b1", n)
		}
	})

	t.Run("failing every call", func(t *testing.T) {
		r.set(t, Behaviour{Fail: 1})
		rs := r.calls(t, Batch{N: 10, Concurrency: 2, DeadlineMS: 60_000})
		if n := count(rs); n["UNAVAILABLE from b1"] != 10 {
			t.Errorf("failing backend: %v, want 10 UNAVAILABLE from b1 (the trailer names it)", n)
		}
		if s := r.state(t); s.Failed < 10 {
			t.Errorf("state %+v: want 10 failed or more", s)
		}
		if !strings.Contains(rs[0].Error, "testrig backend b1 fails 1 of its calls") {
			t.Errorf("error %q: want it to name the backend", rs[0].Error)
		}
	})

	t.Run("failing a fraction", func(t *testing.T) {
		r.set(t, Behaviour{Fail: 0.3})
		n := count(r.calls(t, Batch{N: 2000, Concurrency: 8, DeadlineMS: 60_000}))
		// 30% of 2,000 is 600, with a standard deviation of 20.5: 5 of
		// them either side.
		if f := n["UNAVAILABLE from b1"]; f < 500 || f > 700 || f+n["OK from b1"] != 2000 {
			t.Errorf("backend failing 30%%: %v over 2,000 calls, want 500 to 700 UNAVAILABLE, the rest OK", n)
		}
	})

	t.Run("HTTP", func(t *testing.T) {
		get := func() (int, string, string) {
			t.Helper()
			resp, err := http.Get("http://" + r.http + "/any/path")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, resp.Header.Get(FromKey), strings.TrimSpace(string(b))
		}
		r.set(t, Behaviour{})
		if code, from, body := get(); code != 200 || from != "b1" || body != "b1" {
			t.Errorf("healthy: %d %q %q, want 200 from b1", code, from, body)
		}
		r.set(t, Behaviour{Fail: 1})
		if code, from, _ := get(); code != 503 || from != "b1" {
			t.Errorf("failing: %d from %q, want 503 from b1", code, from)
		}
		r.set(t, Behaviour{Fail: 1, HTTPStatus: 500})
		if code, _, _ := get(); code != 500 {
			t.Errorf("failing with 500: %d", code)
		}
	})

	t.Run("refusing connections", func(t *testing.T) {
		r.set(t, Behaviour{})
		if rs := r.calls(t, Batch{N: 1, DeadlineMS: 60_000}); !rs[0].OK {
			t.Fatalf("healthy: %v", rs[0])
		}
		r.set(t, Behaviour{Refuse: true})
		for _, addr := range []string{r.grpc, r.http} {
			if c, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
				if c != nil {
					c.Close()
				}
				t.Errorf("dial %s while refusing: %v, want connection refused", addr, err)
			}
		}
		// The open connection was closed: calls fail fast, and do not
		// reach the backend.
		before := r.state(t).Calls
		testwait.For(t, "a call fails with UNAVAILABLE while refusing", func() bool {
			rs := r.calls(t, Batch{N: 1, DeadlineMS: 60_000})
			return rs[0].Code == "UNAVAILABLE" && rs[0].From == "" && rs[0].Duration() < 30*time.Second
		})
		if s := r.state(t); s.Calls != before || s.Serving {
			t.Errorf("state while refusing: %+v, want no new calls (%d) and not serving", s, before)
		}
		r.set(t, Behaviour{})
		testwait.For(t, "calls answered again", func() bool {
			rs := r.calls(t, Batch{N: 1, DeadlineMS: 60_000})
			return rs[0].OK && rs[0].From == "b1"
		})
	})
}

func TestBadBehaviourNamesTheField(t *testing.T) {
	r := newRig(t)
	for _, tc := range []struct {
		b    Behaviour
		want string
	}{
		{Behaviour{Fail: 1.5}, "fail 1.5: want a fraction of calls from 0 to 1"},
		{Behaviour{Fail: -0.1}, "fail -0.1"},
		{Behaviour{Delay: Duration(-time.Second)}, "delay -1s: want 0 to 10m0s"},
		{Behaviour{Delay: Duration(time.Hour)}, "delay 1h0m0s"},
		{Behaviour{Hang: true, Delay: Duration(time.Second)}, "hang and delay"},
		{Behaviour{Fail: 1, Code: "OK"}, `code "OK": want a gRPC status code name other than OK`},
		{Behaviour{Fail: 1, Code: "Unavailable"}, `code "Unavailable"`},
		{Behaviour{HTTPStatus: 200}, "httpStatus 200: want 400 to 599"},
	} {
		_, err := r.ctl.Set(t.Context(), tc.b)
		if err == nil || !strings.Contains(err.Error(), "400 Bad Request: behaviour: "+tc.want) {
			t.Errorf("Set(%+v): %v, want 400 naming %q", tc.b, err, tc.want)
		}
	}
	if s := r.state(t); s.Behaviour != (Behaviour{}) {
		t.Errorf("after refused behaviours: %+v, want the last good one (healthy)", s.Behaviour)
	}
	for _, tc := range []struct {
		b    Batch
		want string
	}{
		{Batch{N: 0, DeadlineMS: 1}, "n 0: want 1 to 1000000 calls"},
		{Batch{N: 1, Concurrency: 1001, DeadlineMS: 1}, "concurrency 1001: want 1 to 1000 (0 for 1)"},
		{Batch{N: 1}, "deadlineMs 0: want 1 to 600000"},
	} {
		if err := tc.b.Check(); err == nil || err.Error() != tc.want {
			t.Errorf("Check(%+v): %v, want %q", tc.b, err, tc.want)
		}
	}
}

// TestCallerDrivesBatches runs ServeBatches (the Go caller's loop) behind
// pipes, as a caller process runs it, and drives it with a Caller: two
// batches at once, and a bad batch refused naming its field.
func TestCallerDrivesBatches(t *testing.T) {
	r := newRig(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := NewCaller("go", inW)
	go c.Read(outR)
	served := make(chan error, 1)
	go func() { served <- ServeBatches(t.Context(), r.conn, inR, outW); outW.Close() }()

	r.set(t, Behaviour{Hang: true})
	var held []Result
	var heldErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		held, heldErr = c.Run(t.Context(), Batch{N: 2, Concurrency: 2, DeadlineMS: 600_000})
	}()
	testwait.For(t, "2 calls held", func() bool { return r.state(t).InFlight == 2 })
	// A second batch runs while the first is held: it times out.
	quick, err := c.Run(t.Context(), Batch{N: 1, DeadlineMS: 100, Headers: map[string]string{"x-k": "v"}})
	if err != nil || quick[0].Code != "DEADLINE_EXCEEDED" {
		t.Errorf("a batch beside a held one: %v %v, want DEADLINE_EXCEEDED", quick, err)
	}
	r.set(t, Behaviour{})
	<-done
	if n := count(held); heldErr != nil || n["OK from b1"] != 2 {
		t.Errorf("held batch released: %v %v, want 2 OK from b1", n, heldErr)
	}

	inW.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(t.Context(), Batch{N: 1, DeadlineMS: 1}); err == nil {
		t.Error("Run after the process ended: no error")
	}

	// Bad lines get a Done line naming what is wrong.
	var out strings.Builder
	if err := ServeBatches(t.Context(), r.conn, strings.NewReader("{\"id\":\"bad\",\"n\":1,\"deadlineMs\":0}\nnot json\n"), &out); err != nil {
		t.Fatal(err)
	}
	want := `{"batch":"bad","done":true,"ok":false,"error":"batch: deadlineMs 0: want 1 to 600000","ms":0}` + "\n" +
		`{"done":true,"ok":false,"error":"batch: invalid character 'o' in literal null (expecting 'u')","ms":0}` + "\n"
	if out.String() != want {
		t.Errorf("bad batches: got\n%s\nwant\n%s", out.String(), want)
	}
}
