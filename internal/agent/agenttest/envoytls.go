package agenttest

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// verifyUpstream checks an upstream's certificate chain as Envoy's default
// certificate validator does with vc (envoy
// source/common/tls/cert_validator/default_validator.cc): the chain must
// lead to a trusted CA, and when vc has match_typed_subject_alt_names one
// of the leaf's SANs of a matcher's type must match it. Nothing else: Envoy
// checks no host name (SNI is not a name check) and no extended key usage
// (it sets no X509 purpose), so neither does this.
func verifyUpstream(chain []*x509.Certificate, trusted *x509.CertPool, vc *tlsv3.CertificateValidationContext) error {
	if len(chain) == 0 {
		return errors.New("upstream sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	leaf := chain[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: trusted, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("TLS_error: CERTIFICATE_VERIFY_FAILED: %w", err)
	}
	matchers := vc.GetMatchTypedSubjectAltNames()
	if len(matchers) == 0 {
		return nil
	}
	for _, m := range matchers {
		for _, san := range sansOfType(leaf, m.GetSanType()) {
			ok, err := stringMatch(m.GetMatcher(), san, m.GetSanType() == tlsv3.SubjectAltNameMatcher_DNS)
			if err != nil {
				return err
			}
			if ok {
				return nil
			}
		}
	}
	return fmt.Errorf("TLS_error: verify cert failed: SAN matcher (the certificate %q has URIs %q, DNS names %q, IPs %v)", leaf.Subject.CommonName, uriStrings(leaf), leaf.DNSNames, leaf.IPAddresses)
}

func sansOfType(c *x509.Certificate, t tlsv3.SubjectAltNameMatcher_SanType) []string {
	switch t {
	case tlsv3.SubjectAltNameMatcher_URI:
		return uriStrings(c)
	case tlsv3.SubjectAltNameMatcher_DNS:
		return c.DNSNames
	case tlsv3.SubjectAltNameMatcher_EMAIL:
		return c.EmailAddresses
	case tlsv3.SubjectAltNameMatcher_IP_ADDRESS:
		var out []string
		for _, ip := range c.IPAddresses {
			out = append(out, ip.String())
		}
		return out
	}
	return nil
}

func uriStrings(c *x509.Certificate) []string {
	var out []string
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	return out
}

// stringMatch is Envoy's StringMatcher on a SAN; for DNS SANs an exact
// matcher also matches a wildcard SAN (*.example.com matches
// a.example.com), as Envoy's dnsNameMatch does.
func stringMatch(m *matcherv3.StringMatcher, san string, dns bool) (bool, error) {
	v, fold := san, m.GetIgnoreCase()
	cmp := func(pattern string, f func(s, p string) bool) bool {
		if fold {
			return f(strings.ToLower(v), strings.ToLower(pattern))
		}
		return f(v, pattern)
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		if dns && strings.HasPrefix(v, "*.") {
			name, _, _ := strings.Cut(p.Exact, ".")
			return name != "" && !strings.Contains(name, ":") && net.ParseIP(p.Exact) == nil &&
				strings.EqualFold(p.Exact[len(name):], v[1:]), nil
		}
		return cmp(p.Exact, func(s, p string) bool { return s == p }), nil
	case *matcherv3.StringMatcher_Prefix:
		return cmp(p.Prefix, strings.HasPrefix), nil
	case *matcherv3.StringMatcher_Suffix:
		return cmp(p.Suffix, strings.HasSuffix), nil
	case *matcherv3.StringMatcher_Contains:
		return cmp(p.Contains, strings.Contains), nil
	case *matcherv3.StringMatcher_SafeRegex:
		re, err := regexp.Compile(`^(?:` + p.SafeRegex.GetRegex() + `)$`)
		if err != nil {
			return false, fmt.Errorf("SAN matcher regex %q: %w", p.SafeRegex.GetRegex(), err)
		}
		return re.MatchString(v), nil
	}
	return false, fmt.Errorf("SAN matcher %v: no pattern", m)
}
