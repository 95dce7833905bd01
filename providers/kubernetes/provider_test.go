package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/osm-vm/osm-vm/provider"
)

// step changes the fake cluster and says what every listed mesh service
// must then look like, both to List calls and to a watcher folding events.
type step struct {
	apply  []runtime.Object
	remove []runtime.Object
	want   map[string][]string
}

var (
	http8080 = ports(slicePortOf("http", 8080))
	webSvc   = service("default", "web", svcPort("http", 80, intstr.FromString("web")))
)

func TestEndpointsFromFakeCluster(t *testing.T) {
	cases := []struct {
		name  string
		cfg   string
		steps []step
	}{
		{
			name: "add",
			steps: []step{{
				apply: []runtime.Object{webSvc, slice("default", "web-1", "web", http8080,
					endpoint("10.0.0.1", ready(true), pod("web-a"), zone("z1"), node("n1")),
					endpoint("10.0.0.2", pod("web-b")))}, // nil ready is ready
				want: map[string][]string{"default/web": {
					"10.0.0.1:8080 k8s-pod=web-a node=n1 port-name=http zone=z1",
					"10.0.0.2:8080 k8s-pod=web-b port-name=http",
				}},
			}},
		},
		{
			name: "service without slices has no endpoints yet",
			steps: []step{{
				apply: []runtime.Object{webSvc},
				want:  map[string][]string{"default/web": {}},
			}},
		},
		{
			name: "scale out and in",
			steps: []step{
				{
					apply: []runtime.Object{webSvc, slice("default", "web-1", "web", http8080, endpoint("10.0.0.1"))},
					want:  map[string][]string{"default/web": {"10.0.0.1:8080 port-name=http"}},
				},
				{
					apply: []runtime.Object{slice("default", "web-1", "web", http8080, endpoint("10.0.0.1"), endpoint("10.0.0.2"), endpoint("10.0.0.3"))},
					want:  map[string][]string{"default/web": {"10.0.0.1:8080 port-name=http", "10.0.0.2:8080 port-name=http", "10.0.0.3:8080 port-name=http"}},
				},
				{
					apply: []runtime.Object{slice("default", "web-1", "web", http8080, endpoint("10.0.0.3"))},
					want:  map[string][]string{"default/web": {"10.0.0.3:8080 port-name=http"}},
				},
				{
					apply: []runtime.Object{slice("default", "web-1", "web", http8080)},
					want:  map[string][]string{"default/web": {}},
				},
			},
		},
		{
			name: "readiness flips",
			steps: []step{
				{
					apply: []runtime.Object{webSvc, slice("default", "web-1", "web", http8080, endpoint("10.0.0.1", ready(true)), endpoint("10.0.0.2", ready(true)))},
					want:  map[string][]string{"default/web": {"10.0.0.1:8080 port-name=http", "10.0.0.2:8080 port-name=http"}},
				},
				{
					apply: []runtime.Object{slice("default", "web-1", "web", http8080, endpoint("10.0.0.1", ready(true)), endpoint("10.0.0.2", ready(false)))},
					want:  map[string][]string{"default/web": {"10.0.0.1:8080 port-name=http"}},
				},
				{
					apply: []runtime.Object{slice("default", "web-1", "web", http8080, endpoint("10.0.0.1", ready(false)), endpoint("10.0.0.2", ready(false)))},
					want:  map[string][]string{"default/web": {}},
				},
				{
					apply: []runtime.Object{slice("default", "web-1", "web", http8080, endpoint("10.0.0.1", ready(false)), endpoint("10.0.0.2", ready(true)))},
					want:  map[string][]string{"default/web": {"10.0.0.2:8080 port-name=http"}},
				},
			},
		},
		{
			name: "terminating pods",
			steps: []step{
				{
					apply: []runtime.Object{webSvc, slice("default", "web-1", "web", http8080,
						endpoint("10.0.0.1", ready(true)), endpoint("10.0.0.2", terminating(true)), endpoint("10.0.0.3", terminating(false)))},
					// A ready endpoint exists: terminating ones are left out.
					want: map[string][]string{"default/web": {"10.0.0.1:8080 port-name=http"}},
				},
				{
					apply: []runtime.Object{slice("default", "web-1", "web", http8080,
						endpoint("10.0.0.2", terminating(true)), endpoint("10.0.0.3", terminating(false)))},
					// No ready endpoint: the serving terminating one drains the
					// traffic; the one that stopped serving stays out.
					want: map[string][]string{"default/web": {"10.0.0.2:8080 k8s-terminating=true port-name=http"}},
				},
				{
					apply: []runtime.Object{slice("default", "web-1", "web", http8080,
						endpoint("10.0.0.2", terminating(false)), endpoint("10.0.0.3", terminating(false)))},
					want: map[string][]string{"default/web": {}},
				},
			},
		},
		{
			name: "two slices for one service merge and de-duplicate",
			steps: []step{
				{
					apply: []runtime.Object{webSvc,
						slice("default", "web-a", "web", http8080, endpoint("10.0.0.1"), endpoint("10.0.0.2")),
						slice("default", "web-b", "web", http8080, endpoint("10.0.0.2"), endpoint("10.0.0.3"))},
					want: map[string][]string{"default/web": {"10.0.0.1:8080 port-name=http", "10.0.0.2:8080 port-name=http", "10.0.0.3:8080 port-name=http"}},
				},
				{
					remove: []runtime.Object{slice("default", "web-a", "web", nil)},
					want:   map[string][]string{"default/web": {"10.0.0.2:8080 port-name=http", "10.0.0.3:8080 port-name=http"}},
				},
			},
		},
		{
			name: "service deleted",
			steps: []step{
				{
					apply: []runtime.Object{webSvc, service("default", "db", svcPort("", 5432, intstr.FromInt32(5432))),
						slice("default", "web-1", "web", http8080, endpoint("10.0.0.1")),
						slice("default", "db-1", "db", ports(slicePortOf("", 5432)), endpoint("10.0.1.1"))},
					want: map[string][]string{
						"default/web": {"10.0.0.1:8080 port-name=http"},
						"default/db":  {"10.0.1.1:5432"},
					},
				},
				{
					// The slice outlives the Service for a moment, as it does
					// until garbage collection; the mesh service goes at once.
					remove: []runtime.Object{webSvc},
					want:   map[string][]string{"default/db": {"10.0.1.1:5432"}},
				},
				{
					remove: []runtime.Object{slice("default", "web-1", "web", nil)},
					want:   map[string][]string{"default/db": {"10.0.1.1:5432"}},
				},
			},
		},
		{
			name: "named target ports resolve per pod, one endpoint per address per port",
			steps: []step{{
				apply: []runtime.Object{
					service("default", "web", svcPort("http", 80, intstr.FromString("web")), svcPort("metrics", 9090, intstr.FromInt32(9090))),
					// Pods whose "web" container port is 8080 ...
					slice("default", "web-1", "web", ports(slicePortOf("http", 8080), slicePortOf("metrics", 9090)), endpoint("10.0.0.1")),
					// ... and pods of a newer version where it is 8081.
					slice("default", "web-2", "web", ports(slicePortOf("http", 8081), slicePortOf("metrics", 9090)), endpoint("10.0.0.2")),
				},
				want: map[string][]string{"default/web": {
					"10.0.0.1:8080 port-name=http", "10.0.0.1:9090 port-name=metrics",
					"10.0.0.2:8081 port-name=http", "10.0.0.2:9090 port-name=metrics",
				}},
			}},
		},
		{
			name: "ports the mesh cannot carry are left out",
			steps: []step{{
				apply: []runtime.Object{
					service("default", "dns", corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}, svcPort("dns-tcp", 53, intstr.FromInt32(53))),
					&discoveryv1.EndpointSlice{
						ObjectMeta:  slice("default", "dns-1", "dns", nil).ObjectMeta,
						AddressType: discoveryv1.AddressTypeIPv4,
						Ports:       ports(discoveryv1.EndpointPort{Name: ptr("dns"), Port: ptr(int32(53)), Protocol: ptr(corev1.ProtocolUDP)}, slicePortOf("dns-tcp", 53)),
						Endpoints:   []discoveryv1.Endpoint{endpoint("10.0.0.10")},
					},
					&corev1.Service{ObjectMeta: service("default", "external", nil...).ObjectMeta, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}},
					&discoveryv1.EndpointSlice{
						ObjectMeta:  slice("default", "fqdn-1", "fqdn", nil).ObjectMeta,
						AddressType: discoveryv1.AddressTypeFQDN,
						Ports:       http8080,
						Endpoints:   []discoveryv1.Endpoint{endpoint("db.example.com")},
					},
					service("default", "fqdn", svcPort("http", 80, intstr.FromInt32(8080))),
				},
				want: map[string][]string{
					"default/dns":  {"10.0.0.10:53 port-name=dns-tcp"},
					"default/fqdn": {},
				},
			}},
		},
		{
			name: "namespace mapping",
			cfg:  `{"namespaceMap": {"shop-prod": "shop", "shop-canary": "shop"}}`,
			steps: []step{
				{
					apply: []runtime.Object{
						service("shop-prod", "cart", svcPort("http", 80, intstr.FromInt32(8080))),
						slice("shop-prod", "cart-1", "cart", http8080, endpoint("10.1.0.1")),
						service("other", "cart", svcPort("http", 80, intstr.FromInt32(8080))),
						slice("other", "cart-1", "cart", http8080, endpoint("10.2.0.1")),
					},
					want: map[string][]string{
						"shop/cart":  {"10.1.0.1:8080 port-name=http"},
						"other/cart": {"10.2.0.1:8080 port-name=http"},
					},
				},
				{
					// Two Kubernetes namespaces mapped to one mesh namespace
					// merge their same-named Services.
					apply: []runtime.Object{
						service("shop-canary", "cart", svcPort("http", 80, intstr.FromInt32(8080))),
						slice("shop-canary", "cart-1", "cart", http8080, endpoint("10.3.0.1")),
					},
					want: map[string][]string{
						"shop/cart":  {"10.1.0.1:8080 port-name=http", "10.3.0.1:8080 port-name=http"},
						"other/cart": {"10.2.0.1:8080 port-name=http"},
					},
				},
				{
					remove: []runtime.Object{service("shop-prod", "cart")},
					want: map[string][]string{
						"shop/cart":  {"10.3.0.1:8080 port-name=http"},
						"other/cart": {"10.2.0.1:8080 port-name=http"},
					},
				},
			},
		},
		{
			name: "label selector",
			cfg:  `{"labelSelector": "mesh=on"}`,
			steps: []step{
				{
					apply: []runtime.Object{
						withLabels(webSvc, "mesh", "on"),
						slice("default", "web-1", "web", http8080, endpoint("10.0.0.1")),
						service("default", "db", svcPort("", 5432, intstr.FromInt32(5432))),
						slice("default", "db-1", "db", ports(slicePortOf("", 5432)), endpoint("10.0.1.1")),
					},
					want: map[string][]string{"default/web": {"10.0.0.1:8080 port-name=http"}},
				},
				{
					apply: []runtime.Object{withLabels(service("default", "db", svcPort("", 5432, intstr.FromInt32(5432))), "mesh", "on")},
					want: map[string][]string{
						"default/web": {"10.0.0.1:8080 port-name=http"},
						"default/db":  {"10.0.1.1:5432"},
					},
				},
				{
					apply: []runtime.Object{withLabels(webSvc, "mesh", "off")},
					want:  map[string][]string{"default/db": {"10.0.1.1:5432"}},
				},
			},
		},
		{
			name: "only the listed namespaces",
			cfg:  `{"namespaces": ["a", "b"]}`,
			steps: []step{{
				apply: []runtime.Object{
					service("a", "web", svcPort("http", 80, intstr.FromInt32(8080))),
					slice("a", "web-1", "web", http8080, endpoint("10.0.0.1")),
					service("b", "web", svcPort("http", 80, intstr.FromInt32(8080))),
					service("c", "web", svcPort("http", 80, intstr.FromInt32(8080))),
					slice("c", "web-1", "web", http8080, endpoint("10.0.0.3")),
				},
				want: map[string][]string{"a/web": {"10.0.0.1:8080 port-name=http"}, "b/web": {}},
			}},
		},
		{
			name: "slices without a service-name label are ignored",
			steps: []step{{
				apply: []runtime.Object{
					webSvc,
					&discoveryv1.EndpointSlice{
						ObjectMeta:  slice("default", "stray", "", nil).ObjectMeta,
						AddressType: discoveryv1.AddressTypeIPv4,
						Ports:       http8080,
						Endpoints:   []discoveryv1.Endpoint{endpoint("10.0.0.9")},
					},
				},
				want: map[string][]string{"default/web": {}},
			}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			fc := newFakeCluster()
			cfg := tc.cfg
			if cfg == "" {
				cfg = "{}"
			}
			p := fc.start(ctx, t, cfg)
			events := watchEvents(ctx, t, p)
			for i, s := range tc.steps {
				for _, o := range s.apply {
					if err := apply(ctx, fc.client, o, false); err != nil {
						t.Fatalf("step %d: apply: %v", i, err)
					}
				}
				for _, o := range s.remove {
					if err := apply(ctx, fc.client, o, true); err != nil {
						t.Fatalf("step %d: remove: %v", i, err)
					}
				}
				want := s.want
				waitFor(t, fmt.Sprintf("step %d: listed endpoints", i), func() string {
					got, err := snapshot(ctx, p, false)
					if err != nil {
						return err.Error()
					}
					if diff := cmp.Diff(want, got); diff != "" {
						return "List (-want +got):\n" + diff
					}
					return ""
				})
				waitFor(t, fmt.Sprintf("step %d: watched endpoints", i), func() string {
					got, _ := events.snapshot()
					if diff := cmp.Diff(want, got); diff != "" {
						return "state folded from Watch events (-want +got):\n" + diff
					}
					return ""
				})
			}
		})
	}
}

