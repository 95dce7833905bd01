package meshapi

import (
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// CAInfo is the body of GET /api/v1/ca.
type CAInfo struct {
	PEM  string `json:"pem"`
	Hash string `json:"hash"`
}

// CreateTokenRequest is the body of POST /api/v1/tokens.
type CreateTokenRequest struct {
	Service        mesh.MeshService `json:"service"`
	ServiceAccount string           `json:"serviceAccount,omitempty"`
	// TTL is a Go duration such as "24h"; empty means the server's default
	// (24h).
	TTL  string `json:"ttl,omitempty"`
	Uses int    `json:"uses,omitempty"`
}

// Token is a join token's record. The secret is never part of it.
type Token struct {
	// ID is the public short ID: the first 8 hex characters of the hash.
	ID             string           `json:"id"`
	Service        mesh.MeshService `json:"service"`
	ServiceAccount string           `json:"serviceAccount"`
	Created        time.Time        `json:"created"`
	Expires        time.Time        `json:"expires"`
	UsesTotal      int              `json:"usesTotal"`
	UsesLeft       int              `json:"usesLeft"`
	Revoked        bool             `json:"revoked,omitempty"`
	RevokedAt      *time.Time       `json:"revokedAt,omitempty"`
}

// CreatedToken is the answer to POST /api/v1/tokens: the secret, shown
// this once, and the record.
type CreatedToken struct {
	Secret string `json:"secret"`
	Token  Token  `json:"token"`
}

// TokenStatus is a token with its state as the server sees it now: valid,
// expired, revoked or used up.
type TokenStatus struct {
	Token
	State string `json:"state"`
}

// TokenList is the answer to GET /api/v1/tokens, newest first.
type TokenList struct {
	Items []TokenStatus `json:"items"`
}

// Proxy is an enrolled proxy as GET /api/v1/proxies lists it.
type Proxy struct {
	CN             string              `json:"cn"`
	Service        mesh.MeshService    `json:"service"`
	ServiceAccount mesh.ServiceAccount `json:"serviceAccount"`
	// State is unclaimed, claimed or revoked.
	State string `json:"state"`
	// Serial of the current certificate, lower-case hex.
	Serial   string    `json:"serial"`
	Issued   time.Time `json:"issued"`
	Expires  time.Time `json:"expires"`
	LastSeen time.Time `json:"lastSeen,omitzero"`
	// Overlap is the one earlier certificate still accepted, until it
	// expires (the renewal overlap); nil when there is none.
	Overlap *OverlapCertificate `json:"overlap,omitempty"`
}

// OverlapCertificate names a proxy's earlier certificate that is still
// accepted until it expires.
type OverlapCertificate struct {
	Serial  string    `json:"serial"`
	Expires time.Time `json:"expires"`
}

// ProxyList is the answer to GET /api/v1/proxies.
type ProxyList struct {
	Items []Proxy `json:"items"`
}

// ProxyRevoked is the answer to POST /api/v1/proxies/{cn}/revoke.
type ProxyRevoked struct {
	CN    string `json:"cn"`
	State string `json:"state"`
}
