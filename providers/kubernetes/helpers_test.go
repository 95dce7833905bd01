package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/osm-vm/osm-vm/internal/testwait"
	"github.com/osm-vm/osm-vm/provider"
)

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// fakeCluster is a client-go fake clientset whose watches are counted, so
// a test can wait until the provider's informers are watching before it
// creates objects (the fake's watches do not replay what happened between
// an informer's list and its watch).
type fakeCluster struct {
	client  *fake.Clientset
	watches atomic.Int32

	mu      sync.Mutex
	failing error             // when set, list and watch calls fail with it
	open    []watch.Interface // watches handed out, to break them
}

func newFakeCluster() *fakeCluster {
	fc := &fakeCluster{client: fake.NewClientset()}
	fc.client.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		if fc.failing != nil {
			return true, nil, fc.failing
		}
		var opts metav1.ListOptions
		if wa, ok := action.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := fc.client.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
		if err != nil {
			return true, nil, err
		}
		fc.open = append(fc.open, w)
		fc.watches.Add(1)
		return true, w, nil
	})
	fc.client.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		if fc.failing != nil {
			return true, nil, fc.failing
		}
		return false, nil, nil
	})
	return fc
}

// fail makes the "API server" unreachable: open watches end and new lists
// and watches fail with err. fail(nil) brings it back.
func (fc *fakeCluster) fail(err error) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.failing = err
	if err != nil {
		for _, w := range fc.open {
			w.Stop()
		}
		fc.open = nil
	}
}

// start configures a provider on the fake cluster and waits until all its
// informers watch.
func (fc *fakeCluster) start(ctx context.Context, t *testing.T, cfgJSON string) *provider.Plugin {
	t.Helper()
	p := newProvider(testLogger(t), func(config, string) (kubernetes.Interface, string, error) {
		return fc.client, "fake-cluster", nil
	})
	t.Cleanup(func() { p.Close() })
	if err := p.Configure(ctx, "test", []byte(cfgJSON)); err != nil {
		t.Fatalf("Configure(%s): %v", cfgJSON, err)
	}
	cfg, err := parseConfig([]byte(cfgJSON))
	if err != nil {
		t.Fatal(err)
	}
	want := int32(2 * len(cfg.watchNamespaces()))
	waitFor(t, "informers watching", func() string {
		if got := fc.watches.Load(); got < want {
			return fmt.Sprintf("%d of %d watches started", got, want)
		}
		return ""
	})
	return p
}

// waitFor waits until cond returns "", failing with its last complaint.
func waitFor(t testing.TB, what string, cond func() string) {
	t.Helper()
	testwait.Until(t, what, func() (bool, string) { reason := cond(); return reason == "", reason })
}

// apply creates or updates (or, for remove, deletes) Services and
// EndpointSlices through the typed client, as an operator or controller
// would.
func apply(ctx context.Context, c kubernetes.Interface, obj runtime.Object, remove bool) error {
	switch o := obj.(type) {
	case *corev1.Service:
		api := c.CoreV1().Services(o.Namespace)
		if remove {
			return api.Delete(ctx, o.Name, metav1.DeleteOptions{})
		}
		old, err := api.Get(ctx, o.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = api.Create(ctx, o, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		upd := o.DeepCopy()
		upd.ResourceVersion = old.ResourceVersion
		upd.Spec.ClusterIP, upd.Spec.ClusterIPs = old.Spec.ClusterIP, old.Spec.ClusterIPs
		_, err = api.Update(ctx, upd, metav1.UpdateOptions{})
		return err
	case *discoveryv1.EndpointSlice:
		api := c.DiscoveryV1().EndpointSlices(o.Namespace)
		if remove {
			return api.Delete(ctx, o.Name, metav1.DeleteOptions{})
		}
		old, err := api.Get(ctx, o.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = api.Create(ctx, o, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		upd := o.DeepCopy()
		upd.ResourceVersion = old.ResourceVersion
		_, err = api.Update(ctx, upd, metav1.UpdateOptions{})
		return err
	}
	return fmt.Errorf("apply: unsupported object %T", obj)
}

// Fixtures.

func service(ns, name string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Ports: ports},
	}
}

func withLabels(svc *corev1.Service, kv ...string) *corev1.Service {
	svc = svc.DeepCopy()
	svc.Labels = map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		svc.Labels[kv[i]] = kv[i+1]
	}
	return svc
}

func svcPort(name string, port int32, target intstr.IntOrString) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, TargetPort: target, Protocol: corev1.ProtocolTCP}
}

func slice(ns, name, svc string, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       ports,
		Endpoints:   eps,
	}
}

func ports(ps ...discoveryv1.EndpointPort) []discoveryv1.EndpointPort { return ps }

func slicePortOf(name string, port int32) discoveryv1.EndpointPort {
	tcp := corev1.ProtocolTCP
	return discoveryv1.EndpointPort{Name: &name, Port: &port, Protocol: &tcp}
}

type epOpt func(*discoveryv1.Endpoint)

func endpoint(ip string, opts ...epOpt) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{ip}}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func ptr[T any](v T) *T { return &v }

func ready(v bool) epOpt { return func(e *discoveryv1.Endpoint) { e.Conditions.Ready = ptr(v) } }

// terminating marks an endpoint as the EndpointSlice controller marks a
// terminating pod: not ready, serving as its readiness probe says.
func terminating(serving bool) epOpt {
	return func(e *discoveryv1.Endpoint) {
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(serving), Terminating: ptr(true)}
	}
}

func pod(name string) epOpt {
	return func(e *discoveryv1.Endpoint) { e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: name} }
}