func TestEndpointLabels(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fc := newFakeCluster()
	p := fc.start(ctx, t, `{"namespaceMap": {"shop-prod": "shop"}}`)
	for _, o := range []runtime.Object{
		service("shop-prod", "cart", svcPort("http", 80, intstr.FromString("web")), svcPort("", 9090, intstr.FromInt32(9090))),
		slice("shop-prod", "cart-1", "cart", ports(slicePortOf("http", 8080), slicePortOf("", 9090)),
			endpoint("10.1.0.1", pod("cart-7d9f"), zone("eu-1a"), node("node-3"))),
	} {
		if err := apply(ctx, fc.client, o, false); err != nil {
			t.Fatal(err)
		}
	}
	svc := provider.Service{Namespace: "shop", Name: "cart"}
	want := []provider.Endpoint{
		{IP: netip.MustParseAddr("10.1.0.1"), Port: 8080, Labels: map[string]string{
			"k8s-namespace": "shop-prod", "k8s-pod": "cart-7d9f", "zone": "eu-1a", "node": "node-3",
			"port-name": "http", "service-port": "80",
		}},
		{IP: netip.MustParseAddr("10.1.0.1"), Port: 9090, Labels: map[string]string{
			"k8s-namespace": "shop-prod", "k8s-pod": "cart-7d9f", "zone": "eu-1a", "node": "node-3",
			"service-port": "9090",
		}},
	}
	waitFor(t, "labelled endpoints", func() string {
		got, err := p.ListEndpoints(ctx, svc)
		if err != nil {
			return err.Error()
		}
		if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			return "ListEndpoints (-want +got):\n" + diff
		}
		return ""
	})
}

