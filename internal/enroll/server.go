package enroll

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"time"

	"github.com/osm-vm/osm-vm/internal/keylock"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/store"
)

// Issuer signs proxy certificates; *certificate.Manager satisfies it.
type Issuer interface {
	// IssueProxy signs csrDER for a new proxy of svc running as sa, deciding
	// the CN and SANs itself. ops commit in the same store transaction as
	// the new proxy record; when one of their version conditions fails it
	// returns an error and issues nothing.
	IssueProxy(ctx context.Context, csrDER []byte, svc mesh.MeshService, sa mesh.ServiceAccount, ops ...store.Op) (certPEM []byte, cn string, err error)
	// RenewProxy signs csrDER for the proxy identified by peer, its
	// current, verified certificate.
	RenewProxy(ctx context.Context, peer *x509.Certificate, csrDER []byte) (certPEM []byte, err error)
	// RootPEM returns the mesh CA bundle.
	RootPEM() []byte
}

// maxBody bounds a request body; a CSR is about 500 bytes.
const maxBody = 64 << 10

// A refused (too early) renewal keeps the proxy's renewal turn for
// refusedRenewalHold, so one identity is refused at most about once per
// second; at most maxQueuedRenewals of its renewals wait for the turn.
const (
	refusedRenewalHold = time.Second
	maxQueuedRenewals  = 16
)

// maxSpendAttempts bounds the tries to spend a token whose version check
// keeps failing. Within one process spends of a token are serialised, so
// only other replicas make it fail; with the jittered backoff between
// tries (up to 100ms) that gives them several seconds.
const maxSpendAttempts = 64

// retryAter is an Issuer's refusal of a renewal that came too early
// (*certificate.TooEarlyError): it says when renewal is allowed.
type retryAter interface {
	error
	RetryAt() time.Time
}

// notCurrent is an Issuer's refusal of a renewal with a certificate an
// earlier renewal replaced (*certificate.NotCurrentError): only the
// current certificate renews.
type notCurrent interface {
	error
	CurrentSerial() string
}

// NewHandler returns the enrollment API, authenticated by join tokens and
// proxy certificates (mount it without the admin-token middleware):
//
//	POST /api/v1/enroll  meshapi.EnrollRequest -> meshapi.CertificateResponse
//	POST /api/v1/renew   meshapi.RenewRequest  -> meshapi.CertificateResponse (mTLS: the current proxy certificate)
//
// A renewal the Issuer refuses as too early (its error has a
// RetryAt() time.Time method) is answered 429 RenewalTooEarly with
// Retry-After in seconds: refusing, rather than answering with the current
// certificate, is the only answer that costs the server no signature and
// no write, and the current certificate is for a key the caller may no
// longer hold (osm-agent makes a new key per renewal). A renewal with a
// certificate an earlier renewal replaced (the Issuer's error has a
// CurrentSerial() string method) is answered 403 RenewalNotCurrent: only
// the current certificate renews. Both refusals hold the proxy's renewal
// turn for a second.
//
// xdsAddress returns the xDS address to give an agent that reached this
// API with the given Host header (a server listening on a wildcard address
// answers with the host the agent used). refused lists the Issuer's
// sentinel errors (such as certificate.ErrRevoked and
// certificate.ErrNotFound) that mean "this proxy may not renew": RenewProxy
// errors matching one of them answer 403 Refused, others 500.
func NewHandler(log *slog.Logger, tokens *Tokens, iss Issuer, xdsAddress func(host string) string, refused ...error) http.Handler {
	return NewHandlerWithReplicas(log, tokens, iss, xdsAddress, nil, refused...)
}

// NewHandlerWithReplicas is NewHandler whose answers also list the mesh's
// replicas (Replicas.List), so an agent's first bootstrap names them all.
func NewHandlerWithReplicas(log *slog.Logger, tokens *Tokens, iss Issuer, xdsAddress func(host string) string, replicas func() []meshapi.Replica, refused ...error) *Handler {
	h := &handler{log: log, tokens: tokens, iss: iss, xds: xdsAddress, replicas: replicas, refused: refused}
	mux := http.NewServeMux()
	routes := map[string]http.Handler{
		"POST /api/v1/enroll": http.HandlerFunc(h.enroll),
		"POST /api/v1/renew":  http.HandlerFunc(h.renew),
	}
	for pattern, rh := range routes {
		mux.Handle(pattern, rh)
	}
	return &Handler{mux: mux, routes: routes}
}

