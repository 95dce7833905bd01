package agent

import (
	"context"
	"os/exec"

	"github.com/osm-vm/osm-vm/internal/agent/sidecar"
)

// ProxyNone is the sidecar driver of proxyless machines (config
// `proxy: none`, `osm-agent install --proxy none`): the agent runs no
// proxy process but still enrolls, renews the proxy certificate, polls the
// server, writes grpc-bootstrap.json and the service certificate files,
// and keeps the hosts block. The machine's gRPC applications connect to
// the xDS server themselves with GRPC_XDS_BOOTSTRAP pointing at the
// bootstrap.
const ProxyNone = "none"

// noProxy is the "none" driver: it renders no files of its own (the agent
// writes the gRPC bootstrap for every driver) and runs no process.
type noProxy struct{}

func noProxyFactory(sidecar.Options) (sidecar.Driver, error) { return noProxy{}, nil }

func (noProxy) Name() string                                      { return ProxyNone }
func (noProxy) Files(sidecar.ProxyConfig) ([]sidecar.File, error) { return nil, nil }
func (noProxy) BootstrapFile() string                             { return GRPCBootstrapFile }
func (noProxy) Check() error                                      { return nil }
func (noProxy) Command() *exec.Cmd                                { return nil }
func (noProxy) Drain(context.Context) error                       { return nil }
