package main

// The mesh specification subcommands: apply, get, delete and diff. They are
// clients of a running server's REST API (internal/spec/spechttp.NewHandler).

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/spec/resilienceview"
)

// errDiffFound is returned by diff when the files differ from the live
// specification, so the process exits 1 as kubectl diff does.
var errDiffFound = errors.New("the files differ from the live mesh specification")

// readSpecFiles reads -f arguments: files, directories (their *.yaml,
// *.yml and *.json files, not recursive) and "-" for stdin.
func readSpecFiles(stdin io.Reader, paths []string) ([]spec.File, error) {
	if len(paths) == 0 {
		return nil, errors.New("no input: pass -f FILE, -f DIR or -f -")
	}
	var files []spec.File
	for _, p := range paths {
		if p == "-" {
			b, err := io.ReadAll(stdin)
			if err != nil {
				return nil, fmt.Errorf("read stdin: %w", err)
			}
			files = append(files, spec.File{Source: "-", Data: string(b)})
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("-f %s: %w", p, err)
		}
		names := []string{p}
		if fi.IsDir() {
			entries, err := os.ReadDir(p)
			if err != nil {
				return nil, fmt.Errorf("-f %s: %w", p, err)
			}
			names = names[:0]
			for _, e := range entries {
				switch filepath.Ext(e.Name()) {
				case ".yaml", ".yml", ".json":
					if !e.IsDir() {
						names = append(names, filepath.Join(p, e.Name()))
					}
				}
			}
			if len(names) == 0 {
				return nil, fmt.Errorf("-f %s: no .yaml, .yml or .json files in the directory", p)
			}
		}
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil {
				return nil, fmt.Errorf("-f %s: %w", n, err)
			}
			files = append(files, spec.File{Source: n, Data: string(b)})
		}
	}
	return files, nil
}

// resultName is kubectl's "kind/name", with the namespace when not default.
func resultName(k spec.Key) string {
	s := strings.ToLower(k.Kind) + "/" + k.Name
	if k.Namespace != "" && k.Namespace != spec.DefaultNamespace {
		s += " -n " + k.Namespace
	}
	return s
}

func printResults(w, errw io.Writer, res spec.BatchResult) error {
	suffix := ""
	if res.DryRun {
		suffix = " (server dry run)"
	}
	for _, wmsg := range res.Warnings {
		fmt.Fprintln(errw, "Warning:", wmsg)
	}
	for _, r := range res.Results {
		for _, wmsg := range r.Warnings {
			fmt.Fprintln(errw, "Warning:", wmsg)
		}
		if _, err := fmt.Fprintf(w, "%s %s%s\n", resultName(r.Key), r.Action, suffix); err != nil {
			return err
		}
	}
	return nil
}

func newApplyCmd() *cobra.Command {
	var (
		cf     adminClientFlags
		paths  []string
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "apply -f FILE|DIR|-",
		Short: "Create or update mesh services and policies from YAML or JSON files",
		Long: `Apply Service (osm-vm.io/v1alpha1 or Kubernetes v1), MeshConfig, SMI
(TrafficTarget, HTTPRouteGroup, TCPRoute, TrafficSplit) and Gateway API
(HTTPRoute, GRPCRoute, TCPRoute, TLSRoute, ReferenceGrant, Gateway) documents
(a TCPRoute is SMI's or the Gateway API's by its apiVersion). All files form one batch: either every document is
applied or, when any is invalid, none is. Prints created, configured or
unchanged for each document.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			files, err := readSpecFiles(cmd.InOrStdin(), paths)
			if err != nil {
				return err
			}
			c, err := cf.specClient()
			if err != nil {
				return err
			}
			res, err := c.Apply(cmd.Context(), files, dryRun)
			if err != nil {
				return err
			}
			return printResults(cmd.OutOrStdout(), cmd.ErrOrStderr(), res)
		},
	}
	cf.register(cmd)
	cmd.Flags().StringArrayVarP(&paths, "filename", "f", nil, "file, directory or - (stdin) to apply; repeatable")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "validate on the server and report what would change without changing it")
	return cmd
}

func newDiffCmd() *cobra.Command {
	var (
		cf    adminClientFlags
		paths []string
	)
	cmd := &cobra.Command{
		Use:   "diff -f FILE|DIR|-",
		Short: "Show how applying files would change the live mesh specification",
		Long: `Print a unified diff of the canonical YAML of each document that applying the
files would create or change. Exits 0 when nothing would change, 1 when
something would, and reports other errors as usual.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			files, err := readSpecFiles(cmd.InOrStdin(), paths)
			if err != nil {
				return err
			}
			c, err := cf.specClient()
			if err != nil {
				return err
			}
			res, err := c.Diff(cmd.Context(), files)
			if err != nil {
				return err
			}
			for _, w := range res.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "Warning:", w)
			}
			if !res.Changed() {
				return nil
			}
			for _, r := range res.Results {
				if _, err := io.WriteString(cmd.OutOrStdout(), r.Diff); err != nil {
					return err
				}
			}
			return errDiffFound
		},
	}
	cf.register(cmd)
	cmd.Flags().StringArrayVarP(&paths, "filename", "f", nil, "file, directory or - (stdin) to compare; repeatable")
	return cmd
}

