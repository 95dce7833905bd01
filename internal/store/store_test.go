package store_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/store/storetest"
)

// The contract's conformance suite on Memory (boltstore and consulstore
// run it on theirs).
func TestMemory(t *testing.T) {
	storetest.Run(t, storetest.Harness{New: func(*testing.T) store.Store { return store.NewMemory() }})
}

// The metrics wrapper osm-server puts around its store keeps the store's
// own transaction limits: the claim writer batches by them.
func TestInstrumentKeepsTxnLimits(t *testing.T) {
	for _, want := range []int{store.MaxTxnOps, 1024} {
		s, err := store.Instrument(store.NewMemoryWithLimits(want, store.MaxTxnBytes), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		if ops, bytes := store.TxnLimits(s); ops != want || bytes != store.MaxTxnBytes {
			t.Errorf("TxnLimits of the instrumented store = %d ops, %d bytes; want %d, %d", ops, bytes, want, store.MaxTxnBytes)
		}
	}
}
