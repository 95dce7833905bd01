package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/osm-vm/osm-vm/internal/meshclient"
	"github.com/osm-vm/osm-vm/internal/spec/specclient"
)

// adminClientFlags are the flags every admin client subcommand takes: the
// subcommands are clients of a running server's HTTPS API, which may run
// on another host (and the bbolt store allows one process anyway).
type adminClientFlags struct {
	server, token, caFile, dataDir string
}

func (f *adminClientFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.server, "server", "https://127.0.0.1:15443", "URL of the osm-server API")
	fs.StringVar(&f.token, "admin-token", "", "admin token (default $OSM_ADMIN_TOKEN, then <data-dir>/admin.token)")
	fs.StringVar(&f.caFile, "ca-file", "", "PEM file of the mesh CA that signs the server's certificate (default <data-dir>/ca.crt when it exists)")
	fs.StringVar(&f.dataDir, "data-dir", defaultDataDir(), "server data directory, read for the admin token and CA when run on the server host")
}

// admin returns the admin API client every subcommand uses: the server
// URL, an HTTP client trusting the mesh CA, and the admin token.
func (f *adminClientFlags) admin() (*meshclient.Admin, error) {
	token := f.token
	if token == "" {
		token = os.Getenv("OSM_ADMIN_TOKEN")
	}
	if token == "" && f.dataDir != "" {
		if b, err := os.ReadFile(filepath.Join(f.dataDir, adminTokenFile)); err == nil {
			token = strings.TrimSpace(string(b))
		}
	}
	caFile := f.caFile
	if caFile == "" && f.dataDir != "" {
		if p := filepath.Join(f.dataDir, caCertFile); fileExists(p) {
			caFile = p
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s: no PEM certificate found: pass the mesh CA certificate", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return meshclient.NewAdmin(f.server, &http.Client{Transport: tr, Timeout: time.Minute}, token), nil
}

func (f *adminClientFlags) specClient() (*specclient.Client, error) {
	admin, err := f.admin()
	if err != nil {
		return nil, err
	}
	return specclient.New(admin), nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
