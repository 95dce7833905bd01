package provider

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors. Wrap them with fmt.Errorf("...: %w", ErrX) and add what
// the operator needs to fix; they survive the plugin boundary as gRPC codes.
var (
	// ErrNotFound: the provider does not know the service.
	ErrNotFound = errors.New("not found")
	// ErrInvalidConfig: the instance's config block is wrong.
	ErrInvalidConfig = errors.New("invalid provider config")
	// ErrNotConfigured: a call arrived before a successful Configure.
	ErrNotConfigured = errors.New("provider not configured")
	// ErrUnavailable: the provider's backend (a cloud API, a cluster) cannot
	// be reached right now; the caller should retry.
	ErrUnavailable = errors.New("provider backend unavailable")
)

var codeOf = []struct {
	err  error
	code codes.Code
}{
	{ErrNotFound, codes.NotFound},
	{ErrInvalidConfig, codes.InvalidArgument},
	{ErrNotConfigured, codes.FailedPrecondition},
	{ErrUnavailable, codes.Unavailable},
	// A call the other side does not implement (built before it existed).
	{errors.ErrUnsupported, codes.Unimplemented},
	{context.Canceled, codes.Canceled},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
}

// toStatus turns an error returned by a Provider into a gRPC status error.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, c := range codeOf {
		if errors.Is(err, c.err) {
			return status.Error(c.code, err.Error())
		}
	}
	return status.Error(codes.Unknown, err.Error())
}

// fromStatus turns a gRPC error from the plugin back into an error that
// wraps the matching sentinel, keeping the plugin's message.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, c := range codeOf {
		if st.Code() == c.code {
			return &remoteError{msg: st.Message(), sentinel: c.err}
		}
	}
	return &remoteError{msg: st.Message(), grpc: err}
}

// remoteError carries the plugin's message verbatim while matching the
// sentinel with errors.Is.
type remoteError struct {
	msg      string
	sentinel error
	grpc     error
}

func (e *remoteError) Error() string { return e.msg }

func (e *remoteError) Unwrap() error {
	if e.sentinel != nil {
		return e.sentinel
	}
	return e.grpc
}
