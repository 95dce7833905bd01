// Package dashboard is osm-server's read-only live view of the mesh: a web
// page (its assets embedded in the binary, nothing fetched from elsewhere)
// and the JSON state it polls. The page shows the services and who may call
// whom, traffic splits with their weights, each service's endpoints with
// their provider and health and the backends its callers' Envoys have
// ejected right now, the connected proxies with their last ACK and NACK,
// and certificate expiry; and, on demand, one Service's detail: its
// effective failure handling (package resilienceview) and its ejected
// backends by caller.
//
// The page itself carries no data and is served openly; the state is
// served by the debug listener behind the admin token (see internal/api and
// docs/security.md): the page sends the token as a header, taking it from
// the URL's fragment (never sent to a server) or from a field the operator
// fills in. The state holds no secret: certificates are described by
// expiry only.
//
// dashboard reads the mesh through the small interfaces it declares; it
// does not import the xDS server or the certificate manager.
package dashboard

import (
	"embed"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/clip"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/pluginhost"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/spec/resilienceview"
)

//go:embed assets
var assets embed.FS

// Spec is the mesh specification the dashboard reads.
type Spec interface{ Snapshot() *spec.Snapshot }

// Catalog is the discovered endpoints the dashboard reads.
type Catalog interface{ Snapshot() *catalog.Snapshot }

// Providers is the plugin host's view the dashboard reads.
type Providers interface{ Status() []pluginhost.Status }

// Proxy is one connected proxy as the dashboard shows it.
type Proxy struct {
	CN        string    `json:"cn"`
	Service   string    `json:"service"`
	Flavor    string    `json:"flavor"`
	Address   string    `json:"address"`
	Connected time.Time `json:"connected"`
	// LastACK is the latest ACK of any type.
	LastACK time.Time `json:"lastAck,omitzero"`
	// NACK is the last rejection's message and type, if any.
	NACK     string    `json:"nack,omitempty"`
	NACKType string    `json:"nackType,omitempty"`
	NACKAt   time.Time `json:"nackAt,omitzero"`
}

// Certificate is one certificate's expiry.
type Certificate struct {
	Name     string    `json:"name"`
	Expires  time.Time `json:"expires"`
	RotateAt time.Time `json:"rotateAt,omitzero"`
}

// Sources are what the dashboard shows.
type Sources struct {
	Spec         Spec
	Catalog      Catalog
	Providers    Providers
	Proxies      func() []Proxy
	Certificates func() (ca Certificate, services []Certificate)
	// Ejections are the latest ejection reports of the proxies, by CN
	// (only those of connected proxies are shown).
	Ejections func() map[string]meshapi.EjectionReport
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Dashboard serves the page and its state.
type Dashboard struct{ src Sources }

// New returns a dashboard over src.
func New(src Sources) *Dashboard {
	if src.Now == nil {
		src.Now = time.Now
	}
	return &Dashboard{src: src}
}

// Page serves the page and its assets (under the path it is mounted at,
// which it strips itself: mount it on a pattern ending in "/").
func (d *Dashboard) Page(prefix string) http.Handler {
	sub, _ := fs.Sub(assets, "assets")
	files := http.StripPrefix(prefix, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Cache-Control", "no-store")
		files.ServeHTTP(w, r)
	})
}

// State serves the JSON state the page polls, with an ETag of its
// content: a request whose If-None-Match names the current state is
// answered 304 without a body, so a page polling a mesh that did not
// change neither downloads nor parses nor draws anything.
func (d *Dashboard) State() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := json.Marshal(d.Build())
		if err != nil {
			http.Error(w, "dashboard state: "+err.Error(), http.StatusInternalServerError)
			return
		}
		h := fnv.New64a()
		h.Write(body)
		tag := fmt.Sprintf(`"%016x"`, h.Sum64())
		w.Header().Set("ETag", tag)
		w.Header().Set("Cache-Control", "no-store") // the page revalidates by its own If-None-Match
		if r.Header.Get("If-None-Match") == tag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	})
}

