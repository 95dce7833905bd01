package agent

// The certificate files of an ingress gateway machine: the agent checks
// that every HTTPS listener of its Gateway has them, usable, and reports
// what is wrong to the server (the Gateway's status), in its status file
// and in its metrics.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
)

// GatewayCertFiles returns the PEM files of the certificate Secret ns/name
// under dir: <dir>/<ns>/<name>/tls.crt and tls.key, as osm-server renders
// them into the gateway's Envoy listeners.
func GatewayCertFiles(dir, namespace, name string) (chain, key string) {
	d := filepath.Join(dir, namespace, name)
	return filepath.Join(d, "tls.crt"), filepath.Join(d, "tls.key")
}

// CheckGatewayCertificates checks the certificate files of every HTTPS
// listener (and TLS listener in Terminate mode) of gc under dir (see GatewayCertFiles) and returns a problem per
// listener whose files are missing, unreadable, not a certificate and its
// key, expired, or not for the listener's hostname; none when all are
// good. now is the time expiry is judged at.
func CheckGatewayCertificates(dir string, gc meshapi.GatewayConfig, now time.Time) []meshapi.CertificateProblem {
	var out []meshapi.CertificateProblem
	for _, l := range gc.Listeners {
		if l.CertificateName == "" {
			continue
		}
		if err := checkListenerCertificate(dir, l, now); err != nil {
			out = append(out, meshapi.CertificateProblem{Listener: l.Name, Error: err.Error()})
		}
	}
	return out
}

func checkListenerCertificate(dir string, l meshapi.GatewayListener, now time.Time) error {
	chainFile, keyFile := GatewayCertFiles(dir, l.CertificateNamespace, l.CertificateName)
	ref := fmt.Sprintf("listener %s (port %d, certificateRef Secret %s/%s)", l.Name, l.Port, l.CertificateNamespace, l.CertificateName)
	chainPEM, err := readCertFile(chainFile, "the certificate chain, PEM, leaf first")
	if err != nil {
		return fmt.Errorf("%s: %w", ref, err)
	}
	keyPEM, err := readCertFile(keyFile, "the certificate's private key, PEM")
	if err != nil {
		return fmt.Errorf("%s: %w", ref, err)
	}
	pair, err := tls.X509KeyPair(chainPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("%s: %s and %s are not a certificate and its private key: %v (write the chain, leaf first, to tls.crt and the leaf's key to tls.key)", ref, chainFile, keyFile, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("%s: %s: %w", ref, chainFile, err)
	}
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Errorf("%s: the certificate in %s expired at %s: replace it with a current one", ref, chainFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("%s: the certificate in %s is not valid before %s: check the machine's clock or the certificate", ref, chainFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	if !certCovers(leaf, l.Hostname) {
		return fmt.Errorf("%s: the certificate in %s is for %s, not the listener's hostname %s: get one whose subjectAltName covers %s", ref, chainFile, strings.Join(leaf.DNSNames, ", "), l.Hostname, l.Hostname)
	}
	return nil
}

// readCertFile reads one certificate file, the error naming the file, what
// it should hold and the fix.
func readCertFile(path, holds string) ([]byte, error) {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s does not exist: put %s there (write it to a temporary name in that directory and rename it into place)", path, holds)
	case errors.Is(err, fs.ErrPermission):
		return nil, fmt.Errorf("%s is not readable by the agent (and Envoy): make it readable by the user they run as", path)
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}

// certCovers reports whether the certificate serves host: any when host is
// empty; a wildcard listener hostname only by the same wildcard.
func certCovers(leaf *x509.Certificate, host string) bool {
	switch {
	case host == "":
		return true
	case strings.HasPrefix(host, "*."):
		return slices.ContainsFunc(leaf.DNSNames, func(n string) bool { return strings.EqualFold(n, host) })
	}
	return leaf.VerifyHostname(host) == nil
}

// checkGatewayCertificates checks the certificate files of the Gateway the
// agent last learned, records the result in its status (and metrics) and
// logs what changed. It returns the problems, nil when all are good.
func (a *Agent) checkGatewayCertificates() []meshapi.CertificateProblem {
	a.mu.Lock()
	gc := a.gateway
	a.mu.Unlock()
	if gc == nil {
		return nil
	}
	problems := CheckGatewayCertificates(a.cfg.GatewayCertDir, *gc, time.Now())
	var before []meshapi.CertificateProblem
	a.updateStatus(func(s *Status) {
		before, s.GatewayCertificateProblems = s.GatewayCertificateProblems, problems
	})
	for _, p := range problems {
		if !slices.Contains(before, p) {
			a.log.Error("gateway listener certificate unusable: Envoy cannot serve this listener's port until it is fixed", "listener", p.Listener, "err", p.Error)
		}
	}
	if len(before) > 0 && len(problems) == 0 {
		a.log.Info("gateway listener certificates usable", "gateway", gc.Gateway, "dir", a.cfg.GatewayCertDir)
	}
	return problems
}

// reportGatewayCertificates sends the problems found (an empty report
// clears the last) to every osm-server replica the agent knows: its Envoy
// may be connected to any of them, and each shows in status and renders
// what was reported to it. It fails when no server took the report; a
// replica that did not is named in the log, and sent it again at the next
// check.
func (a *Agent) reportGatewayCertificates(ctx context.Context, problems []meshapi.CertificateProblem) error {
	id, _ := a.identity()
	cert, err := id.TLS()
	if err != nil {
		return err
	}
	servers := a.reportServers()
	var errs []error
	for _, s := range servers {
		if err := meshclient.SendGatewayReport(ctx, s, id.CAPEM, cert, meshapi.GatewayReport{Certificates: problems}); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s, err))
		}
	}
	switch {
	case len(errs) == len(servers):
		return errors.Join(errs...)
	case len(errs) > 0:
		a.log.Warn("gateway certificate report not taken by every osm-server replica; sent again at the next check", "err", errors.Join(errs...))
	}
	return nil
}

