// Package enroll is the server side of joining a machine to the mesh,
// modelled on `kubeadm join`: join tokens (create, list, revoke, spend) and
// the enrollment, renewal and token admin HTTPS endpoints of osm-server.
// The client side (osm-agent's enrollment and renewal, the CLI's token
// commands) is internal/meshclient; the JSON documents both sides exchange
// are internal/meshapi; the agent's identity files are internal/agent's.
//
// # Tokens
//
// A join token is 256 random bits, shown once as 64 hex characters and
// stored only as its SHA-256 hash under enroll/token/<hex of the hash>. It is
// bound to one mesh service (and the service account its proxies run as),
// expires (default 24h) and has a number of uses (default 1). A token's
// public ID is the first 8 hex characters of its hash. Spending a use is a
// version-checked store write handed to [Issuer.IssueProxy] so that the
// spend and the new proxy record commit in one transaction: a token is never
// spent without a proxy being issued, or the reverse, and with a single-use
// token exactly one of many concurrent enrollments succeeds.
//
// # Endpoints
//
// [NewHandler] serves POST /api/v1/enroll (authenticated by the join token)
// and POST /api/v1/renew (authenticated by the current proxy certificate
// over mTLS). Errors are JSON [meshapi.ErrorBody] values whose Reason names
// the cause: an unknown, expired, revoked or used-up token is 401 with
// nothing issued; a token for another service is 403; a weak key
// ([meshapi.CheckKey] refuses it) or a bad CSR is 400. The server decides
// the proxy identity; what the CSR asks for is ignored.
// [NewTokenAdminHandler] serves the token admin endpoints and does no
// authentication itself: mount it behind the admin-token middleware.
//
// # How the server must be configured
//
// The agent pins the server by the hash of the mesh root (--ca-cert-hash,
// [meshapi.CAHash]) during the TLS handshake, before it sends the token. It
// finds the root in the certificate chain the server presents, so the HTTPS
// server's tls.Certificate must carry the full chain: the serving leaf, any
// intermediates and the mesh root itself. The serving certificate must be
// issued by the mesh root for the host names and IPs agents use in --server
// and carry the ServerAuth extended key usage. For renewal the server must
// ask for client certificates: tls.Config{ClientAuth:
// tls.VerifyClientCertIfGiven, ClientCAs: <pool with the mesh root>}; the
// renew handler reads the verified chain and refuses requests without one.
//
// Package enrolltest holds a test CA and a real signing Issuer for tests of
// anything that enrolls.
//
// The package imports internal/mesh, internal/meshapi, internal/keylock and internal/store
// only; it must not import internal/certificate (the certificate manager
// satisfies [Issuer]), internal/meshclient, internal/agent, internal/api or
// anything under cmd/.
package enroll
