package agent

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/osm-vm/osm-vm/internal/meshclient"
)

// RenewAt returns when a certificate held since obtained is renewed: two
// thirds into its validity, counted from when it was obtained if that is
// later than NotBefore. The server backdates NotBefore (a minute, for clock
// skew), which for a short certificate would otherwise put the renewal time
// in the past and renew in a loop.
func RenewAt(c *x509.Certificate, obtained time.Time) time.Time {
	start := c.NotBefore
	if obtained.After(start) {
		start = obtained
	}
	return start.Add(c.NotAfter.Sub(start) * 2 / 3)
}

// renewLoop renews the proxy certificate at two thirds of its lifetime.
// While the server is unreachable it retries with backoff and says, on
// every failure, how long the current certificate has left. A server that
// refuses the renewal as too early (429 RenewalTooEarly) is asked again
// after its Retry-After, not on the failure backoff.
func (a *Agent) renewLoop(ctx context.Context) {
	for {
		_, leaf := a.identity()
		if !sleep(ctx, time.Until(RenewAt(leaf, time.Now()))) {
			return
		}
		backoff := a.opts.RetryInitial
		// One key per renewal, kept across its retries: when the server
		// renewed but its answer was lost, this agent still holds only the
		// certificate that renewal replaced, and the server renews with
		// that one only when asked again for the same key.
		req := &CertRequest{Dir: a.cfg.DataDir}
		for {
			err := a.renewOnce(ctx, req)
			if err == nil {
				a.countRenewal(renewedOK)
				break
			}
			if ctx.Err() != nil {
				return
			}
			if wait, ok := meshclient.RenewalTooEarly(err); ok {
				a.countRenewal(renewedTooEarly)
				// The server renewed this proxy recently (a clock is
				// off: a lost answer is asked for again with the same
				// key, which is not refused): the certificate held stays
				// valid; renew when the server allows, with
				// a little jitter so agents do not come back together.
				wait += mrand.N(wait/10 + time.Second)
				a.log.Info("server says the proxy certificate was renewed too recently; renewing when it allows", "retryIn", wait.Round(time.Second).String(), "expiresIn", time.Until(leaf.NotAfter).Round(time.Second).String())
				if !sleep(ctx, wait) {
					return
				}
				continue
			}
			a.countRenewal(renewedError)
			left := time.Until(leaf.NotAfter).Round(time.Second)
			a.updateStatus(func(s *Status) { s.LastRenewError = err.Error() })
			a.writeStatus()
			if left <= 0 {
				a.log.Error("proxy certificate EXPIRED and renewal keeps failing: the proxy cannot reach xDS until the server answers; if it never does, enroll again with a new join token",
					"err", err, "expiredAt", leaf.NotAfter, "backoff", backoff)
			} else {
				a.log.Error("proxy certificate renewal failed; retrying", "err", err, "expiresIn", left.String(), "backoff", backoff)
			}
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, a.opts.RetryMax)
		}
	}
}

// renewOnce renews with req's key and replaces the identity files
// atomically; the proxy picks them up from its watched directory.
func (a *Agent) renewOnce(ctx context.Context, req *CertRequest) error {
	id, _ := a.identity()
	cert, err := id.TLS()
	if err != nil {
		return err
	}
	_, _, err = req.Obtain(ctx, id.CAPEM, func(ctx context.Context, key crypto.Signer) (meshclient.Result, error) {
		return failover(ctx, a, func(ctx context.Context, server string) (meshclient.Result, error) {
			return a.enroller.Renew(ctx, server, id.CAPEM, cert, key)
		})
	})
	var saveErr *SaveError
	if errors.As(err, &saveErr) {
		return fmt.Errorf("save renewed certificate: %w", err)
	}
	if err != nil {
		return err
	}
	nid, leaf, err := loadCurrentIdentity(a.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("renewed certificate: %w", err)
	}
	a.setIdentity(nid, leaf)
	a.updateStatus(func(s *Status) { s.LastRenewError = ""; s.LastRenewal = time.Now() })
	a.writeStatus()
	a.log.Info("renewed proxy certificate", "expires", leaf.NotAfter, "renewAt", RenewAt(leaf, time.Now()))
	return nil
}