// Handler serves the enrollment API (see NewHandler).
type Handler struct {
	mux    *http.ServeMux
	routes map[string]http.Handler
}

// ServeHTTP serves the enrollment and renewal routes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Routes returns the API's routes by pattern, for a server that mounts
// them beside others: the patterns are the enrollment API's own.
func (h *Handler) Routes() map[string]http.Handler { return maps.Clone(h.routes) }

type handler struct {
	// replicas lists the mesh's replicas for the answers (nil: none).
	replicas func() []meshapi.Replica
	// renewing holds the proxies (by CN) with a renewal in progress.
	renewing keylock.Set
	log      *slog.Logger
	tokens   *Tokens
	iss      Issuer
	xds      func(host string) string
	refused  []error
}

func (h *handler) enroll(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var req meshapi.EnrollRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Token == "" {
		writeError(w, http.StatusUnauthorized, meshapi.ReasonTokenUnknown, "the request has no join token: pass --token from `osm-server token create`")
		return
	}
	if err := req.Service.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, meshapi.ReasonBadRequest, "service: "+err.Error())
		return
	}
	csr, reason, err := parseCSR(req.CSR)
	if err != nil {
		writeError(w, http.StatusBadRequest, reason, err.Error())
		return
	}

	// Spends of one token are serialised in this process, so concurrent
	// enrollments with a multi-use token (a scale set booting) do not fail
	// each other's version checks; a check that still fails (another
	// replica spent it) is retried after a jittered backoff.
	if key, ok := tokenKey(req.Token); ok {
		unlock, err := h.tokens.spends.Lock(ctx, key, 0)
		if err != nil {
			return // the client went away while queued
		}
		defer unlock()
	}
	for attempt := 1; ; attempt++ {
		tok, key, version, err := h.tokens.lookup(ctx, req.Token)
		if err != nil {
			h.internal(w, "read join token", err)
			return
		}
		if status, reason, msg := h.check(tok, version, req.Service); status != 0 {
			h.log.Info("enrollment refused", "reason", reason, "token", tok.ID, "service", req.Service.String(), "remote", r.RemoteAddr)
			writeError(w, status, reason, msg)
			return
		}
		if attempt > maxSpendAttempts {
			h.log.Warn("join token kept changing while an enrollment tried to spend it", "token", tok.ID, "attempts", maxSpendAttempts, "remote", r.RemoteAddr)
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, meshapi.ReasonConflict, fmt.Sprintf("join token %s: other servers spent it %d times while this one tried; try again", tok.ID, maxSpendAttempts))
			return
		}
		spent := tok
		spent.UsesLeft--
		val, err := json.Marshal(spent)
		if err != nil {
			h.internal(w, "encode join token", err)
			return
		}
		certPEM, cn, issueErr := h.iss.IssueProxy(ctx, csr.Raw, tok.Service, tok.MeshServiceAccount(), store.Set(key, version, val))
		if issueErr == nil {
			if err := checkIssued(certPEM, cn, csr, tok.Service); err != nil {
				h.internal(w, "issue proxy certificate", err)
				return
			}
			h.log.Info("proxy enrolled", "identity", cn, "token", tok.ID, "usesLeft", spent.UsesLeft, "remote", r.RemoteAddr)
			writeJSON(w, http.StatusOK, meshapi.CertificateResponse{Identity: cn, Certificate: string(certPEM), CA: string(h.iss.RootPEM()), XDSAddress: h.xds(r.Host), Replicas: h.replicaList()})
			return
		}
		// Someone may have spent the token first: if its version moved,
		// evaluate it again; otherwise the failure was the issuer's own.
		_, _, current, err := h.tokens.lookup(ctx, req.Token)
		if err != nil {
			h.internal(w, "read join token", err)
			return
		}
		if current == version {
			h.internal(w, "issue proxy certificate", issueErr)
			return
		}
		if !keylock.Backoff(ctx, attempt) {
			return // the client went away
		}
	}
}

