package spec

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec/resilience"
)

// Failure handling as policy: OSM's UpstreamTrafficSetting and Retry
// (policy.openservicemesh.io/v1alpha1), applied as files written for OSM
// v1.2 are, and osm-vm's BackendTrafficPolicy (osm-vm.io/v1alpha1),
// attached to Services by targetRefs, with MeshConfig's spec.resilience
// as the defaults. Their field rules, defaults and precedence are package
// resilience's; the documents, their references to Services and service
// accounts, the snapshot's index and its queries are here.
const (
	APIVersionPolicy           = "policy.openservicemesh.io/v1alpha1"
	KindUpstreamTrafficSetting = resilience.KindUpstreamTrafficSetting
	KindRetry                  = resilience.KindRetry
	KindBackendTrafficPolicy   = resilience.KindBackendTrafficPolicy
)

// resilienceKinds are added to kinds (types.go), after the Gateway API's.
var resilienceKinds = []kindInfo{
	{KindUpstreamTrafficSetting, APIVersionPolicy, "upstreamtrafficsettings", true, func() Object { return &UpstreamTrafficSetting{} }},
	{KindRetry, APIVersionPolicy, "retries", true, func() Object { return &Retry{} }},
	{KindBackendTrafficPolicy, APIVersionOSM, "backendtrafficpolicies", true, func() Object { return &BackendTrafficPolicy{} }},
}

// UpstreamTrafficSetting (policy.openservicemesh.io/v1alpha1) sets the
// connection settings of every caller of a Service (connect timeout and
// circuit breaker) and the rate limits the Service's own proxies enforce.
type UpstreamTrafficSetting struct {
	TypeMeta `json:",inline"`
	Metadata KubeObjectMeta                        `json:"metadata"`
	Spec     resilience.UpstreamTrafficSettingSpec `json:"spec"`
	// Status is what OSM's controller reported: accepted and dropped.
	Status  any `json:"status,omitempty"`
	dropped []string
}

// Retry (policy.openservicemesh.io/v1alpha1) sets the retries of one
// service account's calls to some Services.
type Retry struct {
	TypeMeta `json:",inline"`
	Metadata KubeObjectMeta       `json:"metadata"`
	Spec     resilience.RetrySpec `json:"spec"`
	dropped  []string
}

// BackendTrafficPolicy (osm-vm.io/v1alpha1) sets how callers reach the
// Services (or ports) its targetRefs name: timeouts, retries, circuit
// breaker, outlier detection, load balancing and fault injection.
type BackendTrafficPolicy struct {
	TypeMeta `json:",inline"`
	Metadata KubeObjectMeta                      `json:"metadata"`
	Spec     resilience.BackendTrafficPolicySpec `json:"spec"`
	dropped  []string
}

func (u *UpstreamTrafficSetting) Key() Key          { return keyOf(u.TypeMeta, u.Metadata.ObjectMeta) }
func (u *UpstreamTrafficSetting) meta() *ObjectMeta { return &u.Metadata.ObjectMeta }
func (u *UpstreamTrafficSetting) typeMeta() *TypeMeta {
	return &u.TypeMeta
}
func (r *Retry) Key() Key                           { return keyOf(r.TypeMeta, r.Metadata.ObjectMeta) }
func (r *Retry) meta() *ObjectMeta                  { return &r.Metadata.ObjectMeta }
func (r *Retry) typeMeta() *TypeMeta                { return &r.TypeMeta }
func (p *BackendTrafficPolicy) Key() Key            { return keyOf(p.TypeMeta, p.Metadata.ObjectMeta) }
func (p *BackendTrafficPolicy) meta() *ObjectMeta   { return &p.Metadata.ObjectMeta }
func (p *BackendTrafficPolicy) typeMeta() *TypeMeta { return &p.TypeMeta }

func (u *UpstreamTrafficSetting) setDefaults() {
	u.dropped = dropServerFields(&u.Metadata)
	if u.Status != nil {
		u.dropped = append(u.dropped, "status")
	}
	u.Status = nil
}

