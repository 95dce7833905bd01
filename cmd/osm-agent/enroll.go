package main

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/osm-vm/osm-vm/internal/agent"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
)

// enrollConfig is the parsed and checked input of `osm-agent enroll`.
type enrollConfig struct {
	// join.Server is set to each of servers in turn (meshclient.Failover).
	join    meshclient.JoinRequest
	servers []string
	dataDir string
	force   bool
	timeout time.Duration
}

func newEnrollCmd(stdout, stderr io.Writer) *cobra.Command {
	var (
		cfg                enrollConfig
		tokenFile          string
		service, namespace string
	)
	cmd := &cobra.Command{
		Use:   "enroll --server URL --token TOKEN --ca-cert-hash sha256:HEX --service NAME [--namespace NS]",
		Short: "Join this machine to the mesh with a join token",
		Long: `Join this machine to the mesh with a join token from
'osm-server token create', which prints this command ready to paste.

A new ECDSA P-256 key is generated here and never leaves the machine. The
server is trusted only if its TLS chain contains the mesh CA whose hash is
--ca-cert-hash; this is checked before the token is sent. The proxy key
(proxy.key, mode 0600), certificate (proxy.crt) and mesh CA (ca.crt) are
written into the data directory, and the proxy identity is printed.`,
		Example: `  osm-agent enroll --server https://10.0.0.5:15443 --token 3f9c…e1 \
    --ca-cert-hash sha256:5b1e…07 --service bookstore --namespace default`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := commandLogger(cmd, stderr)
			if err != nil {
				return err
			}
			if tokenFile != "" {
				if cfg.join.Token != "" {
					return errors.New("give --token or --token-file, not both")
				}
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return fmt.Errorf("--token-file: %w", err)
				}
				cfg.join.Token = strings.TrimSpace(string(b))
			}
			cfg.join.Service = mesh.MeshService{Namespace: namespace, Name: service}
			return runEnroll(cmd.Context(), log, stdout, cfg)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&cfg.servers, "server", nil, "osm-server API address, https://host:port; repeat it (or separate with commas) for several replicas, tried in order")
	f.StringVar(&cfg.join.Token, "token", "", "join token printed by 'osm-server token create'")
	f.StringVar(&tokenFile, "token-file", "", "read the join token from this file instead of --token (keeps it out of the process list)")
	f.StringVar(&cfg.join.CACertHash, "ca-cert-hash", "", "sha256:<hex> pin of the mesh CA, printed by 'osm-server token create'")
	f.StringVar(&service, "service", "", "mesh service this machine runs (the token is bound to it)")
	f.StringVar(&namespace, "namespace", "default", "namespace of the service")
	f.StringVar(&cfg.dataDir, "data-dir", agent.DefaultDataDir(), "directory for the proxy key, certificate and mesh CA")
	f.BoolVar(&cfg.force, "force", false, "enroll again even if the data directory already holds an identity (replaces it)")
	f.DurationVar(&cfg.timeout, "timeout", 30*time.Second, "give up on the server after this long")
	for _, name := range []string{"server", "ca-cert-hash", "service"} {
		_ = cmd.MarkFlagRequired(name) // only fails for a flag that does not exist
	}
	return cmd
}

// runEnroll checks everything it can locally, so that the token is spent
// only when the identity can be saved, then enrolls and saves it.
func runEnroll(ctx context.Context, log *slog.Logger, stdout io.Writer, cfg enrollConfig) error {
	if cfg.join.Token == "" {
		return errors.New("no join token: pass --token or --token-file (create one with `osm-server token create` on the server)")
	}
	if err := cfg.join.Service.Validate(); err != nil {
		return fmt.Errorf("--service/--namespace: %w", err)
	}
	if _, err := meshapi.ParseCAHash(cfg.join.CACertHash); err != nil {
		return err
	}
	if id, err := agent.LoadIdentity(cfg.dataDir); err == nil && !cfg.force {
		cn := "an unknown identity"
		if c, err := id.TLS(); err == nil {
			cn = c.Leaf.Subject.CommonName
		}
		return fmt.Errorf("this machine is already enrolled as %s (%s): pass --force to replace its identity, or --data-dir for another one", cn, cfg.dataDir)
	}
	if err := checkWritable(cfg.dataDir); err != nil {
		return fmt.Errorf("data directory %s: %w (run as root, or pass --data-dir)", cfg.dataDir, err)
	}

	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	log.Debug("enrolling", "servers", cfg.servers, "service", cfg.join.Service.String())
	req := &agent.CertRequest{Dir: cfg.dataDir}
	res, id, err := req.Obtain(ctx, nil, func(ctx context.Context, key crypto.Signer) (meshclient.Result, error) {
		res, _, err := meshclient.Failover(ctx, cfg.servers, func(ctx context.Context, server string) (meshclient.Result, error) {
			join := cfg.join
			join.Server = server
			return meshclient.Enroll(ctx, nil, join, key)
		})
		return res, err
	})
	var saveErr *agent.SaveError
	if errors.As(err, &saveErr) {
		return fmt.Errorf("enrolled as %s, but %w; the token use is spent: create a new token with `osm-server token create` and enroll again", res.Identity, err)
	}
	if err != nil {
		return err
	}
	expires := "unknown"
	if c, err := id.TLS(); err == nil {
		expires = c.Leaf.NotAfter.UTC().Format(time.RFC3339)
	}
	_, err = fmt.Fprintf(stdout, "Enrolled as %s\n  certificate: %s (expires %s)\n  key:         %s\n  mesh CA:     %s\n  xDS server:  %s\n",
		res.Identity,
		filepath.Join(cfg.dataDir, agent.CertFile), expires,
		filepath.Join(cfg.dataDir, agent.KeyFile),
		filepath.Join(cfg.dataDir, agent.CAFile),
		res.XDSAddress)
	return err
}

// checkWritable makes dir (0700) and checks a file can be created in it.
func checkWritable(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".write-check*")
	if err != nil {
		return err
	}
	name := f.Name()
	if err := f.Close(); err != nil {
		return err
	}
	return os.Remove(name)
}
