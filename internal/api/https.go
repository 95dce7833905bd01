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

	"github.com/osm-vm/osm-vm/internal/httpserve"
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

// requireAdmin lets a request through only with the admin token. The
// HTTPS admin API and the debug listener's /debug/ routes share it.
func requireAdmin(log *slog.Logger, token string, next http.Handler) http.Handler {
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := bearerToken(r.Header.Get("Authorization"))
		switch {
		case !ok || got == "":
			writeError(w, http.StatusUnauthorized, errors.New("no admin token: send the header `Authorization: Bearer <token>` with the token in <data-dir>/admin.token on the server host (osm-server's commands read it there, or take --admin-token or OSM_ADMIN_TOKEN)"))
		case subtle.ConstantTimeCompare([]byte(got), want) != 1:
			log.Warn("admin API request with a wrong admin token", "remote", r.RemoteAddr, "path", r.URL.Path)
			writeError(w, http.StatusUnauthorized, errors.New("wrong admin token: use the one in <data-dir>/admin.token on the server host"))
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// ServeTLS serves h on addr with cfg until ctx is done. A connection that
// does not finish its TLS handshake within opts.HandshakeTimeout is closed.
func ServeTLS(ctx context.Context, log *slog.Logger, addr string, cfg *tls.Config, h http.Handler, opts ServeOptions) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("HTTPS API listener on %s: %w (set apiAddress / --api-address to a free address)", addr, err)
	}
	if opts.Ready != nil {
		opts.Ready <- ln.Addr()
	}
	srv := opts.server(h)
	srv.TLSConfig = cfg
	srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	log.Info("HTTPS API listening", "address", ln.Addr().String())
	return httpserve.Serve(ctx, "HTTPS API", srv, tls.NewListener(ln, cfg))
}

// bearerToken returns the token of an "Authorization: Bearer <token>"
// header; the scheme is case-insensitive (RFC 9110 11.1).
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}
