package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/osm-vm/osm-vm/provider"
)

// meshIndex indexes Services and EndpointSlices by the mesh service they
// belong to ("mesh-namespace/name").
const meshIndex = "mesh-service"

// cluster watches one Kubernetes cluster's Services and EndpointSlices with
// shared informers and keeps the provider's state up to date. It never
// polls: a change reaches the state in the informer's event handler.
type cluster struct {
	log      *slog.Logger
	cfg      config
	host     string // API server address, for messages
	client   kubernetes.Interface
	state    *provider.State
	problems problems

	services []cache.SharedIndexInformer // one per watched namespace
	slices   []cache.SharedIndexInformer // one per watched namespace

	// mu serialises recomputes so that the last one to commit read the
	// newest informer caches; synced says the initial lists are in.
	mu     sync.Mutex
	synced bool
}

func newCluster(log *slog.Logger, cfg config, client kubernetes.Interface, host string, s *provider.State) (*cluster, error) {
	c := &cluster{log: log, cfg: cfg, host: host, client: client, state: s, problems: problems{state: s, bySource: map[string]error{}}}
	for _, ns := range cfg.watchNamespaces() {
		where := "all namespaces"
		if ns != "" {
			where = "namespace " + ns
		}
		svcInf := cache.NewSharedIndexInformer(c.listWatch("services in "+where,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = cfg.LabelSelector
				return client.CoreV1().Services(ns).List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = cfg.LabelSelector
				return client.CoreV1().Services(ns).Watch(ctx, o)
			}), &corev1.Service{}, 0, cache.Indexers{meshIndex: c.serviceIndex})
		sliceInf := cache.NewSharedIndexInformer(c.listWatch("endpointslices in "+where,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return client.DiscoveryV1().EndpointSlices(ns).List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return client.DiscoveryV1().EndpointSlices(ns).Watch(ctx, o)
			}), &discoveryv1.EndpointSlice{}, 0, cache.Indexers{meshIndex: c.sliceIndex})
		for _, inf := range []struct {
			informer cache.SharedIndexInformer
			source   string
			keys     func(obj any) []provider.Service
		}{
			{svcInf, "services in " + where, c.serviceKeys},
			{sliceInf, "endpointslices in " + where, c.sliceKeys},
		} {
			if err := inf.informer.SetTransform(stripObject); err != nil {
				return nil, fmt.Errorf("transform for %s: %w", inf.source, err)
			}
			if err := inf.informer.SetWatchErrorHandlerWithContext(c.watchErrorHandler(inf.source)); err != nil {
				return nil, fmt.Errorf("watch error handler for %s: %w", inf.source, err)
			}
			keys := inf.keys
			if _, err := inf.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc:    func(obj any) { c.recompute(keys(obj)...) },
				UpdateFunc: func(old, obj any) { c.recompute(append(keys(old), keys(obj)...)...) },
				DeleteFunc: func(obj any) { c.recompute(keys(obj)...) },
			}); err != nil {
				return nil, fmt.Errorf("event handler for %s: %w", inf.source, err)
			}
		}
		c.services = append(c.services, svcInf)
		c.slices = append(c.slices, sliceInf)
	}
	return c, nil
}

// listWatch wraps list and watch calls so that they report the source's
// health: a failed call makes it unhealthy, a successful one (the informer
// has reached the API server again) healthy. Reporting here, not only in
// the watch error handler, matters: the reflector retries a watch that
// fails with "connection refused" by itself, with backoff, and never calls
// the handler, so a stopped API server would otherwise go unreported. The
// client's own WatchList support decision is kept.
func (c *cluster) listWatch(source string,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
) cache.ListerWatcher {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			obj, err := list(ctx, o)
			c.report(ctx, source, err)
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := watchFn(ctx, o)
			c.report(ctx, source, err)
			return w, err
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, c.client)
}

// watchErrorHandler reports what ends a list-and-watch cycle with an
// error. The informer keeps its cache (the last good endpoints stay
// served) and retries with backoff; the next successful call clears the
// problem.
func (c *cluster) watchErrorHandler(source string) cache.WatchErrorHandlerWithContext {
	return func(ctx context.Context, _ *cache.Reflector, err error) {
		c.report(ctx, source, err)
	}
}

