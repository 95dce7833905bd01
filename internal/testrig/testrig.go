// Package testrig is the resilience test rig: a gRPC (and HTTP/1.1)
// backend whose failures a test switches at run time, and callers in Go,
// Python (gRPC C-core) and Node (grpc-js) that make batches of calls
// through the mesh and report each call as one JSON line. The tests of
// timeouts, retries, circuit breaking, outlier detection and fault
// injection (e2e/polyglot_resilience_test.go) and the benchmark run them
// as ordinary processes beside real osm-agents, as a user's applications.
//
// The pieces:
//
//   - Backend (command testrig/backend): serves testrig.Backend/Call
//     (Method) over gRPC, xDS-enabled so that the mesh gives it mTLS and
//     RBAC like examples/bookstore's servers, or plain; optionally the
//     same behaviour over HTTP/1.1 for Envoy-facing tests; and a control
//     endpoint (Control) where a test sets the Behaviour (healthy, slow,
//     hanging, failing a fraction of calls, refusing connections) and
//     reads the State (calls in flight, calls and failures so far).
//     Every answer, a failure too, names the instance that gave it: the
//     response message, the FromKey trailer, the X-Testrig-From header.
//   - Callers: internal/testrig/caller (gRPC-Go), python/caller.py (C-core)
//     and node/caller.js (grpc-js with grpc-js-xds), configured only by
//     GRPC_XDS_BOOTSTRAP. Each reads Batch lines on stdin (or runs one
//     from its flags), runs the batches as they come, concurrently, and
//     writes a Result line per call and a Done line per batch. Caller
//     drives such a process from Go.
//
// It imports nothing of osm-vm: its programs are ordinary gRPC programs,
// and a test reaches them only through their processes.
package testrig

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/codes"
)

// The call every caller makes and the backend serves: a unary method that
// takes and returns google.protobuf.StringValue (the answer is the
// serving instance's name). Mesh policies match this path.
const (
	Service = "testrig.Backend"
	Method  = "/testrig.Backend/Call"
)

// FromKey is the trailer (gRPC) and, capitalized, the response header
// (HTTP/1.1) naming the instance that answered, failures included, so a
// test counts the calls each backend got.
const FromKey = "x-testrig-from"

// Duration is a time.Duration written as Go writes it ("500ms").
type Duration time.Duration

// MarshalText writes d as "1.5s".
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads a Go duration ("1.5s").
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Behaviour is what the backend does with the calls it gets from now on.
// The zero value is healthy: every call answered at once with the
// instance's name. Set it with Control.Set.
type Behaviour struct {
	// Delay answers each call this long after it arrived (slow). A call
	// whose caller gives up first ends then.
	Delay Duration `json:"delay,omitempty"`
	// Hang holds each call until its caller gives up, or until the next
	// Set, which then answers it as the new behaviour says (a test holds
	// N calls, then releases them).
	Hang bool `json:"hang,omitempty"`
	// Fail fails this fraction of calls, 0 to 1, each independently at
	// random (1: every call), with Code (gRPC) or HTTPStatus (HTTP/1.1).
	Fail float64 `json:"fail,omitempty"`
	// Code is the gRPC status of a failed call: a code name as gRPC
	// writes it ("UNAVAILABLE", the default; not "OK").
	Code string `json:"code,omitempty"`
	// HTTPStatus is the HTTP/1.1 status of a failed call, 400-599
	// (default 503).
	HTTPStatus int `json:"httpStatus,omitempty"`
	// Refuse closes the listeners (gRPC and HTTP) and every connection
	// they accepted, so connections are refused (RST) until a Set without
	// Refuse listens again on the same addresses.
	Refuse bool `json:"refuse,omitempty"`
}

// maxDelay bounds Behaviour.Delay: a test's slow backend, not a hung one.
const maxDelay = 10 * time.Minute

// Check returns an error naming the first field out of range.
func (b Behaviour) Check() error {
	switch {
	case b.Delay < 0 || time.Duration(b.Delay) > maxDelay:
		return fmt.Errorf("delay %v: want 0 to %v", time.Duration(b.Delay), maxDelay)
	case b.Hang && b.Delay != 0:
		return errors.New("hang and delay: a hanging call has no delay; set one of them")
	case math.IsNaN(b.Fail) || b.Fail < 0 || b.Fail > 1:
		return fmt.Errorf("fail %v: want a fraction of calls from 0 to 1", b.Fail)
	case b.HTTPStatus != 0 && (b.HTTPStatus < 400 || b.HTTPStatus > 599):
		return fmt.Errorf("httpStatus %d: want 400 to 599 (or 0 for 503)", b.HTTPStatus)
	}
	if _, err := b.code(); err != nil {
		return err
	}
	return nil
}

