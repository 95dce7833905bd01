// Package httpserve builds the http.Servers of osm-server's and osm-agent's
// HTTP listeners with one set of bounds: how long a connection may take to
// finish its TLS handshake and send its request, how long a client may
// leave a response untaken, and how long a keep-alive connection may idle.
// It also holds the Host check of the plain-HTTP listeners a browser on
// the machine could reach (osm-server's debug listener, osm-agent's
// metrics), which stops DNS rebinding.
//
// Both binaries import it, so it imports nothing of either side: only the
// wire package internal/meshapi, for the JSON error body.
package httpserve

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

// DefaultHandshakeTimeout bounds, unless Options say otherwise, how long a
// connection may take to finish its TLS handshake and to send its request
// headers. A client on a slow link handshakes in well under a second; a
// connection that sends nothing holds a socket and a goroutine, so it is
// closed.
const DefaultHandshakeTimeout = 5 * time.Second

// DefaultReadTimeout bounds the read of a whole request, body included,
// unless Options say otherwise: bodies are small (a CSR, a specification),
// so a client sending one a byte at a time is cut off.
const DefaultReadTimeout = time.Minute

// DefaultWriteTimeout is how long, unless Options say otherwise, a client
// may leave a response untaken: each write of a response must be taken
// within it, plus the time the write's bytes need at MinWriteRate.
const DefaultWriteTimeout = 30 * time.Second

// DefaultMinWriteRate, in bytes per second, is the slowest a client may
// take a large write of a response (4 KiB/s, 32 kbit/s) unless Options say
// otherwise: an 8 MiB agent package may take 35 minutes.
const DefaultMinWriteRate = 4 << 10

// DefaultIdleTimeout is how long a keep-alive connection may wait for its
// next request unless Options say otherwise.
const DefaultIdleTimeout = 2 * time.Minute

// Options are the bounds of a listener's connections. A zero field takes
// its default.
type Options struct {
	// HandshakeTimeout bounds the TLS handshake and the read of a
	// request's headers.
	HandshakeTimeout time.Duration
	// ReadTimeout bounds the read of a whole request, body included (at
	// least HandshakeTimeout). It does not bound the handler or the
	// response.
	ReadTimeout time.Duration
	// WriteTimeout and MinWriteRate bound how long a client may leave a
	// response untaken: every write of a response, of n bytes, must be
	// taken by the client within WriteTimeout + n/MinWriteRate, counted
	// from the write. A response is not bounded as a whole: a large
	// download taken at MinWriteRate, or a profile that writes after
	// the seconds it was asked for, runs to its end.
	WriteTimeout time.Duration
	MinWriteRate int // bytes per second
	// IdleTimeout bounds how long a keep-alive connection waits for its
	// next request.
	IdleTimeout time.Duration
}

// WithDefaults returns o with each zero field set to its default.
func (o Options) WithDefaults() Options {
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	o.ReadTimeout = max(o.ReadTimeout, o.HandshakeTimeout)
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MinWriteRate <= 0 {
		o.MinWriteRate = DefaultMinWriteRate
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	return o
}

// Server returns an http.Server for h with the options' bounds.
//
// http.Server's own WriteTimeout stays 0: it bounds a whole response
// whatever its size, so it would cut an honest slow download of the
// agent package, and net/http/pprof refuses profiles longer than it.
// Instead every write of a response gets its own deadline (see
// Options.WriteTimeout), and an idle keep-alive connection one of
// IdleTimeout + WriteTimeout, for what net/http writes outside a handler
// (a 400 to a malformed request). net/http bounds a TLS handshake by the
// smallest of its read and write timeouts, which is ReadHeaderTimeout here.
func (o Options) Server(h http.Handler) *http.Server {
	o = o.WithDefaults()
	return &http.Server{
		Handler:           o.bound(h),
		ReadHeaderTimeout: o.HandshakeTimeout,
		ReadTimeout:       o.ReadTimeout,
		IdleTimeout:       o.IdleTimeout,
		ConnState: func(c net.Conn, s http.ConnState) {
			if s == http.StateIdle {
				_ = c.SetWriteDeadline(time.Now().Add(o.IdleTimeout + o.WriteTimeout))
			}
		},
	}
}

// bound gives each write of h's responses its deadline.
func (o Options) bound(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dw := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: o.WriteTimeout, rate: float64(o.MinWriteRate)}
		dw.extend(0)
		h.ServeHTTP(dw, r)
		dw.extend(0) // for what net/http flushes after the handler
	})
}

// deadlineWriter sets the connection's write deadline before each write
// it passes on. It has no ReadFrom, so io.Copy (http.ServeFile) writes
// through it in 32 KiB pieces, each with its own deadline.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	rate    float64
}

// extend moves the write deadline to now + timeout + the time n bytes
// take at the minimum rate. A writer that cannot take deadlines (a test's
// recorder) has none.
func (w *deadlineWriter) extend(n int) {
	d := w.timeout + time.Duration(float64(n)/w.rate*float64(time.Second))
	_ = w.rc.SetWriteDeadline(time.Now().Add(d))
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.extend(len(p))
	return w.ResponseWriter.Write(p)
}

// WriteHeader may write at once (a 1xx response).
func (w *deadlineWriter) WriteHeader(code int) {
	w.extend(0)
	w.ResponseWriter.WriteHeader(code)
}

// Flush writes what is buffered (at most a few KiB).
func (w *deadlineWriter) Flush() {
	w.extend(0)
	_ = w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Serve runs srv on ln until ctx is done, then shuts it down gracefully
// (5 s at most). what names the listener in the error.
func Serve(ctx context.Context, what string, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("%s: %w", what, err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if err != nil {
		srv.Close() // what did not finish in time is cut
	}
	<-errc
	return err
}