// check decides whether the token at version may enroll a proxy of svc.
// status is 0 when it may.
func (h *handler) check(tok Token, version uint64, svc mesh.MeshService) (status int, reason, msg string) {
	const create = "create a new one with `osm-server token create --service %s --namespace %s`"
	switch version {
	case 0:
		return http.StatusUnauthorized, meshapi.ReasonTokenUnknown, fmt.Sprintf("join token unknown: check that the whole token was pasted, or "+create, svc.Name, svc.Namespace)
	}
	switch tok.State(h.tokens.now()) {
	case StateRevoked:
		return http.StatusUnauthorized, meshapi.ReasonTokenRevoked, fmt.Sprintf("join token %s was revoked: "+create, tok.ID, svc.Name, svc.Namespace)
	case StateExpired:
		return http.StatusUnauthorized, meshapi.ReasonTokenExpired, fmt.Sprintf("join token %s expired at %s: "+create, tok.ID, tok.Expires.Format(time.RFC3339), svc.Name, svc.Namespace)
	case StateUsedUp:
		return http.StatusUnauthorized, meshapi.ReasonTokenUsedUp, fmt.Sprintf("join token %s is used up (%d of %d uses): "+create, tok.ID, tok.UsesTotal, tok.UsesTotal, svc.Name, svc.Namespace)
	}
	if tok.Service != svc {
		return http.StatusForbidden, meshapi.ReasonServiceMismatch, fmt.Sprintf("join token %s is for service %s, not %s: use --service %s --namespace %s, or "+create,
			tok.ID, tok.Service, svc, tok.Service.Name, tok.Service.Namespace, svc.Name, svc.Namespace)
	}
	return 0, "", ""
}

func (h *handler) renew(w http.ResponseWriter, r *http.Request) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		writeError(w, http.StatusUnauthorized, meshapi.ReasonClientCertRequired, "renewal is authenticated by the current proxy certificate: connect with it as the TLS client certificate")
		return
	}
	peer := r.TLS.VerifiedChains[0][0]
	cn := peer.Subject.CommonName
	if now := h.tokens.now(); now.After(peer.NotAfter) {
		writeError(w, http.StatusUnauthorized, meshapi.ReasonCertificateExpired, fmt.Sprintf("proxy certificate %s expired at %s: enroll again with a new join token", cn, peer.NotAfter.Format(time.RFC3339)))
		return
	}
	if _, err := mesh.ParseProxyIdentity(cn); err != nil {
		writeError(w, http.StatusUnauthorized, meshapi.ReasonNotProxyCertificate, fmt.Sprintf("the client certificate is not a proxy certificate: %v", err))
		return
	}
	// One renewal per proxy at a time, and a refused one holds its turn
	// for refusedRenewalHold: a machine never renews twice at once, so the
	// requests queued behind are a loop or a flood, which then waits
	// without costing the server anything and cannot crowd out other
	// machines. Beyond maxQueuedRenewals a request is refused after the
	// same hold, without queueing (answering at once would only feed the
	// loop; closing the connection would make it cost TLS handshakes).
	unlock, err := h.renewing.Lock(r.Context(), cn, maxQueuedRenewals)
	if errors.Is(err, keylock.ErrBusy) {
		t := time.NewTimer(refusedRenewalHold)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, meshapi.ReasonRenewalTooEarly, fmt.Sprintf("renewal of %s refused: %d renewals of this proxy are in progress or queued; the certificate presented stays valid", cn, maxQueuedRenewals))
		return
	}
	if err != nil {
		return // the client went away while queued
	}
	hold := false
	defer func() {
		if hold {
			time.AfterFunc(refusedRenewalHold, unlock)
			return
		}
		unlock()
	}()
	var req meshapi.RenewRequest
	if !decode(w, r, &req) {
		return
	}
	csr, reason, err := parseCSR(req.CSR)
	if err != nil {
		writeError(w, http.StatusBadRequest, reason, err.Error())
		return
	}
	certPEM, err := h.iss.RenewProxy(r.Context(), peer, csr.Raw)
	if err != nil {
		var early retryAter
		if errors.As(err, &early) {
			hold = true
			wait := early.RetryAt().Sub(h.tokens.now())
			secs := max(int64((wait+time.Second-1)/time.Second), 1)
			w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
			writeError(w, http.StatusTooManyRequests, meshapi.ReasonRenewalTooEarly,
				fmt.Sprintf("renewal of %s refused: %v; the certificate presented stays valid, renew again in %s", cn, err, time.Duration(secs)*time.Second))
			return
		}
		var stale notCurrent
		if errors.As(err, &stale) {
			hold = true
			h.log.Info("renewal refused: not the current certificate", "identity", cn, "serial", peer.SerialNumber.Text(16), "current", stale.CurrentSerial(), "remote", r.RemoteAddr)
			writeError(w, http.StatusForbidden, meshapi.ReasonRenewalNotCurrent, fmt.Sprintf("renewal of %s refused: %v", cn, err))
			return
		}
		for _, e := range h.refused {
			if errors.Is(err, e) {
				h.log.Info("renewal refused", "identity", cn, "error", err, "remote", r.RemoteAddr)
				writeError(w, http.StatusForbidden, meshapi.ReasonRefused, fmt.Sprintf("renewal of %s refused: %v; enroll again with a new join token", cn, err))
				return
			}
		}
		h.internal(w, "renew proxy certificate "+cn, err)
		return
	}
	id, _ := mesh.ParseProxyIdentity(cn)
	if err := checkIssued(certPEM, cn, csr, id.Service); err != nil {
		h.internal(w, "renew proxy certificate "+cn, err)
		return
	}
	h.log.Info("proxy certificate renewed", "identity", cn, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, meshapi.CertificateResponse{Identity: cn, Certificate: string(certPEM), CA: string(h.iss.RootPEM()), XDSAddress: h.xds(r.Host), Replicas: h.replicaList()})
}

