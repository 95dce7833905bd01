package peer

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/osm-vm/osm-vm/bench/workload"
)

func TestEndpointsFileKeepsEarlierChanges(t *testing.T) {
	// L and F keep every change made so far; so must O's file, or a
	// change to service 1 after one to service 0 would also move service
	// 0 back (an all-proxy change measured as a scoped one).
	w := workload.Workload{Services: 3, Endpoints: 2, Proxies: 3}
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	if err := prepareEndpoints(path, w, map[int]int{0: 1, 1: 2}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path + ".tmp")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []netip.Addr{workload.ChangedAddr(1), workload.ChangedAddr(2), w.EndpointAddr(0, 1), w.EndpointAddr(2, 0)} {
		if !bytes.Contains(b, []byte("ip: "+want.String()+",")) {
			t.Errorf("endpoints file has no endpoint %s:\n%s", want, b)
		}
	}
	for _, gone := range []netip.Addr{w.EndpointAddr(0, 0), w.EndpointAddr(1, 0)} {
		if bytes.Contains(b, []byte("ip: "+gone.String()+",")) {
			t.Errorf("endpoints file still has moved endpoint %s:\n%s", gone, b)
		}
	}
}