// TestNoEventWithoutChange checks that changes to a slice that leave the
// endpoint set as it was (an annotation, a re-ordering) send nothing.
func TestNoEventWithoutChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fc := newFakeCluster()
	p := fc.start(ctx, t, `{}`)
	events := watchEvents(ctx, t, p)
	for _, o := range []runtime.Object{webSvc, slice("default", "web-1", "web", http8080, endpoint("10.0.0.1"), endpoint("10.0.0.2"))} {
		if err := apply(ctx, fc.client, o, false); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "first state", func() string {
		got, _ := events.snapshot()
		if len(got["default/web"]) != 2 {
			return fmt.Sprintf("state %v", got)
		}
		return ""
	})
	time.Sleep(200 * time.Millisecond) // let the first events settle
	_, before := events.snapshot()

	same := slice("default", "web-1", "web", http8080, endpoint("10.0.0.2"), endpoint("10.0.0.1"))
	same.Annotations = map[string]string{"touched": "yes"}
	if err := apply(ctx, fc.client, same, false); err != nil {
		t.Fatal(err)
	}
	svc := withLabels(webSvc, "team", "storefront")
	if err := apply(ctx, fc.client, svc, false); err != nil {
		t.Fatal(err)
	}
	// A real change after the no-op ones, so we know they were processed.
	if err := apply(ctx, fc.client, slice("default", "web-1", "web", http8080, endpoint("10.0.0.1")), false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "scale-in seen", func() string {
		got, _ := events.snapshot()
		if len(got["default/web"]) != 1 {
			return fmt.Sprintf("state %v", got)
		}
		return ""
	})
	if _, after := events.snapshot(); after != before+1 {
		t.Errorf("watch got %d events for two no-op changes and one real change; want 1", after-before)
	}
}