// report records the outcome of a call to the API server for source.
func (c *cluster) report(ctx context.Context, source string, err error) {
	switch {
	case err == nil:
		c.problems.set(source, nil)
		return
	case ctx.Err() != nil:
		return // shutting down
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), apierrors.IsResourceExpired(err), apierrors.IsGone(err):
		// A watch ending is routine; the informer re-lists or re-watches,
		// and a failure to do so is reported then.
		c.log.Debug("kubernetes watch closed; resuming", "source", source, "error", err)
		return
	}
	fix := "check that the API server is up and reachable from this host; the provider keeps serving the last known endpoints and retries"
	switch {
	case apierrors.IsUnauthorized(err):
		fix = "the credentials in the provider's kubeconfig or service account were refused; renew them (the provider keeps serving the last known endpoints and retries)"
	case apierrors.IsForbidden(err):
		fix = "grant the provider's identity get, list and watch on services and discovery.k8s.io endpointslices (see docs/plugins/kubernetes.md); the provider keeps serving the last known endpoints and retries"
	}
	c.problems.set(source, fmt.Errorf("kubernetes API %s: %v; %s", c.host, cause(err), fix))
}

// cause returns the part of a list or watch error that names what went
// wrong, without the request URL or the reflector's prefix, so that one
// outage reads as one problem for every informer.
func cause(err error) error {
	var status *apierrors.StatusError
	if errors.As(err, &status) {
		return status
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err
	}
	return err
}

// run runs the informers until ctx is done. Once all have synced it
// computes every service, publishes them as the first complete read, and
// from then on recomputes the services each event touches.
func (c *cluster) run(ctx context.Context) {
	var wg sync.WaitGroup
	var synced []cache.InformerSynced
	for _, inf := range append(append([]cache.SharedIndexInformer{}, c.services...), c.slices...) {
		wg.Go(func() { inf.RunWithContext(ctx) })
		synced = append(synced, inf.HasSynced)
	}
	if cache.WaitForCacheSync(ctx.Done(), synced...) {
		c.mu.Lock()
		c.synced = true
		all := map[provider.Service][]provider.Endpoint{}
		for _, key := range c.allKeys() {
			if eps, ok := c.compute(key); ok {
				all[key] = eps
			}
		}
		c.state.ReplaceAll(all)
		c.mu.Unlock()
		c.log.Info("synced with kubernetes cluster", "api", c.host)
	}
	wg.Wait()
}

// recompute recomputes the given mesh services from the informer caches
// and tells the state. Before the initial sync it does nothing: run computes
// everything once the caches are complete.
func (c *cluster) recompute(keys ...provider.Service) {
	if len(keys) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.synced {
		return
	}
	done := map[provider.Service]bool{}
	for _, key := range keys {
		if done[key] {
			continue
		}
		done[key] = true
		if eps, ok := c.compute(key); ok {
			c.state.SetEndpoints(key, eps)
		} else {
			c.state.DeleteService(key)
		}
	}
}

// compute returns the endpoints of a mesh service from the informer caches
// (sorted), and false when no Kubernetes Service maps to it.
func (c *cluster) compute(key provider.Service) ([]provider.Endpoint, bool) {
	var svcs []*corev1.Service
	for _, inf := range c.services {
		objs, _ := inf.GetIndexer().ByIndex(meshIndex, key.String())
		for _, o := range objs {
			svcs = append(svcs, o.(*corev1.Service))
		}
	}
	bySvc := map[string][]*discoveryv1.EndpointSlice{}
	for _, inf := range c.slices {
		objs, _ := inf.GetIndexer().ByIndex(meshIndex, key.String())
		for _, o := range objs {
			s := o.(*discoveryv1.EndpointSlice)
			k := s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]
			bySvc[k] = append(bySvc[k], s)
		}
	}
	lists := make([][]provider.Endpoint, 0, len(svcs))
	for _, svc := range svcs {
		lists = append(lists, serviceEndpoints(svc, bySvc[svc.Namespace+"/"+svc.Name]))
	}
	return mergeEndpoints(lists...), len(svcs) > 0
}