func (r *Retry) setDefaults() {
	r.dropped = dropServerFields(&r.Metadata)
	resilience.DefaultRetrySpec(r.Metadata.Namespace, &r.Spec)
}

func (p *BackendTrafficPolicy) setDefaults() { p.dropped = dropServerFields(&p.Metadata) }

func (u *UpstreamTrafficSetting) validate(v *validator) {
	resilience.ValidateUpstreamTrafficSetting(v, u.Metadata.Namespace, &u.Spec)
}
func (r *Retry) validate(v *validator) { resilience.ValidateRetry(v, &r.Spec) }
func (p *BackendTrafficPolicy) validate(v *validator) {
	resilience.ValidateBackendTrafficPolicy(v, &p.Spec)
}

func (u *UpstreamTrafficSetting) applyWarnings(v *validator) {
	ignoredWarning(v, u.dropped)
	validateWarnings(v, u)
}

func (r *Retry) applyWarnings(v *validator) {
	ignoredWarning(v, r.dropped)
	validateWarnings(v, r)
}

func (p *BackendTrafficPolicy) applyWarnings(v *validator) {
	ignoredWarning(v, p.dropped)
	validateWarnings(v, p)
}

// resilienceReferences checks what a failure-handling policy names
// against st: a Service or service account that does not exist (yet) is
// a warning, as a route's missing backend is, since apply order should
// not matter; two UpstreamTrafficSettings for one host are refused, as
// OSM refused them.
func resilienceReferences(v *validator, st *state, obj Object) {
	switch o := obj.(type) {
	case *UpstreamTrafficSetting:
		ns := o.Metadata.Namespace
		name, err := resilience.HostService(o.Spec.Host, ns)
		if err != nil {
			return // validation said so
		}
		if missingService(v, st, "spec.host", ns, name, "the setting applies to nothing until it exists") {
			if ports := grpcPorts(st, ns, []portTarget{{mesh.MeshService{Namespace: ns, Name: name}, ""}}); ports != "" {
				resilience.WarnProxylessUpstream(v, &o.Spec, ports)
			}
		}
		for _, other := range namesOfKind(st, KindUpstreamTrafficSetting, ns) {
			if other == o.Metadata.Name {
				continue
			}
			u := st.objects[Key{Kind: KindUpstreamTrafficSetting, Namespace: ns, Name: other}].(*UpstreamTrafficSetting)
			if n, err := resilience.HostService(u.Spec.Host, ns); err == nil && n == name {
				v.errorf("spec.host", "UpstreamTrafficSetting %s/%s already governs Service %q (host %q): put the settings in one of them and delete the other", ns, other, name, u.Spec.Host)
			}
		}
	case *Retry:
		s := o.Spec.Source
		accounts := serviceAccounts(st, s.Namespace)
		if _, found := slices.BinarySearch(accounts, s.Name); !found {
			v.warnf("spec.source", "no Service runs as service account %q in namespace %q yet: the retry applies to no caller until one does%s", s.Name, s.Namespace, didYouMean(s.Name, accounts))
		}
		var targets []portTarget
		for i, d := range o.Spec.Destinations {
			if missingService(v, st, fmt.Sprintf("spec.destinations[%d]", i), d.Namespace, d.Name, "the retry applies to no call to it until it exists") {
				targets = append(targets, portTarget{mesh.MeshService{Namespace: d.Namespace, Name: d.Name}, ""})
			}
		}
		if ports := grpcPorts(st, o.Metadata.Namespace, targets); ports != "" {
			resilience.WarnProxylessRetry(v, &o.Spec, ports)
		}
	case *BackendTrafficPolicy:
		ns := o.Metadata.Namespace
		var targets []portTarget
		for i, t := range o.Spec.TargetRefs {
			f := fmt.Sprintf("spec.targetRefs[%d]", i)
			if !missingService(v, st, f+".name", ns, t.Name, "the policy applies to nothing there until it exists") {
				continue
			}
			targets = append(targets, portTarget{mesh.MeshService{Namespace: ns, Name: t.Name}, t.SectionName})
			svc, _ := serviceOf(st.objects[Key{Kind: KindService, Namespace: ns, Name: t.Name}])
			var names []string
			for _, p := range svc.Spec.Ports {
				if p.Name != "" {
					names = append(names, p.Name)
				}
			}
			if t.SectionName != "" && !slices.Contains(names, t.SectionName) {
				v.warnf(f+".sectionName", "Service %q has no port named %q (its named ports: %s): the policy applies to none of its calls until one is%s", t.Name, t.SectionName, strings.Join(names, ", "), didYouMean(t.SectionName, names))
			}
		}
		btpOverlaps(v, st, o)
		if ports := grpcPorts(st, ns, targets); ports != "" {
			resilience.WarnProxyless(v, &o.Spec, ports)
		}
	case *MeshConfig:
		if ports := meshGRPCPorts(st); ports != "" {
			resilience.WarnProxylessDefaults(v, "spec.resilience", o.Spec.Resilience, ports)
		}
	}
}

