package fakearm

// HTTP routing: which fake server a request goes to, and a fresh one after
// an error.

import (
	"context"
	"net/http"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
)

// routingTransport sends the requests of armnetwork clients to the
// network fakes and everything else to the compute fakes.
type routingTransport struct{ compute, network policy.Transporter }

func (t routingTransport) Do(req *http.Request) (*http.Response, error) {
	if op, _ := req.Context().Value(runtime.CtxAPINameKey{}).(string); strings.HasPrefix(op, "InterfacesClient.") {
		return t.network.Do(req)
	}
	return t.compute.Do(req)
}

// resettingTransport wraps an SDK fake server transport and replaces it
// after an error. The SDK fakes remember a half-consumed pager per URL
// path and do not forget it when a page fails, so the next list of the
// same path would get stale pages; ARM has no such state.
type resettingTransport struct {
	m    *Model
	newT func() policy.Transporter

	mu  sync.Mutex
	cur policy.Transporter
}

func (t *resettingTransport) Do(req *http.Request) (*http.Response, error) {
	t.m.count(req)
	if resp := t.m.throttled(req); resp != nil {
		return resp, nil
	}
	t.mu.Lock()
	if t.cur == nil {
		t.cur = t.newT()
	}
	cur := t.cur
	t.mu.Unlock()
	// The SDK fakes answer from memory at once, so they get a context
	// that is never cancelled: armnetwork/v9 v9.0.0's fake dispatcher
	// closes its result channel when the request's context ends while its
	// worker goroutine may still send on it ("send on closed channel").
	resp, err := cur.Do(req.WithContext(context.WithoutCancel(req.Context())))
	if err == nil && req.Context().Err() != nil {
		resp.Body.Close()
		resp, err = nil, req.Context().Err()
	}
	if err != nil {
		t.mu.Lock()
		if t.cur == cur {
			t.cur = nil
		}
		t.mu.Unlock()
	}
	return resp, err
}