func newDeleteCmd() *cobra.Command {
	var (
		cf        adminClientFlags
		paths     []string
		namespace string
		dryRun    bool
	)
	cmd := &cobra.Command{
		Use:   "delete (-f FILE|DIR|- | KIND NAME [-n NAMESPACE])",
		Short: "Delete mesh services and policies",
		Long: `Delete the documents named in files (one atomic batch), or one document by
kind and name. Deleting a Service that a TrafficSplit still names fails with
a conflict: delete the TrafficSplit first or in the same batch.`,
		Args: cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (len(paths) > 0) == (len(args) > 0) {
				return errors.New("pass either -f FILE or KIND NAME, not both or neither")
			}
			if len(args) == 1 {
				return fmt.Errorf("delete %s: name the document: delete %s NAME [-n NAMESPACE]", args[0], args[0])
			}
			c, err := cf.specClient()
			if err != nil {
				return err
			}
			var res spec.BatchResult
			if len(paths) > 0 {
				files, err := readSpecFiles(cmd.InOrStdin(), paths)
				if err != nil {
					return err
				}
				res, err = c.DeleteFiles(cmd.Context(), files, dryRun)
				if err != nil {
					return err
				}
			} else if res, err = c.Delete(cmd.Context(), args[0], namespace, args[1]); err != nil {
				return err
			}
			return printResults(cmd.OutOrStdout(), cmd.ErrOrStderr(), res)
		},
	}
	cf.register(cmd)
	cmd.Flags().StringArrayVarP(&paths, "filename", "f", nil, "file, directory or - (stdin) naming the documents to delete")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", spec.DefaultNamespace, "namespace of KIND NAME")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "report what would be deleted without deleting it")
	return cmd
}