func zone(z string) epOpt { return func(e *discoveryv1.Endpoint) { e.Zone = ptr(z) } }
func node(n string) epOpt { return func(e *discoveryv1.Endpoint) { e.NodeName = ptr(n) } }

// render writes endpoints as "ip:port k=v ..." with labels sorted, leaving
// out k8s-namespace and service-port unless full is set.
func render(eps []provider.Endpoint, full bool) []string {
	out := make([]string, 0, len(eps))
	for _, e := range eps {
		s := e.String()
		for _, k := range slices.Sorted(maps.Keys(e.Labels)) {
			if !full && (k == labelNamespace || k == labelServicePort) {
				continue
			}
			s += " " + k + "=" + e.Labels[k]
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// snapshot returns every service the provider lists with its rendered
// endpoints.
func snapshot(ctx context.Context, p provider.Provider, full bool) (map[string][]string, error) {
	svcs, err := p.ListServices(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, s := range svcs {
		eps, err := p.ListEndpoints(ctx, s)
		if err != nil {
			return nil, err
		}
		out[s.String()] = render(eps, full)
	}
	return out, nil
}

// eventLog collects the events of one Watch call and folds them into the
// state a host would hold.
type eventLog struct {
	mu     sync.Mutex
	events []provider.Event
	state  map[string][]string
	health []provider.Health
}

func watchEvents(ctx context.Context, t *testing.T, p provider.Provider) *eventLog {
	t.Helper()
	l := &eventLog{state: map[string][]string{}}
	// Watch sends no initial state: a change the test makes before the
	// Watch below has subscribed would never be seen. So it waits for the
	// subscription (an in-process plugin counts them).
	var st *provider.State
	if pl, ok := p.(*provider.Plugin); ok {
		st = pl.State()
	}
	before := 0
	if st != nil {
		before = st.Watchers()
	}
	var wg sync.WaitGroup
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		err := p.Watch(wctx, func(ev provider.Event) error {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.events = append(l.events, ev)
			switch {
			case ev.Health != nil:
				l.health = append(l.health, *ev.Health)
			case ev.Deleted:
				delete(l.state, ev.Service.String())
			default:
				l.state[ev.Service.String()] = render(ev.Endpoints, false)
			}
			return nil
		})
		if err != nil {
			t.Errorf("Watch: %v", err)
		}
	})
	if st != nil {
		testwait.For(t, "the Watch subscribed", func() bool { return st.Watchers() > before })
	}
	return l
}

func (l *eventLog) snapshot() (map[string][]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.state), len(l.events)
}

func (l *eventLog) healthEvents() []provider.Health {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.health)
}

// kubeBackend is the conformance suite's Backend on any clientset: a mesh
// service is a headless Service (so the same code runs against a real API
// server, which refuses to change a ClusterIP) and one EndpointSlice per
// port, as the EndpointSlice controller would write them.
type kubeBackend struct {
	client kubernetes.Interface
	// k8sNamespace maps the suite's mesh namespace to the Kubernetes
	// namespace the provider's namespaceMap maps back.
	k8sNamespace func(meshNS string) string
}

func (b kubeBackend) SetEndpoints(ctx context.Context, svc provider.Service, eps []provider.Endpoint) error {
	ns := b.k8sNamespace(svc.Namespace)
	byPort := map[uint16][]provider.Endpoint{}
	for _, e := range eps {
		byPort[e.Port] = append(byPort[e.Port], e)
	}
	s := service(ns, svc.Name)
	s.Spec.ClusterIP = corev1.ClusterIPNone
	for _, port := range slices.Sorted(maps.Keys(byPort)) {
		s.Spec.Ports = append(s.Spec.Ports, svcPort(fmt.Sprintf("p%d", port), int32(port), intstr.FromInt32(int32(port))))
	}
	if err := apply(ctx, b.client, s, false); err != nil {
		return fmt.Errorf("service %s/%s: %w", ns, svc.Name, err)
	}
	keep := map[string]bool{}
	for port, list := range byPort {
		for _, family := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
			var endpoints []discoveryv1.Endpoint
			for _, e := range list {
				if e.IP.Is4() == (family == discoveryv1.AddressTypeIPv4) {
					endpoints = append(endpoints, endpoint(e.IP.String(), ready(true)))
				}
			}
			if len(endpoints) == 0 {
				continue
			}
			name := fmt.Sprintf("%s-p%d-%s", svc.Name, port, strings.ToLower(string(family)))
			sl := slice(ns, name, svc.Name, ports(slicePortOf(fmt.Sprintf("p%d", port), int32(port))), endpoints...)
			sl.AddressType = family
			if err := apply(ctx, b.client, sl, false); err != nil {
				return fmt.Errorf("endpointslice %s/%s: %w", ns, name, err)
			}
			keep[name] = true
		}
	}
	return b.deleteSlices(ctx, ns, svc.Name, keep)
}

func (b kubeBackend) DeleteService(ctx context.Context, svc provider.Service) error {
	ns := b.k8sNamespace(svc.Namespace)
	if err := b.client.CoreV1().Services(ns).Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete service %s/%s: %w", ns, svc.Name, err)
	}
	return b.deleteSlices(ctx, ns, svc.Name, nil)
}

func (b kubeBackend) deleteSlices(ctx context.Context, ns, svcName string, keep map[string]bool) error {
	list, err := b.client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svcName})
	if err != nil {
		return fmt.Errorf("list endpointslices of %s/%s: %w", ns, svcName, err)
	}
	for _, s := range list.Items {
		if keep[s.Name] {
			continue
		}
		if err := b.client.DiscoveryV1().EndpointSlices(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("delete endpointslice %s/%s: %w", ns, s.Name, err)
		}
	}
	return nil
}