// State is the body of the dashboard's state route. It holds no clock
// reading (the response's Date header says when), so an unchanged mesh
// has an unchanged state.
type State struct {
	Permissive bool      `json:"permissive"`
	Services   []Service `json:"services"`
	Edges      []Edge    `json:"edges"`
	// EdgesTruncated is set when there were more than MaxEdges.
	EdgesTruncated bool          `json:"edgesTruncated,omitempty"`
	Splits         []Split       `json:"splits"`
	Providers      []Provider    `json:"providers"`
	Proxies        []Proxy       `json:"proxies"`
	CA             Certificate   `json:"ca"`
	Certificates   []Certificate `json:"certificates"`
	// Warnings name what needs attention soon: certificates past their
	// rotation time or close to expiry, stale providers, NACKs.
	Warnings []string `json:"warnings"`
}

// Service is one service of the specification or the catalog.
type Service struct {
	Name           string     `json:"name"` // namespace/name
	ServiceAccount string     `json:"serviceAccount,omitempty"`
	VIP            string     `json:"vip,omitempty"`
	InSpec         bool       `json:"inSpec"`
	Endpoints      []Endpoint `json:"endpoints"`
	// Ejected are the backends of the service its callers' Envoys have
	// ejected right now (outlier detection), as they report them.
	Ejected []Ejected `json:"ejected,omitempty"`
}

// Ejected is one ejected backend and the callers whose Envoy ejected it.
type Ejected struct {
	Backend string `json:"backend"` // ip:port
	// By are the callers: "namespace/service (proxy CN)".
	By []string `json:"by"`
}

// Endpoint is one discovered endpoint and its health.
type Endpoint struct {
	Address  string `json:"address"`
	Provider string `json:"provider"`
	// Health: "stale" when its provider is down and this is the last value
	// it reported; "proxy" when a proxy of the service is connected from
	// its address; "discovered" otherwise.
	Health string `json:"health"`
}

// Edge says that From may call To.
type Edge struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Split is a TrafficSplit.
type Split struct {
	Policy   string    `json:"policy"`
	Root     string    `json:"root"`
	Backends []Backend `json:"backends"`
}

// Backend is one weighted backend of a split.
type Backend struct {
	Service string `json:"service"`
	Weight  int    `json:"weight"`
}

// Provider is one provider plugin's state.
type Provider struct {
	Name     string    `json:"name"`
	State    string    `json:"state"`
	Stale    bool      `json:"stale"`
	LastSync time.Time `json:"lastSync,omitzero"`
}

// MaxEdges bounds the edges in a state: a permissive mesh of 1,000
// services has a million, which no page draws usefully.
const MaxEdges = 20000

// A proxy's NACK message is the proxy's to choose (osm-server cuts it as
// it receives it; the dashboard bounds what it shows itself): a row shows
// at most MaxNACK bytes of it, and its warning is at most MaxWarning
// bytes in all.
const (
	MaxNACK    = 2048
	MaxWarning = 512
)

// CAWarning is how long before the CA expires the dashboard warns.
const CAWarning = 30 * 24 * time.Hour

