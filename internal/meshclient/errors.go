package meshclient

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/osm-vm/osm-vm/internal/meshapi"
)

// ErrNotFound: the server answered 404 (no such token, proxy or
// document); an *APIError with that status unwraps to it.
var ErrNotFound = errors.New("not found")

// APIError is an error response of the HTTPS API.
type APIError struct {
	Status int
	Body   meshapi.ErrorBody
	// RetryAfter is the server's Retry-After (in seconds), 0 if none.
	RetryAfter time.Duration
}

// Error is the server's message, followed by one line per problem of an
// invalid mesh specification.
func (e *APIError) Error() string {
	msg := e.Body.Error
	if msg == "" {
		msg = fmt.Sprintf("server answered %d %s", e.Status, http.StatusText(e.Status))
	}
	if len(e.Body.Errors) == 0 {
		return msg
	}
	var b strings.Builder
	b.WriteString(msg)
	for _, fe := range e.Body.Errors {
		b.WriteString("\n  " + fe.Error())
	}
	return b.String()
}

// Unwrap maps a 404 to ErrNotFound.
func (e *APIError) Unwrap() error {
	if e.Status == http.StatusNotFound {
		return ErrNotFound
	}
	return nil
}

// RenewalTooEarly reports whether err is the server's refusal of a
// renewal that came too early, and how long to wait before renewing again.
// The certificate presented stays valid meanwhile.
func RenewalTooEarly(err error) (retryIn time.Duration, ok bool) {
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusTooManyRequests || apiErr.Body.Reason != meshapi.ReasonRenewalTooEarly {
		return 0, false
	}
	return max(apiErr.RetryAfter, time.Second), true
}

// maxAnswer bounds an answer's body; a mesh specification listing is the
// largest.
const maxAnswer = 64 << 20

// roundTrip sends req and decodes a 2xx JSON answer into out (when not
// nil), or returns an *APIError.
func roundTrip(hc *http.Client, req *http.Request, out any) error {
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // callers name the server; the method and URL add nothing
		}
		if req.Context().Err() != nil {
			return err
		}
		return &unreachableError{err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return &unreachableError{fmt.Errorf("%s %s: read answer: %w", req.Method, req.URL.Redacted(), err)}
	}
	if resp.StatusCode/100 != 2 {
		apiErr := &APIError{Status: resp.StatusCode}
		if secs, err := strconv.ParseUint(resp.Header.Get("Retry-After"), 10, 32); err == nil {
			apiErr.RetryAfter = time.Duration(secs) * time.Second
		}
		if json.Unmarshal(raw, &apiErr.Body) != nil || apiErr.Body.Error == "" {
			apiErr.Body.Error = fmt.Sprintf("%s %s: server answered %s: %q", req.Method, req.URL.Redacted(), resp.Status, bytes.TrimSpace(truncate(raw, 200)))
		}
		return apiErr
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", req.Method, req.URL.Redacted(), err)
	}
	return nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