func (h *handler) internal(w http.ResponseWriter, what string, err error) {
	h.log.Error(what, "error", err)
	writeError(w, http.StatusInternalServerError, meshapi.ReasonInternal, fmt.Sprintf("%s: %v", what, err))
}

// parseCSR decodes a PEM CSR, checks its signature (proof that the sender
// holds the key) and the key's strength. reason names the failure.
func parseCSR(csrPEM string) (*x509.CertificateRequest, string, error) {
	block, _ := pem.Decode([]byte(csrPEM))
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, meshapi.ReasonBadRequest, errors.New(`csr: want a PEM "CERTIFICATE REQUEST" block`)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, meshapi.ReasonBadRequest, fmt.Errorf("csr: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, meshapi.ReasonBadRequest, fmt.Errorf("csr: bad signature: %w", err)
	}
	if err := meshapi.CheckKey(csr.PublicKey); err != nil {
		return nil, meshapi.ReasonWeakKey, fmt.Errorf("csr: %w", err)
	}
	return csr, "", nil
}

// checkIssued makes sure the issuer's certificate is what was asked for:
// the CSR's key, the CN it reported, for the service.
func checkIssued(certPEM []byte, cn string, csr *x509.CertificateRequest, svc mesh.MeshService) error {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return fmt.Errorf("issuer returned a bad certificate: %w", err)
	}
	if cert.Subject.CommonName != cn {
		return fmt.Errorf("issuer returned a certificate for %q, reported %q", cert.Subject.CommonName, cn)
	}
	id, err := mesh.ParseProxyIdentity(cn)
	if err != nil {
		return fmt.Errorf("issuer returned a certificate that is not a proxy certificate: %w", err)
	}
	if id.Service != svc {
		return fmt.Errorf("issuer returned a certificate for service %s, want %s", id.Service, svc)
	}
	type equaler interface{ Equal(x crypto.PublicKey) bool }
	if k, ok := cert.PublicKey.(equaler); !ok || !k.Equal(csr.PublicKey) {
		return errors.New("issuer returned a certificate for another key than the CSR's")
	}
	return nil
}

func parseCertPEM(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New(`want a PEM "CERTIFICATE" block`)
	}
	return x509.ParseCertificate(block.Bytes)
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, meshapi.ReasonBadRequest, fmt.Sprintf("request body is larger than %d bytes", maxBody))
			return false
		}
		writeError(w, http.StatusBadRequest, meshapi.ReasonBadRequest, fmt.Sprintf("decode request body: %v", err))
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, reason, msg string) {
	writeJSON(w, status, meshapi.ErrorBody{Reason: reason, Error: msg})
}