// problems are the current errors of the informers by source; the provider
// is healthy when there are none. One outage fails every informer, so the
// health message names each cause once with the sources it affects, for
// example "kubernetes API https://10.0.0.1:6443: dial tcp ...: connection
// refused; check ... (failing: endpointslices in all namespaces, services
// in all namespaces)".
type problems struct {
	state *provider.State

	mu       sync.Mutex
	bySource map[string]error
}

// set records (err != nil) or clears (err == nil) the problem of one source
// and tells the state the resulting health.
func (p *problems) set(source string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		delete(p.bySource, source)
	} else {
		p.bySource[source] = err
	}
	sources := map[string][]string{} // cause -> sources
	for src, err := range p.bySource {
		sources[err.Error()] = append(sources[err.Error()], src)
	}
	var msgs []string
	for _, cause := range slices.Sorted(maps.Keys(sources)) {
		msgs = append(msgs, fmt.Sprintf("%s (failing: %s)", cause, strings.Join(slices.Sorted(slices.Values(sources[cause])), ", ")))
	}
	if len(msgs) == 0 {
		p.state.SetHealthy()
		return
	}
	p.state.SetUnhealthy(errors.New(strings.Join(msgs, "; also ")))
}

// allKeys returns the mesh service of every cached Service.
func (c *cluster) allKeys() []provider.Service {
	var keys []provider.Service
	for _, inf := range c.services {
		for _, o := range inf.GetStore().List() {
			keys = append(keys, c.serviceKeys(o)...)
		}
	}
	return keys
}

// meshService returns the mesh service for a Kubernetes namespace and
// name, and whether it is a valid mesh service name.
func (c *cluster) meshService(ns, name string) (provider.Service, bool) {
	svc := provider.Service{Namespace: c.cfg.meshNamespace(ns), Name: name}
	return svc, svc.Validate() == nil
}

// serviceKeys returns the mesh service an event on a Service touches,
// whether or not the Service is selected (a relabelled Service leaves the
// mesh).
func (c *cluster) serviceKeys(obj any) []provider.Service {
	svc, ok := unwrap[*corev1.Service](obj)
	if !ok {
		return nil
	}
	if key, ok := c.meshService(svc.Namespace, svc.Name); ok {
		return []provider.Service{key}
	}
	return nil
}

// sliceKeys returns the mesh service an event on an EndpointSlice touches.
func (c *cluster) sliceKeys(obj any) []provider.Service {
	s, ok := unwrap[*discoveryv1.EndpointSlice](obj)
	if !ok {
		return nil
	}
	name := s.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return nil
	}
	if key, ok := c.meshService(s.Namespace, name); ok {
		return []provider.Service{key}
	}
	return nil
}

// serviceIndex indexes the Services that become mesh services: selected by
// the label selector, with a valid mesh name, not ExternalName. The
// selector is also applied here, not only in the list options, so a
// relabelled Service leaves the mesh whatever the watch reports.
func (c *cluster) serviceIndex(obj any) ([]string, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok || !c.cfg.selector.Matches(labels.Set(svc.Labels)) || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil, nil
	}
	key, ok := c.meshService(svc.Namespace, svc.Name)
	if !ok {
		return nil, nil
	}
	return []string{key.String()}, nil
}

func (c *cluster) sliceIndex(obj any) ([]string, error) {
	keys := c.sliceKeys(obj)
	if len(keys) == 0 {
		return nil, nil
	}
	return []string{keys[0].String()}, nil
}

// stripObject drops what the provider never reads (managed fields and
// annotations, which can be most of an object's size) before the informer
// caches it: all Services and EndpointSlices of a cluster stay in memory.
func stripObject(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
		m.SetAnnotations(nil)
	}
	return obj, nil
}

// unwrap returns the object of an informer event, looking inside the
// tombstone a delete missed during a disconnect leaves.
func unwrap[T any](obj any) (T, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	t, ok := obj.(T)
	return t, ok
}