// reportServers are the API servers a report goes to: every osm-server
// replica the agent knows (its proxy may be connected to any of them, and
// each shows what was reported to it), or the configured servers before
// it learned the replicas.
func (a *Agent) reportServers() []string {
	a.mu.Lock()
	var servers []string
	for _, r := range a.replicas {
		if r.API != "" && !slices.Contains(servers, r.API) {
			servers = append(servers, r.API)
		}
	}
	a.mu.Unlock()
	if len(servers) == 0 {
		servers = a.apiServers()
	}
	return servers
}

// watchGatewayCertificates checks the certificate files again, and reports
// them, soon after anything changes under the certificate directory (a
// file written, renamed into place or removed), rather than at the next
// poll, until ctx is done. It watches the directory of every certificate
// of the Gateway and the directories above them up to the certificate
// directory, so that a directory created later is watched too.
func (a *Agent) watchGatewayCertificates(ctx context.Context) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		a.log.Warn("gateway certificate files are checked at each poll only: cannot watch them", "err", err)
		return
	}
	defer w.Close()
	watched := map[string]bool{}
	rewatch := func() {
		a.mu.Lock()
		gc := a.gateway
		a.mu.Unlock()
		want := map[string]bool{a.cfg.GatewayCertDir: true}
		if gc != nil {
			for _, l := range gc.Listeners {
				if l.CertificateName != "" {
					crt, _ := GatewayCertFiles(a.cfg.GatewayCertDir, l.CertificateNamespace, l.CertificateName)
					want[filepath.Dir(crt)], want[filepath.Dir(filepath.Dir(crt))] = true, true
				}
			}
		}
		for d := range want {
			if !watched[d] && w.Add(d) == nil { // a directory that does not exist yet is added once its parent reports it
				watched[d] = true
			}
		}
		for d := range watched {
			if !want[d] {
				_ = w.Remove(d)
				delete(watched, d)
			}
		}
	}
	rewatch()
	// Changes come in bursts (a temporary file written, then renamed):
	// one check a moment after the last.
	const settle = 200 * time.Millisecond
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.gatewayChanged:
			rewatch()
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
				delete(watched, ev.Name) // a watched directory that went
			}
			rewatch()
			timer.Reset(settle)
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			a.log.Warn("watching the gateway certificate files", "err", err)
		case <-timer.C:
			if problems, ok := a.checkGatewayCertificatesIfKnown(); ok {
				if err := a.reportGatewayCertificates(ctx, problems); err != nil && ctx.Err() == nil {
					a.log.Warn("gateway certificate report not sent; sent again at the next poll", "err", err)
				}
			}
		}
	}
}

// checkGatewayCertificatesIfKnown checks when the Gateway is known.
func (a *Agent) checkGatewayCertificatesIfKnown() ([]meshapi.CertificateProblem, bool) {
	a.mu.Lock()
	known := a.gateway != nil
	a.mu.Unlock()
	if !known {
		return nil, false
	}
	return a.checkGatewayCertificates(), true
}
