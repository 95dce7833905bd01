package enroll

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/osm-vm/osm-vm/internal/meshapi"
)

// NewTokenAdminHandler returns the join token admin API. It does no
// authentication: mount it behind the admin-token middleware.
//
//	POST   /api/v1/tokens       meshapi.CreateTokenRequest -> 201 meshapi.CreatedToken
//	GET    /api/v1/tokens       -> meshapi.TokenList, newest first
//	DELETE /api/v1/tokens/{id}  revoke -> meshapi.Token (404 when unknown)
func NewTokenAdminHandler(log *slog.Logger, tokens *Tokens) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/tokens", func(w http.ResponseWriter, r *http.Request) {
		var body meshapi.CreateTokenRequest
		if !decode(w, r, &body) {
			return
		}
		req := TokenRequest{Service: body.Service, ServiceAccount: body.ServiceAccount, Uses: body.Uses}
		if body.TTL != "" {
			ttl, err := time.ParseDuration(body.TTL)
			if err != nil {
				writeError(w, http.StatusBadRequest, meshapi.ReasonBadRequest, fmt.Sprintf("ttl %q: want a duration such as 24h or 30m", body.TTL))
				return
			}
			if ttl <= 0 {
				writeError(w, http.StatusBadRequest, meshapi.ReasonBadRequest, fmt.Sprintf("ttl %q: want a positive duration such as 24h", body.TTL))
				return
			}
			req.TTL = ttl
		}
		secret, tok, err := tokens.Create(r.Context(), req)
		if errors.Is(err, ErrTokenInvalid) {
			writeError(w, http.StatusBadRequest, meshapi.ReasonBadRequest, err.Error())
			return
		}
		if err != nil {
			log.Error("create join token", "error", err)
			writeError(w, http.StatusInternalServerError, meshapi.ReasonInternal, err.Error())
			return
		}
		log.Info("join token created", "token", tok.ID, "service", tok.Service.String(), "expires", tok.Expires, "uses", tok.UsesTotal)
		writeJSON(w, http.StatusCreated, meshapi.CreatedToken{Secret: secret, Token: meshapi.Token(tok)})
	})
	mux.HandleFunc("GET /api/v1/tokens", func(w http.ResponseWriter, r *http.Request) {
		toks, err := tokens.List(r.Context())
		if err != nil {
			log.Error("list join tokens", "error", err)
			writeError(w, http.StatusInternalServerError, meshapi.ReasonInternal, err.Error())
			return
		}
		now := tokens.now()
		list := meshapi.TokenList{Items: make([]meshapi.TokenStatus, 0, len(toks))}
		for _, t := range toks {
			list.Items = append(list.Items, meshapi.TokenStatus{Token: meshapi.Token(t), State: t.State(now)})
		}
		writeJSON(w, http.StatusOK, list)
	})
	mux.HandleFunc("DELETE /api/v1/tokens/{id}", func(w http.ResponseWriter, r *http.Request) {
		tok, err := tokens.Revoke(r.Context(), r.PathValue("id"))
		if errors.Is(err, ErrTokenNotFound) {
			writeError(w, http.StatusNotFound, meshapi.ReasonNotFound, err.Error())
			return
		}
		if err != nil {
			log.Error("revoke join token", "error", err)
			writeError(w, http.StatusInternalServerError, meshapi.ReasonInternal, err.Error())
			return
		}
		log.Info("join token revoked", "token", tok.ID)
		writeJSON(w, http.StatusOK, meshapi.Token(tok))
	})
	return mux
}
