package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/osm-vm/osm-vm/internal/agent/hostsfile"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
)

// pollLoop fetches the server config now and every PollInterval; while the
// server is unreachable it retries with backoff.
func (a *Agent) pollLoop(ctx context.Context) {
	backoff := a.opts.RetryInitial
	for {
		wait := a.cfg.PollInterval
		if err := a.pollOnce(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			a.log.Error("agent config from the server failed; retrying", "err", err, "backoff", backoff)
			a.updateStatus(func(s *Status) { s.LastConfigError = err.Error() })
			wait = min(backoff, a.cfg.PollInterval)
			backoff = min(2*backoff, a.opts.RetryMax)
		} else {
			backoff = a.opts.RetryInitial
			a.updateStatus(func(s *Status) { s.LastConfigError, s.LastConfig = "", time.Now() })
		}
		a.writeStatus()
		if !sleep(ctx, wait) {
			return
		}
	}
}

func (a *Agent) pollOnce(ctx context.Context) error {
	id, leaf := a.identity()
	cert, err := id.TLS()
	if err != nil {
		return err
	}
	sc, err := failover(ctx, a, func(ctx context.Context, server string) (meshapi.AgentConfig, error) {
		return meshclient.FetchAgentConfig(ctx, server, id.CAPEM, cert)
	})
	if err != nil {
		return err
	}
	if sc.Identity != "" && sc.Identity != leaf.Subject.CommonName {
		return fmt.Errorf("agent config: server sent the config of %s, this machine is %s", sc.Identity, leaf.Subject.CommonName)
	}
	var errs []error
	running := a.xdsAddresses()
	if a.setServers(sc.XDSAddress, sc.Replicas) {
		now := a.xdsAddresses()
		if a.localXDS != nil {
			a.localXDS.SetUpstreams(now)
		}
		if err := a.writeState(); err != nil {
			errs = append(errs, err)
		}
		if err := a.writeProxyFiles(); err != nil {
			errs = append(errs, err)
		} else if !slices.ContainsFunc(running, func(s string) bool { return slices.Contains(now, s) }) {
			// The running proxy names no current server: restart it on
			// the new bootstrap. A proxy that is not running reads it
			// when it starts (the supervisor drops the request then).
			a.sup.Restart("the xDS servers changed to " + strings.Join(now, ", "))
		} else {
			// It still reaches a current server (and fails over along
			// the servers it names); the new list is used from its next
			// start, not worth a restart of the machine's traffic.
			a.log.Info("the xDS servers changed; the proxy uses the new list from its next start", "xdsServers", now)
		}
	}
	if err := a.applyHosts(sc.Hosts); err != nil {
		errs = append(errs, err)
	}
	if err := a.writeServiceCertificate(sc.ServiceCertificate); err != nil {
		errs = append(errs, err)
	}
	if a.cfg.Gateway != "" {
		if err := a.gatewayConfigArrived(ctx, sc.Gateway); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// gatewayConfigArrived keeps the Gateway the server sent (nil: it names
// none, the Gateway is not applied), checks its certificate files and
// reports the result to the server.
func (a *Agent) gatewayConfigArrived(ctx context.Context, gc *meshapi.GatewayConfig) error {
	a.mu.Lock()
	changed := !reflect.DeepEqual(a.gateway, gc)
	a.gateway = gc
	a.mu.Unlock()
	if changed {
		select {
		case a.gatewayChanged <- struct{}{}:
		default:
		}
		if err := a.writeState(); err != nil {
			return err
		}
	}
	if gc == nil {
		a.updateStatus(func(s *Status) { s.GatewayCertificateProblems = nil })
		return nil
	}
	return a.reportGatewayCertificates(ctx, a.checkGatewayCertificates())
}

func (a *Agent) applyHosts(hosts []meshapi.HostEntry) error {
	entries := make([]hostsfile.Entry, 0, len(hosts))
	for _, h := range hosts {
		ip, err := netip.ParseAddr(h.IP)
		if err != nil {
			return fmt.Errorf("agent config: host %s: bad IP %q", h.Hostname, h.IP)
		}
		entries = append(entries, hostsfile.Entry{Hostname: h.Hostname, IP: ip})
	}
	changed, err := hostsfile.Update(a.cfg.HostsFile, entries)
	if err != nil {
		return err
	}
	if changed {
		a.log.Info("updated mesh host names", "file", a.cfg.HostsFile, "hosts", len(entries))
	}
	a.updateStatus(func(s *Status) { s.Hosts = len(entries) })
	return nil
}

// writeServiceCertificate writes service.crt, service.key (0600) and
// service-ca.crt for gRPC's file_watcher when they changed; the key is
// written first and the certificate last so a watcher that reads between
// renames sees at worst the old certificate with the new key rejected, and
// retries on its next refresh.
func (a *Agent) writeServiceCertificate(sc meshapi.ServiceCertificate) error {
	if sc.CertificatePEM == "" {
		return nil
	}
	if _, err := tls.X509KeyPair([]byte(sc.CertificatePEM), []byte(sc.PrivateKeyPEM)); err != nil {
		return fmt.Errorf("agent config: service certificate: %w", err)
	}
	files := []struct {
		name string
		data string
		mode os.FileMode
	}{
		{ServiceCAFile, sc.CAPEM, 0o644},
		{ServiceKeyFile, sc.PrivateKeyPEM, 0o600},
		{ServiceCertFile, sc.CertificatePEM, 0o644},
	}
	changed := false
	for _, f := range files {
		if old, err := os.ReadFile(a.path(f.name)); err == nil && bytes.Equal(old, []byte(f.data)) {
			continue
		}
		if err := writeAtomic(a.path(f.name), []byte(f.data), f.mode); err != nil {
			return err
		}
		changed = true
	}
	if changed {
		a.log.Info("wrote service certificate", "expires", sc.Expires)
	}
	a.updateStatus(func(s *Status) { s.ServiceCertificateExpires = sc.Expires })
	return nil
}
