package fakearm

// The fake's auth: a token credential that fails when the fixture says so.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

func (m *Model) applyCredentialError() {
	m.mu.Lock()
	msg := m.fx.CredentialError
	m.mu.Unlock()
	if msg == "" {
		m.cred.SetError(nil)
	} else {
		m.cred.SetError(errors.New(msg))
	}
}

// Credential is azcore/fake's TokenCredential made safe for concurrent use
// and with tokens that expire at once, so every request asks for one and a
// credential failure shows on the next request rather than a day later.
type Credential struct {
	mu   sync.Mutex
	fake azfake.TokenCredential
}

// SetError makes GetToken fail with err; nil makes it succeed again.
func (c *Credential) SetError(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fake = azfake.TokenCredential{}
	if err != nil {
		c.fake.SetError(err)
	}
}

// GetToken implements azcore.TokenCredential.
func (c *Credential) GetToken(ctx context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tok, err := c.fake.GetToken(ctx, opts)
	if err != nil {
		return tok, err
	}
	tok.ExpiresOn = time.Now()
	return tok, nil
}