// TestLostConnection makes the fake API server fail: the provider reports
// unhealthy, keeps serving the last good endpoints, and once the server is
// back reports healthy and picks up what changed meanwhile, without a
// restart.
func TestLostConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fc := newFakeCluster()
	p := fc.start(ctx, t, `{}`)
	events := watchEvents(ctx, t, p)
	dbSvc := service("default", "db", svcPort("", 5432, intstr.FromInt32(5432)))
	for _, o := range []runtime.Object{webSvc, slice("default", "web-1", "web", http8080, endpoint("10.0.0.1")), dbSvc} {
		if err := apply(ctx, fc.client, o, false); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]string{"default/web": {"10.0.0.1:8080 port-name=http"}, "default/db": {}}
	waitFor(t, "endpoints before the outage", func() string {
		got, err := snapshot(ctx, p, false)
		if err != nil {
			return err.Error()
		}
		return cmp.Diff(want, got)
	})

	fc.fail(errors.New("dial tcp 10.96.0.1:443: connect: connection refused"))
	waitFor(t, "unhealthy reported", func() string {
		h := events.healthEvents()
		if len(h) == 0 || h[len(h)-1].Healthy {
			return fmt.Sprintf("health events %+v", h)
		}
		return ""
	})
	h := events.healthEvents()
	if msg := h[len(h)-1].Message; !strings.Contains(msg, "connection refused") || !strings.Contains(msg, "last known endpoints") {
		t.Errorf("unhealthy message = %q; want the cause and that the last endpoints are kept", msg)
	}
	// Stale but served.
	if got, err := snapshot(ctx, p, false); err != nil || !cmp.Equal(want, got) {
		t.Errorf("during the outage: List = %v, %v; want the last good %v", got, err, want)
	}
	// A new watcher learns the provider is unhealthy.
	late := watchEvents(ctx, t, p)
	waitFor(t, "late watcher told unhealthy", func() string {
		if h := late.healthEvents(); len(h) == 0 || h[0].Healthy {
			return fmt.Sprintf("health events %+v", h)
		}
		return ""
	})

	// The cluster changes while the provider cannot see it: a scale-out,
	// and a Service deleted (the informer learns of it from the re-list,
	// as a tombstone).
	if err := apply(ctx, fc.client, slice("default", "web-1", "web", http8080, endpoint("10.0.0.1"), endpoint("10.0.0.2")), false); err != nil {
		t.Fatal(err)
	}
	if err := apply(ctx, fc.client, dbSvc, true); err != nil {
		t.Fatal(err)
	}
	fc.fail(nil)
	waitFor(t, "healthy again", func() string {
		h := events.healthEvents()
		if len(h) == 0 || !h[len(h)-1].Healthy {
			return fmt.Sprintf("health events %+v", h)
		}
		return ""
	})
	want = map[string][]string{"default/web": {"10.0.0.1:8080 port-name=http", "10.0.0.2:8080 port-name=http"}}
	waitFor(t, "change made during the outage seen", func() string {
		got, _ := events.snapshot()
		return cmp.Diff(want, got)
	})
}

