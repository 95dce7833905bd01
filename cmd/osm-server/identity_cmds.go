package main

// The proxy and ca subcommands. Like every admin subcommand they are
// clients of the HTTPS API.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/osm-vm/osm-vm/internal/api"
	"github.com/osm-vm/osm-vm/internal/certificate"
)

func newProxyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "List and revoke enrolled proxies",
	}
	cmd.AddCommand(newProxyListCmd(), newProxyRevokeCmd())
	return cmd
}

func newProxyListCmd() *cobra.Command {
	var (
		cf     adminClientFlags
		output string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List enrolled proxies: identity, service, state, the certificates still accepted (current and overlap), last seen",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var body struct {
				Items []certificate.ProxyRecord `json:"items"`
			}
			if err := adminCall(cmd.Context(), &cf, http.MethodGet, "/api/v1/proxies", &body); err != nil {
				return err
			}
			return printList(cmd.OutOrStdout(), output, body.Items, proxyHeader, proxyRow)
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

const proxyHeader = "CN\tSERVICE\tSTATE\tSERIAL\tISSUED\tEXPIRES\tOVERLAP (SERIAL UNTIL)\tLAST SEEN"

// proxyRow is a proxy's line of `proxy list`: every certificate still
// accepted, the current one (serial, issued, expires) and the overlap one
// (the certificate the proxy renewed with, accepted until it expires).
func proxyRow(p certificate.ProxyRecord) string {
	seen := "never"
	if !p.LastSeen.IsZero() {
		seen = p.LastSeen.Format(time.RFC3339)
	}
	overlap := "-"
	if o := p.Overlap; o != nil {
		overlap = o.Serial + " until " + o.Expires.Format(time.RFC3339)
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", p.CN, p.Service, p.State, p.Serial, p.Issued.Format(time.RFC3339), p.Expires.Format(time.RFC3339), overlap, seen)
}

func newProxyRevokeCmd() *cobra.Command {
	var cf adminClientFlags
	cmd := &cobra.Command{
		Use:   "revoke CN",
		Short: "Revoke a proxy: its certificate is refused from now on and its live xDS streams are closed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := adminCall(cmd.Context(), &cf, http.MethodPost, "/api/v1/proxies/"+url.PathEscape(args[0])+"/revoke", nil); err != nil {
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "proxy %s revoked\n", args[0])
			return err
		},
	}
	cf.register(cmd)
	return cmd
}

func newCACmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Show the mesh certificate authority",
	}
	var cf adminClientFlags
	show := &cobra.Command{
		Use:   "show",
		Short: "Print the mesh root certificate (PEM) and its hash for --ca-cert-hash",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var ca api.CAInfo
			if err := adminCall(cmd.Context(), &cf, http.MethodGet, "/api/v1/ca", &ca); err != nil {
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s\n%s", ca.Hash, ca.PEM)
			return err
		},
	}
	cf.register(show)
	cmd.AddCommand(show)
	return cmd
}

// adminCall makes one JSON call to the HTTPS API with the admin token and
// decodes the answer into out (when not nil).
func adminCall(ctx context.Context, cf *adminClientFlags, method, path string, out any) error {
	base, hc, token, err := cf.connection()
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s%s: %w", method, base, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s", e.Error)
		}
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode the answer of %s %s: %w", method, path, err)
	}
	return nil
}
