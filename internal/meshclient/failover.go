package meshclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// unreachableError is a request that got no answer from the server: it
// could not be reached, the connection broke, or it timed out.
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// Unreachable reports whether err means the server gave no answer (or
// answered 5xx: it is there but cannot serve, such as a replica that lost
// its store), so another replica may be tried. A 4xx answer, a server
// that fails the CA pin, or a bad answer are not: another replica would
// say the same.
func Unreachable(err error) bool {
	if errors.Is(err, ErrCAHashMismatch) {
		return false
	}
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr.Status >= http.StatusInternalServerError
	}
	var ue *unreachableError
	return errors.As(err, &ue)
}

// Failover calls call with each server in turn until one answers: it
// moves to the next server only when the previous one was [Unreachable],
// and returns the answer (or the refusal) of the first server that gave
// one, with that server. When none answered, the error names every server
// tried and what happened at each. servers must not be empty.
func Failover[T any](ctx context.Context, servers []string, call func(ctx context.Context, server string) (T, error)) (T, string, error) {
	var zero T
	if len(servers) == 0 {
		return zero, "", errors.New("no osm-server to ask: set server (or servers) in the agent config")
	}
	var tried []string
	var last error
	for _, s := range servers {
		v, err := call(ctx, s)
		if err == nil || !Unreachable(err) {
			return v, s, err
		}
		last = err
		tried = append(tried, fmt.Sprintf("%s: %v", s, err))
		if ctx.Err() != nil {
			break
		}
	}
	if len(tried) == 1 {
		return zero, "", last
	}
	return zero, "", &failoverError{msg: fmt.Sprintf("no osm-server answered (tried %d): %s", len(tried), strings.Join(tried, "; ")), last: last}
}

// failoverError is Failover's error when no server answered; it unwraps
// to the last server's error, so Unreachable still holds.
type failoverError struct {
	msg  string
	last error
}

func (e *failoverError) Error() string { return e.msg }
func (e *failoverError) Unwrap() error { return e.last }
