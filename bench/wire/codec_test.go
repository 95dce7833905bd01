package wire

import (
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/osm-vm/osm-vm/bench/workload"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
)

// The floor's hand-built responses are valid DiscoveryResponses, and the
// fleet's Envelope parser reads what proto.Marshal writes.
func TestEnvelopeRoundTrip(t *testing.T) {
	w := workload.Workload{Services: 4, Endpoints: 3, Proxies: 1}
	var anys [][]byte
	var want discovery.DiscoveryResponse
	want.VersionInfo, want.TypeUrl, want.Nonce = "e7", resource.EndpointType, "e7"
	for i := range w.Services {
		a, err := anypb.New(w.CLA(i, workload.ChangedAddr(i)))
		if err != nil {
			t.Fatal(err)
		}
		b, err := proto.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		anys = append(anys, b)
		want.Resources = append(want.Resources, a)
	}
	b := AppendResponse(nil, "e7", resource.EndpointType, anys)
	var got discovery.DiscoveryResponse
	if err := proto.Unmarshal(b, &got); err != nil {
		t.Fatalf("floor response does not unmarshal: %v", err)
	}
	if diff := cmp.Diff(&got, &want, protocmp.Transform()); diff != "" {
		t.Errorf("floor response (-got +want):\n%s", diff)
	}

	marshalled, err := proto.Marshal(&want)
	if err != nil {
		t.Fatal(err)
	}
	env, err := ParseEnvelope(marshalled)
	if err != nil {
		t.Fatal(err)
	}
	if env.Version != "e7" || env.Nonce != "e7" || env.TypeURL != resource.EndpointType || len(env.Resources) != w.Services || env.Size != len(marshalled) {
		t.Errorf("envelope = %q %q %q %d resources, %d bytes; want e7 e7 %s %d resources, %d bytes",
			env.Version, env.Nonce, env.TypeURL, len(env.Resources), env.Size, resource.EndpointType, w.Services, len(marshalled))
	}
	v, err := AnyValue(env.Resources[2])
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(v), len(want.Resources[2].GetValue()); got != want {
		t.Errorf("Any value size = %d, want %d", got, want)
	}
	if _, err := ParseEnvelope([]byte{0x0a, 0x05, 'x'}); err == nil {
		t.Error("truncated response parsed without an error")
	}
}
