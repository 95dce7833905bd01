package certificate

import (
	"context"
	"crypto/elliptic"
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/store/boltstore"
)

// The identity work of an xDS join on a real bbolt file: VerifyProxyChain when
// the stream opens, ClaimVerifiedProxy of the record it returned at its
// first request (until issue 26's second round, ClaimProxy, which read the
// record again). Only the first claim
// writes; the rest are reconnects, which write nothing.
func BenchmarkJoinIdentity(b *testing.B) {
	for _, tc := range []struct {
		name string
		run  bool
	}{
		{name: "claim-written-before-return"}, // no Run: ClaimProxy writes itself
		{name: "claim-written-by-Run", run: true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			st, err := boltstore.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			clk := newClock()
			m, err := New(b.Context(), nil, st, Options{Now: clk.Now})
			if err != nil {
				b.Fatal(err)
			}
			certPEM, _, err := m.IssueProxy(b.Context(), csrFor(b, ecKey(b, elliptic.P256()), nil), bookstoreSvc, bookstoreSA)
			if err != nil {
				b.Fatal(err)
			}
			peer, err := parseCertPEM(certPEM)
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(b.Context())
			done := make(chan error, 1)
			if tc.run {
				go func() { done <- m.Run(ctx) }()
			} else {
				close(done)
			}
			for b.Loop() {
				// A minute, then a second per iteration expired the
				// certificate (7 days) in long runs.
				clk.Advance(10 * time.Millisecond)
				rec, err := m.VerifyProxyChain(ctx, []*x509.Certificate{peer, m.ca.cert})
				if err != nil {
					b.Fatal(err)
				}
				if err := m.ClaimVerifiedProxy(ctx, rec); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			cancel()
			<-done
		})
	}
}

// The first proxy of a service on a fresh server: its service
// certificate is issued, stored and read back (on a memory store, so the
// figure is the manager's work, not the fsync).
func BenchmarkIssueServiceCertificate(b *testing.B) {
	m, err := New(b.Context(), nil, store.NewMemory(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		sa := mesh.ServiceAccount{Namespace: "bench", Name: fmt.Sprintf("svc-%d", i)}
		if _, err := m.issueService(b.Context(), sa, 0, false); err != nil {
			b.Fatal(err)
		}
	}
}

// A fleet's first connections to a fresh server, as the manager sees them:
// each proxy's record is verified when its stream opens and claimed at its
// first request, and the claims are written as Run's writer writes them
// (MaxTxnOps to a transaction) and read back. On a memory store, so the
// figure is the manager's work (reads, decodes, encodes), not the fsync.
func BenchmarkFirstClaims(b *testing.B) {
	ctx := b.Context()
	st := store.NewMemory()
	m, err := New(ctx, nil, st, Options{})
	if err != nil {
		b.Fatal(err)
	}
	const n = store.MaxTxnOps
	var peers [][]*x509.Certificate
	var unclaimed []store.Op // each record as enrolled
	for range n {
		certPEM, cn, err := m.IssueProxy(ctx, csrFor(b, ecKey(b, elliptic.P256()), nil), bookstoreSvc, bookstoreSA)
		if err != nil {
			b.Fatal(err)
		}
		peer, err := parseCertPEM(certPEM)
		if err != nil {
			b.Fatal(err)
		}
		peers = append(peers, []*x509.Certificate{peer, m.ca.cert})
		raw, _, err := st.Get(ctx, proxyKey(cn))
		if err != nil {
			b.Fatal(err)
		}
		unclaimed = append(unclaimed, store.Set(proxyKey(cn), store.AnyVersion, raw))
	}
	m.claimMu.Lock()
	m.claimWriters++ // claims wait for flushAllClaims, as for Run's writer
	m.claimMu.Unlock()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		if _, err := st.Txn(ctx, unclaimed...); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for _, chain := range peers {
			rec, err := m.VerifyProxyChain(ctx, chain)
			if err != nil {
				b.Fatal(err)
			}
			if err := m.ClaimVerifiedProxy(ctx, rec); err != nil {
				b.Fatal(err)
			}
		}
		if err := m.flushAllClaims(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/proxy")
}