func newGetCmd() *cobra.Command {
	var (
		cf        adminClientFlags
		namespace string
		output    string
	)
	cmd := &cobra.Command{
		Use:   "get services|policies|KIND [NAME] [-n NAMESPACE] [-o yaml|json] | get resilience SERVICE [-n NAMESPACE]",
		Short: "List mesh services and policies",
		Long: `List documents of a kind: services, policies (TrafficTargets, HTTPRouteGroups,
TCPRoutes, TrafficSplits, EgressGateways, Egresses, ReferenceGrants, Gateways, HTTPRoutes,
GRPCRoutes, TLSRoutes, UpstreamTrafficSettings, Retries and BackendTrafficPolicies),
traffictargets, httproutegroups, tcproutes (SMI's and the Gateway API's), trafficsplits,
egressgateways, egresses, referencegrants, gateways,
httproutes, grpcroutes, tlsroutes, upstreamtrafficsettings, retries,
backendtrafficpolicies, meshconfigs or all. A Service's status.vip is its
virtual IP, reachable as <service>.<namespace>.mesh on every VM; a route's
status has Accepted and ResolvedRefs per parentRef.

get resilience SERVICE shows what governs the calls to a Service: the
connect timeout, circuit breaker, retry budget, outlier detection and load
balancer every caller shares, then for each Service that may call it and
each port the request and idle timeouts, retry, fault injection and hash
policy, each with the policy that set it.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains([]string{"", "yaml", "json"}, output) {
				return fmt.Errorf("-o %q: want yaml or json", output)
			}
			c, err := cf.specClient()
			if err != nil {
				return err
			}
			if args[0] == "resilience" {
				if len(args) != 2 {
					return errors.New("get resilience: name the Service: get resilience SERVICE [-n NAMESPACE]")
				}
				view, err := c.Resilience(cmd.Context(), namespace, args[1])
				if err != nil {
					return err
				}
				if output == "" {
					return resilienceview.WriteTable(cmd.OutOrStdout(), view)
				}
				raw, err := json.Marshal(view)
				if err != nil {
					return err
				}
				return printItems(cmd.OutOrStdout(), output, []json.RawMessage{raw}, true)
			}
			var items []json.RawMessage
			if len(args) == 2 {
				raw, err := c.Get(cmd.Context(), args[0], namespace, args[1])
				if err != nil {
					return err
				}
				items = []json.RawMessage{raw}
			} else {
				ns := namespace
				if !cmd.Flags().Changed("namespace") {
					ns = ""
				}
				list, err := c.List(cmd.Context(), args[0], ns)
				if err != nil {
					return err
				}
				items = list.Items
			}
			return printItems(cmd.OutOrStdout(), output, items, len(args) == 2)
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVarP(&namespace, "namespace", "n", spec.DefaultNamespace, "namespace (lists all namespaces unless given)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: yaml or json (default a table)")
	return cmd
}

// listItem is what the table needs of any document.
type listItem struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		ServiceAccount string `json:"serviceAccount"`
		Ports          []struct {
			Port        int    `json:"port"`
			AppProtocol string `json:"appProtocol"`
		} `json:"ports"`
	} `json:"spec"`
	Status struct {
		VIP string `json:"vip"`
	} `json:"status"`
}

func printItems(w io.Writer, output string, items []json.RawMessage, single bool) error {
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if single {
			return enc.Encode(items[0])
		}
		return enc.Encode(map[string]any{"items": items})
	case "yaml":
		for i, raw := range items {
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				return fmt.Errorf("decode server response: %w", err)
			}
			b, err := yaml.Marshal(v)
			if err != nil {
				return fmt.Errorf("render YAML: %w", err)
			}
			if i > 0 {
				if _, err := io.WriteString(w, "---\n"); err != nil {
					return err
				}
			}
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	parsed := make([]listItem, len(items))
	allServices := true
	for i, raw := range items {
		if err := json.Unmarshal(raw, &parsed[i]); err != nil {
			return fmt.Errorf("decode server response: %w", err)
		}
		allServices = allServices && parsed[i].Kind == spec.KindService
	}
	if len(items) == 0 {
		_, err := fmt.Fprintln(w, "No resources found.")
		return err
	}
	if allServices {
		fmt.Fprintln(tw, "NAMESPACE\tNAME\tSERVICE-ACCOUNT\tVIP\tPORTS")
		for _, it := range parsed {
			var ports []string
			for _, p := range it.Spec.Ports {
				port := strconv.Itoa(p.Port)
				if p.AppProtocol != "" { // a v1 Service may leave it to the port's name
					port += "/" + p.AppProtocol
				}
				ports = append(ports, port)
			}
			// A v1 Service names its account by annotation, or not at all.
			sa := cmp.Or(it.Spec.ServiceAccount, it.Metadata.Annotations[spec.AnnotationServiceAccount], it.Metadata.Name)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", it.Metadata.Namespace, it.Metadata.Name, sa, it.Status.VIP, strings.Join(ports, ","))
		}
	} else {
		fmt.Fprintln(tw, "KIND\tNAMESPACE\tNAME")
		for _, it := range parsed {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", it.Kind, it.Metadata.Namespace, it.Metadata.Name)
		}
	}
	return tw.Flush()
}
