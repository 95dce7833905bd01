package api

import (
	"net"
	"net/http"
	"time"

	"github.com/osm-vm/osm-vm/internal/httpserve"
)

// ServeOptions are the settings of a listener served by this package. A
// zero bound takes internal/httpserve's default.
type ServeOptions struct {
	// Ready, when not nil, receives the bound address once listening
	// (tests pass port 0).
	Ready chan<- net.Addr
	// HandshakeTimeout bounds the TLS handshake (HTTPS API) and the read
	// of a request's headers (both listeners).
	HandshakeTimeout time.Duration
	// IdleTimeout bounds how long a keep-alive connection waits for its
	// next request.
	IdleTimeout time.Duration
	// ReadTimeout bounds the read of a whole request, body included (at
	// least HandshakeTimeout).
	ReadTimeout time.Duration
	// WriteTimeout and MinWriteRate (bytes per second) bound how long a
	// client may leave a response untaken: each write of n bytes must be
	// taken within WriteTimeout + n/MinWriteRate (httpserve.Options).
	WriteTimeout time.Duration
	MinWriteRate int
	// Names are further host names and addresses the debug listener
	// answers to (the server's own: its host name, serverNames), for a
	// scraper that reaches it by name; the HTTPS API ignores them.
	Names []string
}

// server returns an http.Server for h with the options' bounds.
func (o ServeOptions) server(h http.Handler) *http.Server {
	return httpserve.Options{
		HandshakeTimeout: o.HandshakeTimeout,
		ReadTimeout:      o.ReadTimeout,
		WriteTimeout:     o.WriteTimeout,
		MinWriteRate:     o.MinWriteRate,
		IdleTimeout:      o.IdleTimeout,
	}.Server(h)
}
