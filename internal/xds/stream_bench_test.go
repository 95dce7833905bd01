package xds

import (
	"testing"
)

// BenchmarkStreamOpenClose measures the server's stream path: a stream
// of a proxy already connected (another of its streams stays open, so no
// connect or disconnect notice is told) is opened on a live connection,
// authenticated, admitted, asks for clusters, is answered from the cache
// and ends.
func BenchmarkStreamOpenClose(b *testing.B) {
	e := startEnvWith(b, envOptions{})
	cert := e.enroll(b, "bookbuyer")
	cn := cnOf(b, cert)
	conn := e.conn(b, cert)
	if _, err := e.openStream(b, conn, cn); err != nil { // held open
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		cancel, err := e.openStream(b, conn, cn)
		if err != nil {
			b.Fatal(err)
		}
		cancel()
	}
}
