package testrig

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// CallBatch makes b's calls on conn, at most b.Concurrency at once, and
// hands each call's Result to emit (from several goroutines at once). It
// returns when every call has ended; b must have passed Check.
func CallBatch(ctx context.Context, conn grpc.ClientConnInterface, b Batch, emit func(Result)) {
	sem := make(chan struct{}, max(1, b.Concurrency))
	var wg sync.WaitGroup
	for i := range b.N {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			emit(callOnce(ctx, conn, b, i))
		})
	}
	wg.Wait()
}

func callOnce(ctx context.Context, conn grpc.ClientConnInterface, b Batch, i int) Result {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(b.DeadlineMS)*time.Millisecond)
	defer cancel()
	if len(b.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(b.Headers))
	}
	var trailer metadata.MD
	out := new(wrapperspb.StringValue)
	start := time.Now()
	err := conn.Invoke(ctx, Method, wrapperspb.String(strconv.Itoa(i)), out, grpc.Trailer(&trailer))
	r := Result{Batch: b.ID, MS: float64(time.Since(start).Microseconds()) / 1000}
	if err == nil {
		r.OK, r.Code, r.From = true, "OK", out.GetValue()
		return r
	}
	st := status.Convert(err)
	r.Code, r.Error = CodeName(st.Code()), st.Message()
	if v := trailer.Get(FromKey); len(v) > 0 {
		r.From = v[0]
	}
	return r
}

// ServeBatches reads Batch lines from in and runs each as it arrives,
// concurrently with the others, on conn, writing a Result line per call
// and a Done line per batch to out; it returns once in has ended and every
// batch is done. A line that is not a valid Batch gets a Done line whose
// Error names the field.
func ServeBatches(ctx context.Context, conn grpc.ClientConnInterface, in io.Reader, out io.Writer) error {
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	emit := func(r Result) {
		mu.Lock()
		defer mu.Unlock()
		enc.Encode(r)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var b Batch
		if err := json.Unmarshal(sc.Bytes(), &b); err != nil {
			emit(Result{Done: true, Error: "batch: " + err.Error()})
			continue
		}
		if err := b.Check(); err != nil {
			emit(Result{Batch: b.ID, Done: true, Error: "batch: " + err.Error()})
			continue
		}
		wg.Go(func() {
			CallBatch(ctx, conn, b, emit)
			emit(Result{Batch: b.ID, Done: true})
		})
	}
	return sc.Err()
}

// Caller drives a caller process (in any of the three languages) from a
// test: Run writes a Batch on the process's stdin and returns the batch's
// Results once its Done line arrived. Batches may run at once. Feed the
// process's stdout to Read.
type Caller struct {
	name string
	in   io.Writer

	wmu    sync.Mutex // serializes writes to in
	mu     sync.Mutex
	next   int
	open   map[string]*pending
	exited chan struct{}
}

type pending struct {
	results []Result
	done    chan struct{}
	err     string
}

// NewCaller returns the driver of the caller process name whose stdin is in.
func NewCaller(name string, in io.Writer) *Caller {
	return &Caller{name: name, in: in, open: map[string]*pending{}, exited: make(chan struct{})}
}

// Name is the caller's name.
func (c *Caller) Name() string { return c.name }

// Read reads the process's stdout until it ends (the process exited):
// run it in a goroutine. Lines that are not Results are ignored.
func (c *Caller) Read(stdout io.Reader) {
	defer close(c.exited)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r Result
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			continue
		}
		c.mu.Lock()
		p := c.open[r.Batch]
		switch {
		case p == nil:
		case r.Done:
			p.err = r.Error
			delete(c.open, r.Batch)
			close(p.done)
		default:
			p.results = append(p.results, r)
		}
		c.mu.Unlock()
	}
	// Drain what the process writes after its last line we parse.
	io.Copy(io.Discard, stdout)
}

// Run makes the process run b (its ID is set here) and returns its
// Results in the order the calls ended.
func (c *Caller) Run(ctx context.Context, b Batch) ([]Result, error) {
	if err := b.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", c.name, err)
	}
	p := &pending{done: make(chan struct{})}
	c.mu.Lock()
	c.next++
	b.ID = strconv.Itoa(c.next)
	c.open[b.ID] = p
	c.mu.Unlock()
	line, _ := json.Marshal(b)
	c.wmu.Lock()
	_, err := c.in.Write(append(line, '\n'))
	c.wmu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("%s: write a batch: %w", c.name, err)
	}
	select {
	case <-p.done:
	case <-c.exited:
		return nil, fmt.Errorf("%s exited with batch %s open", c.name, b.ID)
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: batch %s (%d calls): %w", c.name, b.ID, b.N, ctx.Err())
	}
	if p.err != "" {
		return nil, fmt.Errorf("%s refused batch %s: %s", c.name, b.ID, p.err)
	}
	if len(p.results) != b.N {
		return p.results, fmt.Errorf("%s: batch %s reported %d calls of %d", c.name, b.ID, len(p.results), b.N)
	}
	return p.results, nil
}