// portTarget is a Service a policy governs, and the name of the one
// port it governs ("": all).
type portTarget struct {
	svc     mesh.MeshService
	section string
}

// grpcPorts names the grpc ports of targets, as the proxyless warnings
// of a policy of namespace ns name them: `Service web's grpc port
// "rpc"` (a Service of another namespace as ns/name, a port without a
// name by number); "" when none is a grpc port.
func grpcPorts(st *state, ns string, targets []portTarget) string {
	var parts []string
	var seen []mesh.MeshService
	for i, t := range targets {
		if slices.Contains(seen, t.svc) {
			continue
		}
		seen = append(seen, t.svc)
		svc, ok := serviceOf(st.objects[Key{Kind: KindService, Namespace: t.svc.Namespace, Name: t.svc.Name}])
		if !ok {
			continue
		}
		var ports []string
		for _, p := range svc.Spec.Ports {
			governed := slices.ContainsFunc(targets[i:], func(u portTarget) bool { return u.svc == t.svc && (u.section == "" || u.section == p.Name) })
			if p.AppProtocol != "grpc" || !governed {
				continue
			}
			if p.Name != "" {
				ports = append(ports, strconv.Quote(p.Name))
			} else {
				ports = append(ports, strconv.Itoa(p.Port))
			}
		}
		if len(ports) == 0 {
			continue
		}
		name := t.svc.Name
		if t.svc.Namespace != ns {
			name = t.svc.String()
		}
		plural := ""
		if len(ports) > 1 {
			plural = "s"
		}
		parts = append(parts, fmt.Sprintf("Service %s's grpc port%s %s", name, plural, strings.Join(ports, ", ")))
	}
	return strings.Join(parts, " and ")
}

// maxNamedServices bounds the Services a MeshConfig warning names.
const maxNamedServices = 3

// meshGRPCPorts names the Services of st with grpc ports, as a
// MeshConfig's proxyless warnings name them: "the grpc ports of
// Services shop/api, shop/web and 2 more"; "" when none has one.
func meshGRPCPorts(st *state) string {
	var names []string
	n := 0
	for _, k := range sortedObjectKeys(st.objects) {
		svc, ok := serviceOf(st.objects[k])
		if !ok || !slices.ContainsFunc(svc.Spec.Ports, func(p ServicePort) bool { return p.AppProtocol == "grpc" }) {
			continue
		}
		if n++; n <= maxNamedServices {
			names = append(names, k.Namespace+"/"+k.Name)
		}
	}
	switch {
	case n == 0:
		return ""
	case n == 1:
		return "the grpc ports of Service " + names[0]
	case n > maxNamedServices:
		return fmt.Sprintf("the grpc ports of Services %s and %d more", strings.Join(names, ", "), n-maxNamedServices)
	}
	return "the grpc ports of Services " + strings.Join(names[:n-1], ", ") + " and " + names[n-1]
}

// missingService warns when ns/name is not a Service in st, and reports
// whether it is one.
func missingService(v *validator, st *state, field, ns, name, consequence string) bool {
	if _, ok := serviceOf(st.objects[Key{Kind: KindService, Namespace: ns, Name: name}]); ok {
		return true
	}
	v.warnf(field, "Service %q not found in namespace %q yet: %s%s", name, ns, consequence, didYouMean(name, namesOfKind(st, KindService, ns)))
	return false
}

