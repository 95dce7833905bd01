package api

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
)

// Route is one pattern of the HTTPS API served without the admin token:
// enrollment (join token), renewal and the agent's config (proxy
// certificate), and the public CA.
type Route struct {
	Pattern string
	Handler http.Handler
}

// NewHTTPSHandler returns the HTTPS API: the public routes as given, and
// everything else behind the admin token (Authorization: Bearer <token>).
func NewHTTPSHandler(log *slog.Logger, adminToken string, public []Route, admin http.Handler) http.Handler {
	mux := http.NewServeMux()
	for _, r := range public {
		mux.Handle(r.Pattern, r.Handler)
	}
	mux.Handle("/", requireAdmin(log, adminToken, admin))
	return mux
}

// requireAdmin lets a request through only with the admin token.
func requireAdmin(log *slog.Logger, token string, next http.Handler) http.Handler {
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		switch {
		case !ok || got == "":
			writeError(w, http.StatusUnauthorized, errors.New("no admin token: pass --admin-token, set OSM_ADMIN_TOKEN, or run on the server host where <data-dir>/admin.token is read"))
		case subtle.ConstantTimeCompare([]byte(got), want) != 1:
			log.Warn("admin API request with a wrong admin token", "remote", r.RemoteAddr, "path", r.URL.Path)
			writeError(w, http.StatusUnauthorized, errors.New("wrong admin token: use the one in <data-dir>/admin.token on the server host"))
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// ServeTLS serves h on addr with cfg until ctx is done. ready, when not
// nil, receives the bound address once listening.
func ServeTLS(ctx context.Context, log *slog.Logger, addr string, cfg *tls.Config, h http.Handler, ready chan<- net.Addr) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("HTTPS API listener on %s: %w (set apiAddress / --api-address to a free address)", addr, err)
	}
	if ready != nil {
		ready <- ln.Addr()
	}
	srv := &http.Server{Handler: h, TLSConfig: cfg, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	log.Info("HTTPS API listening", "address", ln.Addr().String())
	return serve(ctx, "HTTPS API", srv, tls.NewListener(ln, cfg))
}

// serve runs srv on ln until ctx is done, then shuts it down gracefully.
func serve(ctx context.Context, what string, srv *http.Server, ln net.Listener) error {
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
	<-errc
	return err
}