// TestConfigureWithUnreachableCluster: Configure does not hang or fail on
// a cluster it cannot reach; the provider is unhealthy and List calls say
// unavailable until the cluster answers.
func TestConfigureWithUnreachableCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fc := newFakeCluster()
	fc.fail(apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "", errors.New(`User "system:serviceaccount:osm:provider" cannot list resource "services"`)))
	p := newProvider(testLogger(t), func(config, string) (kubernetes.Interface, string, error) { return fc.client, "fake-cluster", nil })
	p.FirstReadWait = 300 * time.Millisecond
	t.Cleanup(func() { p.Close() })
	if err := p.Configure(ctx, "test", []byte(`{}`)); err != nil {
		t.Fatalf("Configure: %v; want nil (unhealthy, retrying)", err)
	}
	_, err := p.ListServices(ctx)
	if !errors.Is(err, provider.ErrUnavailable) || !strings.Contains(err.Error(), "forbidden") || !strings.Contains(err.Error(), "grant the provider's identity get, list and watch") {
		t.Errorf("ListServices before sync = %v; want ErrUnavailable naming the cause and the RBAC fix", err)
	}
	events := watchEvents(ctx, t, p)
	waitFor(t, "unhealthy reported to a watcher", func() string {
		if h := events.healthEvents(); len(h) == 0 || h[0].Healthy {
			return fmt.Sprintf("health events %+v", h)
		}
		return ""
	})

	fc.fail(nil)
	waitFor(t, "synced and healthy", func() string {
		if _, err := p.ListServices(ctx); err != nil {
			return err.Error()
		}
		if h := events.healthEvents(); !h[len(h)-1].Healthy {
			return fmt.Sprintf("health events %+v", h)
		}
		return ""
	})
}

