package xds

// Why a stream ends: the causes the server cancels a stream's context
// with, what the stream's RPC ends with for each (streamErr), and the
// reason osm_xds_streams_closed_total counts it under (closeReason).

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrRevoked is the cause given to streams ended by Disconnect.
var ErrRevoked = errors.New("proxy certificate revoked")

// ErrExpired is the cause given to a stream whose client certificate
// expired: TLS checks expiry only at the handshake, so a stream would
// otherwise outlive its certificate. The proxy reconnects with its
// renewed certificate.
var ErrExpired = errors.New("proxy certificate expired")

// Stream close reasons, the values of osm_xds_streams_closed_total's
// reason label.
const (
	closeClient   = "client"   // the proxy ended it or went away
	closeRevoked  = "revoked"  // its proxy was revoked or is no longer allowed
	closeExpired  = "expired"  // its certificate expired
	closeRefused  = "refused"  // a request was refused (bad node, type, or no configuration)
	closeStopping = "stopping" // the server is stopping
)

// closeReason names why a stream whose context is ctx ended; stopped says
// the server was stopping.
func closeReason(ctx context.Context, stopped bool) string {
	cause := context.Cause(ctx)
	switch {
	case stopped:
		return closeStopping
	case errors.Is(cause, ErrExpired):
		return closeExpired
	case errors.Is(cause, ErrRevoked):
		return closeRevoked
	case cause == nil || errors.Is(cause, context.Canceled):
		return closeClient // most streams: said without status.FromError's allocations
	}
	if st, ok := status.FromError(cause); ok && st.Code() != codes.OK && st.Code() != codes.Canceled {
		return closeRefused
	}
	return closeClient
}

// streamErr is what a stream ends with, from the cause its context was
// cancelled with: a request refused by authRecv (a gRPC status) as is, a
// revocation or Disconnect as PermissionDenied naming the cause.
func streamErr(ctx context.Context) error {
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(cause, context.Canceled) {
		return nil
	}
	if _, ok := status.FromError(cause); ok {
		return cause
	}
	return status.Errorf(codes.PermissionDenied, "stream closed by the control plane: %v", cause)
}