// Build returns the current state.
func (d *Dashboard) Build() State {
	now := d.src.Now()
	sp := d.src.Spec.Snapshot()
	cat := d.src.Catalog.Snapshot()
	st := State{Permissive: sp.Permissive(), Services: []Service{}, Edges: []Edge{}, Splits: []Split{}, Providers: []Provider{}, Proxies: []Proxy{}, Certificates: []Certificate{}, Warnings: []string{}}

	stale := map[string]bool{}
	for _, p := range d.src.Providers.Status() {
		stale[p.Name] = p.StaleSince != nil
		st.Providers = append(st.Providers, Provider{Name: p.Name, State: p.State, Stale: p.StaleSince != nil, LastSync: p.LastSync})
		if p.StaleSince != nil {
			st.Warnings = append(st.Warnings, "provider "+p.Name+" is down: its endpoints are the last it reported (since "+p.StaleSince.UTC().Format(time.RFC3339)+")")
		}
	}
	if d.src.Proxies != nil {
		st.Proxies = append(st.Proxies, d.src.Proxies()...)
	}
	connected := map[string]bool{} // service + " " + address
	for i, p := range st.Proxies {
		connected[p.Service+" "+p.Address] = true
		if p.NACK != "" {
			st.Proxies[i].NACK = clip.String(p.NACK, MaxNACK)
			st.Warnings = append(st.Warnings, clip.String("proxy "+p.CN+" rejected its "+p.NACKType+" configuration: "+p.NACK, MaxWarning))
		}
	}

	byName := map[string]int{}
	add := func(name string) int {
		if i, ok := byName[name]; ok {
			return i
		}
		st.Services = append(st.Services, Service{Name: name, Endpoints: []Endpoint{}})
		byName[name] = len(st.Services) - 1
		return len(st.Services) - 1
	}
	for _, info := range sp.Services() {
		i := add(info.Service.String())
		st.Services[i].InSpec = true
		st.Services[i].ServiceAccount = info.ServiceAccount.Namespace + "/" + info.ServiceAccount.Name
		if info.VIP.IsValid() {
			st.Services[i].VIP = info.VIP.String()
		}
	}
	for _, svc := range cat.Services() {
		i := add(svc.String())
		se, _ := cat.Endpoints(svc)
		for _, e := range se.Endpoints {
			addr := e.AddrPort().String()
			health := "discovered"
			switch {
			case stale[e.Provider]:
				health = "stale"
			case connected[svc.String()+" "+e.IP.String()]:
				health = "proxy"
			}
			st.Services[i].Endpoints = append(st.Services[i].Endpoints, Endpoint{Address: addr, Provider: e.Provider, Health: health})
		}
	}
	for svc, ej := range d.ejected(st.Proxies) {
		if i, ok := byName[svc.String()]; ok {
			st.Services[i].Ejected = ej
		}
	}
	slices.SortFunc(st.Services, func(a, b Service) int { return strings.Compare(a.Name, b.Name) })

	if !st.Permissive {
	edges:
		for _, info := range sp.Services() {
			for _, up := range sp.Upstreams(info.ServiceAccount) {
				if len(st.Edges) == MaxEdges {
					st.EdgesTruncated = true
					break edges
				}
				st.Edges = append(st.Edges, Edge{From: info.Service.String(), To: up.String()})
			}
		}
	}
	for _, info := range sp.Services() {
		if s, ok := sp.Split(info.Service); ok {
			out := Split{Policy: s.Policy.Namespace + "/" + s.Policy.Name, Root: s.Root.String()}
			for _, b := range s.Backends {
				out.Backends = append(out.Backends, Backend{Service: b.Service.String(), Weight: b.Weight})
			}
			st.Splits = append(st.Splits, out)
		}
	}

	if d.src.Certificates != nil {
		ca, services := d.src.Certificates()
		st.CA = ca
		st.Certificates = append(st.Certificates, services...)
		if ca.Expires.Sub(now) < CAWarning {
			st.Warnings = append(st.Warnings, "the mesh CA expires "+ca.Expires.UTC().Format(time.RFC3339)+": plan its rotation")
		}
		for _, c := range services {
			switch {
			case !c.Expires.After(now):
				st.Warnings = append(st.Warnings, "service certificate "+c.Name+" EXPIRED at "+c.Expires.UTC().Format(time.RFC3339))
			case !c.RotateAt.IsZero() && now.After(c.RotateAt.Add(time.Minute)):
				st.Warnings = append(st.Warnings, "service certificate "+c.Name+" is past its rotation time and expires "+c.Expires.UTC().Format(time.RFC3339)+": is the CA rotating?")
			}
		}
	}
	return st
}

