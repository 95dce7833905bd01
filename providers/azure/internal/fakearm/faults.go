package fakearm

// What a test injects and observes: ARM error responses, HTTP 429
// throttling with Retry-After, and a count of requests per operation.

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
)

type fault struct {
	status int
	code   string
}

// Fail makes the next times calls of op (an Op constant, or "" for any
// operation) fail with an ARM error response of status and code.
func (m *Model) Fail(op string, times, status int, code string) {
	if op == "" {
		op = opAny
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for range times {
		m.faults[op] = append(m.faults[op], fault{status, code})
	}
}

// Throttle makes the next times requests of op (or "" for any) answer
// with a real HTTP 429 carrying Retry-After: retryAfter, before they reach
// the SDK fake. The SDK's fakes cannot do this themselves: every error
// they return is marked non-retriable and carries no headers, so azcore's
// retry policy (which honours Retry-After) would never see it.
func (m *Model) Throttle(op string, times int, retryAfter time.Duration) {
	if op == "" {
		op = opAny
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for range times {
		m.throttle[op] = append(m.throttle[op], retryAfter)
	}
}

// Calls returns how many requests op has received (each page counts).
func (m *Model) Calls(op string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[op]
}

// ResetCalls zeroes the request counters.
func (m *Model) ResetCalls() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.calls)
}

// takeFault returns the error to answer op with, if any, counting the
// request. Call with m.mu held.
func (m *Model) takeFaultLocked(op string) *fault {
	if m.fx.ARMError != nil {
		return &fault{m.fx.ARMError.Status, m.fx.ARMError.Code}
	}
	for _, key := range []string{op, opAny} {
		if q := m.faults[key]; len(q) > 0 {
			f := q[0]
			m.faults[key] = q[1:]
			return &f
		}
	}
	return nil
}

// begin returns a snapshot of the fixture and
// the fault to answer with, if any.
func (m *Model) begin(op string) (Fixture, *fault) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fx.clone(), m.takeFaultLocked(op)
}

// beginList begins a list request for op, answering resp itself when
// the request fails: with the fault set for op, or ResourceGroupNotFound
// when a resourceGroup given does not exist. It returns the fixture to
// list from and whether to list.
func beginList[R any](m *Model, resp *azfake.PagerResponder[R], op string, resourceGroup ...string) (Fixture, bool) {
	fx, f := m.begin(op)
	if f != nil {
		resp.AddResponseError(f.status, f.code)
		return fx, false
	}
	for _, rg := range resourceGroup {
		if !rgExists(fx, rg) {
			resp.AddResponseError(http.StatusNotFound, "ResourceGroupNotFound")
			return fx, false
		}
	}
	return fx, true
}

// count counts a request (a page of a list counts as one).
func (m *Model) count(req *http.Request) {
	op, _ := req.Context().Value(runtime.CtxAPINameKey{}).(string)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls[op]++
}

func (m *Model) throttled(req *http.Request) *http.Response {
	op, _ := req.Context().Value(runtime.CtxAPINameKey{}).(string)
	m.mu.Lock()
	defer m.mu.Unlock()
	var wait time.Duration
	found := false
	for _, key := range []string{op, opAny} {
		if q := m.throttle[key]; len(q) > 0 {
			wait, found = q[0], true
			m.throttle[key] = q[1:]
			break
		}
	}
	if !found {
		return nil
	}
	h := http.Header{}
	h.Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
	h.Set("x-ms-error-code", "TooManyRequests")
	h.Set("Content-Type", "application/json")
	body := `{"error":{"code":"TooManyRequests","message":"fakearm: throttled"}}`
	return &http.Response{
		StatusCode: http.StatusTooManyRequests, Status: "429 Too Many Requests",
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req,
	}
}
