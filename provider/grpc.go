package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync/atomic"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	providerv1 "github.com/osm-vm/osm-vm/proto/provider/v1"
)

// grpcPlugin is the go-plugin glue: on the plugin side it registers a
// Provider as the gRPC service; on the host side it returns a Provider that
// calls it.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl Provider
}

func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	RegisterServer(s, p.impl)
	return nil
}

// RegisterServer registers p as the provider.v1 service on s, as Serve
// does over go-plugin: for a test, or a program that serves gRPC itself.
func RegisterServer(s grpc.ServiceRegistrar, p Provider) {
	providerv1.RegisterProviderServer(s, &grpcServer{impl: p})
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return NewGRPCClient(c), nil
}

// grpcServer adapts a Provider to the generated gRPC server interface.
type grpcServer struct {
	providerv1.UnimplementedProviderServer
	impl Provider
}

func (s *grpcServer) Describe(ctx context.Context, _ *providerv1.DescribeRequest) (*providerv1.DescribeResponse, error) {
	info, err := s.impl.Describe(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &providerv1.DescribeResponse{Name: info.Name, Version: info.Version, Description: info.Description}, nil
}

func (s *grpcServer) Configure(ctx context.Context, req *providerv1.ConfigureRequest) (*providerv1.ConfigureResponse, error) {
	if err := s.impl.Configure(ctx, req.GetInstance(), req.GetConfigJson()); err != nil {
		return nil, toStatus(err)
	}
	return &providerv1.ConfigureResponse{}, nil
}

func (s *grpcServer) ListServices(ctx context.Context, _ *providerv1.ListServicesRequest) (*providerv1.ListServicesResponse, error) {
	svcs, err := s.impl.ListServices(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &providerv1.ListServicesResponse{Services: make([]*providerv1.Service, len(svcs))}
	for i, svc := range svcs {
		resp.Services[i] = serviceToProto(svc)
	}
	return resp, nil
}

func (s *grpcServer) ListEndpoints(ctx context.Context, req *providerv1.ListEndpointsRequest) (*providerv1.ListEndpointsResponse, error) {
	eps, err := s.impl.ListEndpoints(ctx, serviceFromProto(req.GetService()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &providerv1.ListEndpointsResponse{Endpoints: endpointsToProto(eps)}, nil
}

// listAllChunk bounds the encoded services a ListAll message carries,
// well under gRPC's default 4 MiB receive limit.
const listAllChunk = 1 << 20

// ListAll sends what ListServices and ListEndpoints of each service return,
// chunked; a service deleted between the two is left out (the watch says
// so).
func (s *grpcServer) ListAll(_ *providerv1.ListAllRequest, stream grpc.ServerStreamingServer[providerv1.ListAllResponse]) error {
	ctx := stream.Context()
	svcs, err := s.impl.ListServices(ctx)
	if err != nil {
		return toStatus(err)
	}
	msg, size := &providerv1.ListAllResponse{}, 0
	for _, svc := range svcs {
		eps, err := s.impl.ListEndpoints(ctx, svc)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return toStatus(err)
		}
		se := &providerv1.ServiceEndpoints{Service: serviceToProto(svc), Endpoints: endpointsToProto(eps)}
		n := proto.Size(se)
		if size > 0 && size+n > listAllChunk {
			if err := stream.Send(msg); err != nil {
				return err
			}
			msg, size = &providerv1.ListAllResponse{}, 0
		}
		msg.Services = append(msg.Services, se)
		size += n
	}
	if len(msg.Services) == 0 {
		return nil // no services: the stream ends empty
	}
	return stream.Send(msg)
}

func (s *grpcServer) Watch(_ *providerv1.WatchRequest, stream grpc.ServerStreamingServer[providerv1.WatchEvent]) error {
	err := s.impl.Watch(stream.Context(), func(ev Event) error {
		return stream.Send(eventToProto(ev))
	})
	return toStatus(err)
}

// GRPCClient is the host's view of a provider plugin: a Provider that calls
// the plugin over gRPC. Errors wrap this package's sentinels.
type GRPCClient struct {
	client providerv1.ProviderClient
	// noListAll: the plugin answered ListAll UNIMPLEMENTED (built before
	// it), which it will for as long as it runs; later calls say so
	// without a round trip.
	noListAll atomic.Bool
}

var _ Provider = (*GRPCClient)(nil)

// NewGRPCClient returns a Provider that calls the provider service on conn.
func NewGRPCClient(conn grpc.ClientConnInterface) *GRPCClient {
	return &GRPCClient{client: providerv1.NewProviderClient(conn)}
}

func (c *GRPCClient) Describe(ctx context.Context) (Info, error) {
	resp, err := c.client.Describe(ctx, &providerv1.DescribeRequest{})
	if err != nil {
		return Info{}, fromStatus(err)
	}
	return Info{Name: resp.GetName(), Version: resp.GetVersion(), Description: resp.GetDescription()}, nil
}

func (c *GRPCClient) Configure(ctx context.Context, instance string, config []byte) error {
	_, err := c.client.Configure(ctx, &providerv1.ConfigureRequest{Instance: instance, ConfigJson: config})
	return fromStatus(err)
}

func (c *GRPCClient) ListServices(ctx context.Context) ([]Service, error) {
	resp, err := c.client.ListServices(ctx, &providerv1.ListServicesRequest{})
	if err != nil {
		return nil, fromStatus(err)
	}
	svcs := make([]Service, len(resp.GetServices()))
	for i, s := range resp.GetServices() {
		svcs[i] = serviceFromProto(s)
	}
	return svcs, nil
}

func (c *GRPCClient) ListEndpoints(ctx context.Context, svc Service) ([]Endpoint, error) {
	resp, err := c.client.ListEndpoints(ctx, &providerv1.ListEndpointsRequest{Service: serviceToProto(svc)})
	if err != nil {
		return nil, fromStatus(err)
	}
	return endpointsFromProto(resp.GetEndpoints())
}

// ListAll calls each for every service the plugin knows with its current
// endpoints, in one call. A plugin built before ListAll existed returns
// an error wrapping errors.ErrUnsupported before each is first called:
// list with ListServices and ListEndpoints instead. The client remembers
// that answer: later calls return it at once, without asking the plugin
// again at every resync.
func (c *GRPCClient) ListAll(ctx context.Context, each func(Service, []Endpoint) error) error {
	if c.noListAll.Load() {
		return fmt.Errorf("the plugin has no ListAll (built before it): %w", errors.ErrUnsupported)
	}
	stream, err := c.client.ListAll(ctx, &providerv1.ListAllRequest{})
	if err != nil {
		return c.listAllFailed(err)
	}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return c.listAllFailed(err)
		}
		for _, se := range msg.GetServices() {
			eps, err := endpointsFromProto(se.GetEndpoints())
			if err != nil {
				return err
			}
			if err := each(serviceFromProto(se.GetService()), eps); err != nil {
				return err
			}
		}
	}
}

// listAllFailed returns ListAll's error err as this package's, noting a
// plugin without ListAll.
func (c *GRPCClient) listAllFailed(err error) error {
	err = fromStatus(err)
	if errors.Is(err, errors.ErrUnsupported) {
		c.noListAll.Store(true)
	}
	return err
}

// Watch streams events until ctx is done (returning nil) or the stream
// breaks (returning the error, for example when the plugin died).
func (c *GRPCClient) Watch(ctx context.Context, send func(Event) error) error {
	stream, err := c.client.Watch(ctx, &providerv1.WatchRequest{})
	if err != nil {
		return fromStatus(err)
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, io.EOF) {
				return errors.New("provider ended its watch stream")
			}
			return fromStatus(err)
		}
		ev, err := eventFromProto(msg)
		if err != nil {
			return err
		}
		if err := send(ev); err != nil {
			return err
		}
	}
}