// btpParts names the parts of a BackendTrafficPolicy that are set.
func btpParts(s *resilience.BackendTrafficPolicySpec) []string {
	var out []string
	for _, p := range []struct {
		name string
		set  bool
	}{
		{"timeouts", s.Timeouts != nil}, {"retry", s.Retry != nil}, {"circuitBreaker", s.CircuitBreaker != nil},
		{"outlierDetection", s.OutlierDetection != nil}, {"loadBalancer", s.LoadBalancer != nil}, {"faultInjection", s.FaultInjection != nil},
	} {
		if p.set {
			out = append(out, p.name)
		}
	}
	return out
}

// btpOverlaps warns when another BackendTrafficPolicy sets a part of the
// same target: the first by name wins it.
func btpOverlaps(v *validator, st *state, p *BackendTrafficPolicy) {
	ns := p.Metadata.Namespace
	mine := btpParts(&p.Spec)
	for _, other := range namesOfKind(st, KindBackendTrafficPolicy, ns) {
		if other == p.Metadata.Name {
			continue
		}
		o := st.objects[Key{Kind: KindBackendTrafficPolicy, Namespace: ns, Name: other}].(*BackendTrafficPolicy)
		var both []string
		for _, part := range btpParts(&o.Spec) {
			if slices.Contains(mine, part) {
				both = append(both, part)
			}
		}
		if len(both) == 0 {
			continue
		}
		for _, t := range p.Spec.TargetRefs {
			if !slices.ContainsFunc(o.Spec.TargetRefs, func(u resilience.TargetRef) bool { return u.Name == t.Name && u.SectionName == t.SectionName }) {
				continue
			}
			target := t.Name
			if t.SectionName != "" {
				target += " port " + t.SectionName
			}
			winner := p.Metadata.Name
			if other < winner {
				winner = other
			}
			v.warnf("spec.targetRefs", "BackendTrafficPolicy %s/%s also sets %s for Service %s: %q wins (the first by name); merge them into one policy", ns, other, strings.Join(both, ", "), target, winner)
			break
		}
	}
}

// resilienceIndex holds the failure-handling policies by what they
// govern. A policy names its Services and accounts by name, so a change
// of Services alone leaves it as it was: nextSnapshot shares it.
type resilienceIndex struct {
	defaults *resilience.Defaults
	// uts is the UpstreamTrafficSetting of each Service (the first by
	// name, should the store hold two).
	uts map[mesh.MeshService]resilience.Named[resilience.UpstreamTrafficSettingSpec]
	// attached are the BackendTrafficPolicies of each Service.
	attached map[mesh.MeshService][]resilience.Attached
	// retries are the Retry policies of each source and destination.
	retries map[mesh.ServiceAccount]map[mesh.MeshService][]resilience.Named[resilience.RetrySpec]
}

func newResilienceIndex(st *state, keys []Key, cfg *MeshConfig) *resilienceIndex {
	x := &resilienceIndex{defaults: cfg.Spec.Resilience,
		uts:      map[mesh.MeshService]resilience.Named[resilience.UpstreamTrafficSettingSpec]{},
		attached: map[mesh.MeshService][]resilience.Attached{},
		retries:  map[mesh.ServiceAccount]map[mesh.MeshService][]resilience.Named[resilience.RetrySpec]{},
	}
	for _, k := range keys {
		src := resilience.SourceOf(k.Kind, k.Namespace, k.Name)
		switch o := st.objects[k].(type) {
		case *UpstreamTrafficSetting:
			name, err := resilience.HostService(o.Spec.Host, k.Namespace)
			if err != nil {
				continue
			}
			svc := mesh.MeshService{Namespace: k.Namespace, Name: name}
			if _, ok := x.uts[svc]; !ok { // keys are in name order
				x.uts[svc] = resilience.Named[resilience.UpstreamTrafficSettingSpec]{Source: src, Spec: &o.Spec}
			}
		case *BackendTrafficPolicy:
			for _, t := range o.Spec.TargetRefs {
				svc := mesh.MeshService{Namespace: k.Namespace, Name: t.Name}
				x.attached[svc] = append(x.attached[svc], resilience.Attached{
					Named: resilience.Named[resilience.BackendTrafficPolicySpec]{Source: src, Spec: &o.Spec}, SectionName: t.SectionName})
			}
		case *Retry:
			sa := mesh.ServiceAccount{Namespace: o.Spec.Source.Namespace, Name: o.Spec.Source.Name}
			dsts := x.retries[sa]
			if dsts == nil {
				dsts = map[mesh.MeshService][]resilience.Named[resilience.RetrySpec]{}
				x.retries[sa] = dsts
			}
			for _, d := range o.Spec.Destinations {
				svc := mesh.MeshService{Namespace: d.Namespace, Name: d.Name}
				if !slices.ContainsFunc(dsts[svc], func(n resilience.Named[resilience.RetrySpec]) bool { return n.Source == src }) {
					dsts[svc] = append(dsts[svc], resilience.Named[resilience.RetrySpec]{Source: src, Spec: &o.Spec})
				}
			}
		}
	}
	return x
}