// ejected returns, for each Service, the backends the connected proxies
// report ejected. An Envoy's cluster for a mesh Service is named by the
// Service (namespace/name); its other clusters are passed over.
func (d *Dashboard) ejected(proxies []Proxy) map[mesh.MeshService][]Ejected {
	if d.src.Ejections == nil {
		return nil
	}
	byCN := map[string]Proxy{}
	for _, p := range proxies {
		byCN[p.CN] = p
	}
	by := map[mesh.MeshService]map[string][]string{} // backend -> callers
	for cn, rep := range d.src.Ejections() {
		p, ok := byCN[cn]
		if !ok {
			continue // not connected: its report is not news
		}
		for _, c := range rep.Clusters {
			ns, name, ok := strings.Cut(c.Cluster, "/")
			svc := mesh.MeshService{Namespace: ns, Name: name}
			if !ok || svc.Validate() != nil {
				continue
			}
			if by[svc] == nil {
				by[svc] = map[string][]string{}
			}
			for _, h := range c.Hosts {
				by[svc][h] = append(by[svc][h], p.Service+" ("+cn+")")
			}
		}
	}
	out := make(map[mesh.MeshService][]Ejected, len(by))
	for svc, hosts := range by {
		for h, callers := range hosts {
			slices.Sort(callers)
			out[svc] = append(out[svc], Ejected{Backend: h, By: callers})
		}
		slices.SortFunc(out[svc], func(a, b Ejected) int { return strings.Compare(a.Backend, b.Backend) })
	}
	return out
}

// ServiceDetail is one Service as the page shows it when chosen: its
// effective failure handling and its ejected backends.
type ServiceDetail struct {
	Resilience resilienceview.Service `json:"resilience"`
	Ejected    []Ejected              `json:"ejected"`
	// ProxylessCallers are the connected proxyless gRPC proxies of the
	// Service's callers ("namespace/service (CN)"): gRPC clients report no
	// ejections, so theirs are not in Ejected.
	ProxylessCallers []string `json:"proxylessCallers"`
}

// Detail returns the detail of svc; false when the specification has no
// such Service.
func (d *Dashboard) Detail(svc mesh.MeshService) (ServiceDetail, bool) {
	snap := d.src.Spec.Snapshot()
	view, ok := resilienceview.Of(snap, svc)
	if !ok {
		return ServiceDetail{}, false
	}
	var proxies []Proxy
	if d.src.Proxies != nil {
		proxies = d.src.Proxies()
	}
	out := ServiceDetail{Resilience: view, Ejected: d.ejected(proxies)[svc], ProxylessCallers: []string{}}
	if out.Ejected == nil {
		out.Ejected = []Ejected{}
	}
	callers := map[string]bool{}
	for _, c := range resilienceview.Callers(snap, svc) {
		callers[c.Service.String()] = true
	}
	for _, p := range proxies {
		if p.Flavor == "grpc" && callers[p.Service] {
			out.ProxylessCallers = append(out.ProxylessCallers, p.Service+" ("+p.CN+")")
		}
	}
	slices.Sort(out.ProxylessCallers)
	return out, true
}

// ServiceDetailHandler serves Detail: GET ...?service=namespace/name.
func (d *Dashboard) ServiceDetailHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("service")
		ns, n, _ := strings.Cut(name, "/")
		svc := mesh.MeshService{Namespace: ns, Name: n}
		if err := svc.Validate(); err != nil {
			http.Error(w, fmt.Sprintf("service=%q: want namespace/name: %v", name, err), http.StatusBadRequest)
			return
		}
		detail, ok := d.Detail(svc)
		if !ok {
			http.Error(w, fmt.Sprintf("Service %s not found in the mesh specification", svc), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(detail)
	})
}
