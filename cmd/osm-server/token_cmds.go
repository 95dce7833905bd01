package main

// The join token subcommands: token create, list and revoke. Like every
// admin subcommand they are clients of the HTTPS API.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/osm-vm/osm-vm/internal/join"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
)

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create, list and revoke join tokens for enrolling machines",
	}
	cmd.AddCommand(newTokenCreateCmd(), newTokenListCmd(), newTokenRevokeCmd())
	return cmd
}

func newTokenCreateCmd() *cobra.Command {
	var (
		cf         adminClientFlags
		svc        mesh.MeshService
		account    string
		ttl        time.Duration
		uses       int
		joinServer string
		print      string
	)
	cmd := &cobra.Command{
		Use:   "create --service S [--namespace N]",
		Short: "Create a join token and print the osm-agent command that uses it",
		Long: `Create a join token bound to one mesh service and print a ready-to-paste
line (like kubeadm join) that, run as root on a machine with nothing of
osm-vm installed, fetches the mesh CA, checks it against the hash in the
line, and only then downloads the join script and the osm-agent package
from this server over TLS verified by that CA, installs it and enrolls.
The server serves the packages from agentPackageDir. --print enroll prints
the osm-agent enroll command instead. The token is shown once; the server
keeps only its hash. It expires after --ttl and allows --uses enrollments.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := svc.Validate(); err != nil {
				return fmt.Errorf("--service/--namespace: %w", err)
			}
			if print != "join" && print != "enroll" {
				return fmt.Errorf("--print %q: want join (the one-line join) or enroll (the osm-agent enroll command)", print)
			}
			c, err := cf.admin()
			if err != nil {
				return err
			}
			ca, err := c.CA(cmd.Context())
			if err != nil {
				return err
			}
			req := meshapi.CreateTokenRequest{Service: svc, ServiceAccount: account, Uses: uses}
			if ttl != 0 {
				req.TTL = ttl.String()
			}
			created, err := c.CreateToken(cmd.Context(), req)
			if err != nil {
				return err
			}
			secret, tok := created.Secret, created.Token
			if joinServer == "" {
				joinServer = cf.server
			}
			w, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
			enrollCmd := meshapi.JoinCommand(joinServer, secret, ca.Hash, svc)
			fmt.Fprintf(stderr, "Token %s for %s: %d use(s), expires %s.\n", tok.ID, tok.Service, tok.UsesTotal, tok.Expires.Format(time.RFC3339))
			switch print {
			case "join":
				fmt.Fprintf(stderr, "Run this line as root on the machine to join: it installs osm-agent from this server and enrolls.\n(Where osm-agent is installed already: %s)\n", enrollCmd)
				_, err = fmt.Fprintln(w, join.Line(joinServer, secret, ca.Hash, []byte(ca.PEM), svc))
			case "enroll":
				fmt.Fprintln(stderr, "Run on the machine to enroll:")
				_, err = fmt.Fprintln(w, enrollCmd)
			}
			return err
		},
	}
	cf.register(cmd)
	f := cmd.Flags()
	f.StringVar(&svc.Name, "service", "", "mesh service the enrolled machines run (required)")
	f.StringVar(&svc.Namespace, "namespace", "default", "namespace of the service")
	f.StringVar(&account, "service-account", "", "service account the machines run as (default: the service name)")
	f.DurationVar(&ttl, "ttl", 24*time.Hour, "how long the token stays valid")
	f.IntVar(&uses, "uses", 1, "how many machines may enroll with the token")
	f.StringVar(&print, "print", "join", "what to print: join (one line that installs osm-agent from this server and enrolls) or enroll (the osm-agent enroll command, for machines that have osm-agent)")
	f.StringVar(&joinServer, "join-server", "", "server URL written into the join command, as the machines reach it (default: --server)")
	_ = cmd.MarkFlagRequired("service")
	return cmd
}

func newTokenListCmd() *cobra.Command {
	var (
		cf     adminClientFlags
		output string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List join tokens and their state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.admin()
			if err != nil {
				return err
			}
			items, err := c.ListTokens(cmd.Context())
			if err != nil {
				return err
			}
			return printList(cmd.OutOrStdout(), output, items, "ID\tSERVICE\tSERVICE ACCOUNT\tSTATE\tUSES LEFT\tEXPIRES", func(t meshapi.TokenStatus) string {
				return fmt.Sprintf("%s\t%s\t%s\t%s\t%d/%d\t%s", t.ID, t.Service, t.ServiceAccount, t.State, t.UsesLeft, t.UsesTotal, t.Expires.Format(time.RFC3339))
			})
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

func newTokenRevokeCmd() *cobra.Command {
	var cf adminClientFlags
	cmd := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a join token (machines already enrolled keep their identity)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.admin()
			if err != nil {
				return err
			}
			tok, err := c.RevokeToken(cmd.Context(), args[0])
			if errors.Is(err, meshclient.ErrNotFound) {
				return fmt.Errorf("no join token with ID %q (osm-server token list shows the IDs)", args[0])
			}
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "token %s revoked\n", tok.ID)
			return err
		},
	}
	cf.register(cmd)
	return cmd
}

// printList writes items as JSON (-o json) or as a table (-o table, the
// default) with header and one row per item.
func printList[T any](w io.Writer, output string, items []T, header string, row func(T) string) error {
	switch output {
	case "json":
		if items == nil {
			items = []T{}
		}
		return writeIndentedJSON(w, items)
	case "", "table":
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, header)
		for _, it := range items {
			fmt.Fprintln(tw, row(it))
		}
		return tw.Flush()
	default:
		return fmt.Errorf("-o %q: want table or json", output)
	}
}

func writeIndentedJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
