package main

// The proxy and ca subcommands. Like every admin subcommand they are
// clients of the HTTPS API.

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/osm-vm/osm-vm/internal/meshapi"
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
			c, err := cf.admin()
			if err != nil {
				return err
			}
			items, err := c.ListProxies(cmd.Context())
			if err != nil {
				return err
			}
			return printList(cmd.OutOrStdout(), output, items, proxyHeader, proxyRow)
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
func proxyRow(p meshapi.Proxy) string {
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
			c, err := cf.admin()
			if err != nil {
				return err
			}
			if err := c.RevokeProxy(cmd.Context(), args[0]); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "proxy %s revoked\n", args[0])
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
			c, err := cf.admin()
			if err != nil {
				return err
			}
			ca, err := c.CA(cmd.Context())
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n%s", ca.Hash, ca.PEM)
			return err
		},
	}
	cf.register(show)
	cmd.AddCommand(show)
	return cmd
}