// resilienceCache holds one snapshot's answers (the index is shared with
// the next snapshot when only Services change, the answers are not: a
// Route depends on the port's protocol).
type resilienceCache struct {
	clusters sync.Map // mesh.MeshService -> resilience.Cluster
	routes   sync.Map // routeKey -> resilience.Route, for callers no Retry names
}

type routeKey struct {
	svc  mesh.MeshService
	port int
}

// ServiceResilience returns the effective policy of the callers' cluster
// of svc: what every caller shares (see package resilience for the
// precedence). The value is shared: it must not be modified.
func (s *Snapshot) ServiceResilience(svc mesh.MeshService) resilience.Cluster {
	if c, ok := s.resilienceCache.clusters.Load(svc); ok {
		return c.(resilience.Cluster)
	}
	x := s.resilience
	var uts *resilience.Named[resilience.UpstreamTrafficSettingSpec]
	if u, ok := x.uts[svc]; ok {
		uts = &u
	}
	c, _ := s.resilienceCache.clusters.LoadOrStore(svc, resilience.MergeCluster(x.defaults, uts, x.attached[svc]))
	return c.(resilience.Cluster)
}

// CallResilience returns the effective policy of src's calls to port of
// svc (a port number of svc; nothing for a port svc does not have). An
// HTTPRoute's or GRPCRoute's own timeouts and retry win over it where a
// call matches one: rendering applies that. The value is shared: it must
// not be modified.
func (s *Snapshot) CallResilience(src mesh.ServiceAccount, svc mesh.MeshService, port int) resilience.Route {
	info, ok := s.services[svc]
	if !ok {
		return resilience.Route{}
	}
	i := slices.IndexFunc(info.Ports, func(p ServicePort) bool { return p.Port == port })
	if i < 0 {
		return resilience.Route{}
	}
	p := resilience.Port{Name: info.Ports[i].Name, AppProtocol: info.Ports[i].AppProtocol}
	x := s.resilience
	retries := x.retries[src][svc]
	if len(retries) == 0 {
		k := routeKey{svc, port}
		if r, ok := s.resilienceCache.routes.Load(k); ok {
			return r.(resilience.Route)
		}
		r, _ := s.resilienceCache.routes.LoadOrStore(k, resilience.MergeRoute(x.defaults, p, x.attached[svc], nil, s.ServiceResilience(svc).LoadBalancer))
		return r.(resilience.Route)
	}
	return resilience.MergeRoute(x.defaults, p, x.attached[svc], retries, s.ServiceResilience(svc).LoadBalancer)
}

// InboundRateLimit returns the rate limits svc's own proxies enforce on
// the calls they receive (its UpstreamTrafficSetting's local rate
// limits), nil when none. The value must not be modified.
func (s *Snapshot) InboundRateLimit(svc mesh.MeshService) *resilience.RateLimit {
	u, ok := s.resilience.uts[svc]
	if !ok {
		return nil
	}
	return resilience.InboundRateLimit(&u)
}