// TestTwoInstances runs two providers (two clusters) in one process: each
// sees only its own cluster.
func TestTwoInstances(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	east, west := newFakeCluster(), newFakeCluster()
	pe, pw := east.start(ctx, t, `{}`), west.start(ctx, t, `{}`)
	for c, ip := range map[*fakeCluster]string{east: "10.0.0.1", west: "10.9.0.1"} {
		for _, o := range []runtime.Object{webSvc, slice("default", "web-1", "web", http8080, endpoint(ip))} {
			if err := apply(ctx, c.client, o, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	for p, ip := range map[provider.Provider]string{pe: "10.0.0.1", pw: "10.9.0.1"} {
		want := map[string][]string{"default/web": {ip + ":8080 port-name=http"}}
		waitFor(t, "instance sees its own cluster", func() string {
			got, err := snapshot(ctx, p, false)
			if err != nil {
				return err.Error()
			}
			return cmp.Diff(want, got)
		})
	}
}

func TestNotConfigured(t *testing.T) {
	p := newProvider(testLogger(t), newClientset)
	ctx := context.Background()
	if _, err := p.ListServices(ctx); !errors.Is(err, provider.ErrNotConfigured) {
		t.Errorf("ListServices = %v; want ErrNotConfigured", err)
	}
	if _, err := p.ListEndpoints(ctx, provider.Service{Namespace: "a", Name: "b"}); !errors.Is(err, provider.ErrNotConfigured) {
		t.Errorf("ListEndpoints = %v; want ErrNotConfigured", err)
	}
	if err := p.Watch(ctx, func(provider.Event) error { return nil }); !errors.Is(err, provider.ErrNotConfigured) {
		t.Errorf("Watch = %v; want ErrNotConfigured", err)
	}
}
