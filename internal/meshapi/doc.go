// Package meshapi holds the JSON documents of osm-server's HTTPS API, one
// Go type per document, shared by the server (internal/enroll, internal/api,
// internal/spec's handler) and its clients (internal/meshclient, osm-agent,
// the osm-server CLI subcommands), and the protocol rules both sides must
// agree on: the key policy of a proxy's CSR ([GenerateKey], [CheckKey]) and
// the CA pin of --ca-cert-hash ([CAHash], [ParseCAHash]).
//
// Routes and their documents:
//
//	POST   /api/v1/enroll              EnrollRequest -> CertificateResponse
//	POST   /api/v1/renew               RenewRequest  -> CertificateResponse (mTLS)
//	GET    /api/v1/agent/config        -> AgentConfig (mTLS)
//	GET    /api/v1/ca                  -> CAInfo
//	POST   /api/v1/tokens              CreateTokenRequest -> CreatedToken (admin)
//	GET    /api/v1/tokens              -> TokenList (admin)
//	DELETE /api/v1/tokens/{id}         -> Token (admin)
//	GET    /api/v1/proxies             -> ProxyList (admin)
//	POST   /api/v1/proxies/{cn}/revoke -> ProxyRevoked (admin)
//
// Every error response is an [ErrorBody]. The mesh specification routes
// (/api/v1/spec/...) carry internal/spec's documents.
//
// The package imports internal/mesh of osm-vm and nothing else, so a client
// that links it links no server code (deps_test.go enforces this).
package meshapi
