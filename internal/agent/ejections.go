package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/osm-vm/osm-vm/internal/agent/envoy"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
)

// DefaultEjectionCheck is how often the agent reads which backends its
// Envoy has ejected (Options.EjectionCheck).
const DefaultEjectionCheck = 5 * time.Second

// reportEjections reads, every Options.EjectionCheck while Envoy runs,
// the backends its outlier detection has ejected (Envoy's admin
// /clusters) and reports them to the osm-server replicas through the
// agent API, as the gateway certificate report goes: when they change,
// and again every meshapi.EjectionRefresh while any is ejected. A proxy
// that never ejects anything sends nothing. Until ctx is done.
func (a *Agent) reportEjections(ctx context.Context) {
	t := time.NewTicker(a.opts.EjectionCheck)
	defer t.Stop()
	var last meshapi.EjectionReport // what the servers took last
	var sentAt time.Time
	hc := &http.Client{} // each read is bounded by its context
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !a.sup.Status().Running {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, a.opts.EjectionCheck)
		ejected, err := envoy.Ejected(cctx, hc, a.cfg.AdminPort)
		cancel()
		if err != nil {
			a.log.Debug("read Envoy's ejected backends", "err", err)
			continue
		}
		rep := ejectionReport(ejected)
		changed := !slices.EqualFunc(rep.Clusters, last.Clusters, func(x, y meshapi.EjectedCluster) bool {
			return x.Cluster == y.Cluster && slices.Equal(x.Hosts, y.Hosts)
		})
		if !changed && (len(rep.Clusters) == 0 || time.Since(sentAt) < meshapi.EjectionRefresh) {
			continue
		}
		if changed {
			a.log.Info("Envoy's ejected backends changed", "ejected", rep.Clusters)
		}
		if err := a.sendEjections(ctx, rep); err != nil {
			if ctx.Err() == nil {
				a.log.Warn("ejection report not taken by any osm-server replica; sent again at the next check", "err", err)
			}
			continue
		}
		last, sentAt = rep, time.Now()
	}
}

// ejectionReport turns Envoy's ejected hosts by cluster into a report,
// ordered by cluster and within the wire's bounds.
func ejectionReport(ejected map[string][]string) meshapi.EjectionReport {
	rep := meshapi.EjectionReport{Clusters: []meshapi.EjectedCluster{}}
	for c, hosts := range ejected {
		if len(c) > meshapi.MaxEjectionText {
			continue // no cluster the mesh names
		}
		rep.Clusters = append(rep.Clusters, meshapi.EjectedCluster{Cluster: c, Hosts: hosts[:min(len(hosts), meshapi.MaxEjectedHosts)]})
	}
	slices.SortFunc(rep.Clusters, func(x, y meshapi.EjectedCluster) int { return strings.Compare(x.Cluster, y.Cluster) })
	rep.Clusters = rep.Clusters[:min(len(rep.Clusters), meshapi.MaxEjectedClusters)]
	return rep
}

// sendEjections sends rep to every replica the agent knows; it fails when
// none took it.
func (a *Agent) sendEjections(ctx context.Context, rep meshapi.EjectionReport) error {
	id, _ := a.identity()
	cert, err := id.TLS()
	if err != nil {
		return err
	}
	servers := a.reportServers()
	var errs []error
	for _, s := range servers {
		if err := meshclient.SendEjectionReport(ctx, s, id.CAPEM, cert, rep); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s, err))
		}
	}
	if len(errs) == len(servers) {
		return errors.Join(errs...)
	}
	return nil
}