// code is the gRPC code of a failure.
func (b Behaviour) code() (codes.Code, error) {
	if b.Code == "" {
		return codes.Unavailable, nil
	}
	for c, name := range codeNames {
		if name == b.Code && c != int(codes.OK) {
			return codes.Code(c), nil
		}
	}
	return 0, fmt.Errorf("code %q: want a gRPC status code name other than OK, such as UNAVAILABLE or INTERNAL", b.Code)
}

// codeNames are the gRPC status codes' names as every gRPC writes them
// (Go's codes.Code.String says "Unavailable").
var codeNames = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
	"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

// CodeName is c's name as every gRPC writes it ("UNAVAILABLE").
func CodeName(c codes.Code) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("CODE_%d", c)
}

func (b Behaviour) httpStatus() int {
	if b.HTTPStatus == 0 {
		return 503
	}
	return b.HTTPStatus
}

// State is what the backend reports on its control endpoint.
type State struct {
	// Name is the instance's name, as its answers give it.
	Name      string    `json:"name"`
	Behaviour Behaviour `json:"behaviour"`
	// Serving: the gRPC server serves (an xDS-enabled one once its
	// listener arrived from the mesh) and the listeners are open.
	Serving bool `json:"serving"`
	// InFlight counts the calls being handled now, gRPC and HTTP.
	InFlight int64 `json:"inFlight"`
	// Calls counts the calls that reached the backend since it started,
	// and Failed those of them it failed on purpose (Fail).
	Calls  int64 `json:"calls"`
	Failed int64 `json:"failed"`
}

// Batch is one line a caller reads on stdin: make N calls, at most
// Concurrency at once, each with a deadline of DeadlineMS.
type Batch struct {
	// ID names the batch in its Result lines; Caller.Run sets it.
	ID          string `json:"id,omitempty"`
	N           int    `json:"n"`
	Concurrency int    `json:"concurrency,omitempty"`
	DeadlineMS  int    `json:"deadlineMs"`
	// Headers are sent with every call as metadata (keys lower case).
	Headers map[string]string `json:"headers,omitempty"`
}

// Limits of a Batch: the callers check the same in Python and Node.
const (
	maxCalls       = 1_000_000
	maxConcurrency = 1000
	maxDeadlineMS  = 600_000
)

// Check returns an error naming the first field out of range.
func (b Batch) Check() error {
	switch {
	case b.N < 1 || b.N > maxCalls:
		return fmt.Errorf("n %d: want 1 to %d calls", b.N, maxCalls)
	case b.Concurrency < 0 || b.Concurrency > maxConcurrency:
		return fmt.Errorf("concurrency %d: want 1 to %d (0 for 1)", b.Concurrency, maxConcurrency)
	case b.DeadlineMS < 1 || b.DeadlineMS > maxDeadlineMS:
		return fmt.Errorf("deadlineMs %d: want 1 to %d", b.DeadlineMS, maxDeadlineMS)
	}
	return nil
}

// Result is one line a caller writes on stdout: one call, or with Done the
// end of a batch (every call of it reported).
type Result struct {
	Batch string `json:"batch,omitempty"`
	Done  bool   `json:"done,omitempty"`
	// OK: the call succeeded. Code is its gRPC status code name as gRPC
	// writes it ("OK", "DEADLINE_EXCEEDED").
	OK   bool   `json:"ok"`
	Code string `json:"code,omitempty"`
	// From is the instance that answered (its answer or its FromKey
	// trailer); empty when no backend answered (a deadline, no route).
	From  string `json:"from,omitempty"`
	Error string `json:"error,omitempty"`
	// MS is the call's duration as the caller measured it.
	MS float64 `json:"ms"`
}

// Duration is r's MS as a time.Duration.
func (r Result) Duration() time.Duration { return time.Duration(r.MS * float64(time.Millisecond)) }

func (r Result) String() string {
	b, _ := json.Marshal(r)
	return string(b)
}