func serviceToProto(s Service) *providerv1.Service {
	return &providerv1.Service{Namespace: s.Namespace, Name: s.Name}
}

func serviceFromProto(s *providerv1.Service) Service {
	return Service{Namespace: s.GetNamespace(), Name: s.GetName()}
}

func endpointsToProto(eps []Endpoint) []*providerv1.Endpoint {
	out := make([]*providerv1.Endpoint, len(eps))
	for i, e := range eps {
		out[i] = &providerv1.Endpoint{Ip: e.IP.String(), Port: uint32(e.Port), Labels: e.Labels}
	}
	return out
}

func endpointsFromProto(eps []*providerv1.Endpoint) ([]Endpoint, error) {
	out := make([]Endpoint, len(eps))
	for i, e := range eps {
		ip, err := netip.ParseAddr(e.GetIp())
		if err != nil {
			return nil, fmt.Errorf("provider sent endpoint with bad IP %q: %w", e.GetIp(), err)
		}
		if e.GetPort() == 0 || e.GetPort() > 65535 {
			return nil, fmt.Errorf("provider sent endpoint %s with bad port %d", e.GetIp(), e.GetPort())
		}
		out[i] = Endpoint{IP: ip, Port: uint16(e.GetPort()), Labels: e.GetLabels()}
	}
	return out, nil
}

func eventToProto(ev Event) *providerv1.WatchEvent {
	switch {
	case ev.Health != nil:
		return &providerv1.WatchEvent{Event: &providerv1.WatchEvent_Health{
			Health: &providerv1.Health{Healthy: ev.Health.Healthy, Message: ev.Health.Message}}}
	case ev.Deleted:
		return &providerv1.WatchEvent{Event: &providerv1.WatchEvent_Deleted{Deleted: serviceToProto(ev.Service)}}
	default:
		return &providerv1.WatchEvent{Event: &providerv1.WatchEvent_Updated{Updated: &providerv1.ServiceEndpoints{
			Service: serviceToProto(ev.Service), Endpoints: endpointsToProto(ev.Endpoints)}}}
	}
}

func eventFromProto(msg *providerv1.WatchEvent) (Event, error) {
	switch e := msg.GetEvent().(type) {
	case *providerv1.WatchEvent_Health:
		return Event{Health: &Health{Healthy: e.Health.GetHealthy(), Message: e.Health.GetMessage()}}, nil
	case *providerv1.WatchEvent_Deleted:
		return Deleted(serviceFromProto(e.Deleted)), nil
	case *providerv1.WatchEvent_Updated:
		eps, err := endpointsFromProto(e.Updated.GetEndpoints())
		if err != nil {
			return Event{}, err
		}
		return Updated(serviceFromProto(e.Updated.GetService()), eps), nil
	default:
		return Event{}, fmt.Errorf("provider sent an empty or unknown watch event (%T); is the plugin built for a newer API?", e)
	}
}
