package resilienceview

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable writes s as `osm-server get resilience` prints it: the parts
// every caller shares, then one row per caller and port with each part
// and, in brackets, the policy that set it (none for a part nothing
// sets: the data plane's own default applies, as the setting says).
func WriteTable(w io.Writer, s Service) error {
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	fmt.Fprintf(tw, "Service %s: every caller's proxy\n", s.Service)
	fmt.Fprintln(tw, "PART\tSETTING\tSOURCE")
	for _, p := range s.Cluster {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Part, p.Setting, sourceText(p.Source))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if len(s.Calls) == 0 {
		_, err := fmt.Fprintf(w, "No Service may call %s.\n", s.Service)
		return err
	}
	fmt.Fprintf(w, "Calls to %s, per caller and port (a route's own timeouts and retry win for the calls it matches):\n", s.Service)
	var names []string // the route parts, in their order
	for _, c := range s.Calls {
		if len(c.Parts) > 0 {
			for _, p := range c.Parts {
				names = append(names, p.Part)
			}
			break
		}
	}
	tw = tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	head := []string{"CALLER", "PORT"}
	for _, n := range names {
		head = append(head, headerOf(n))
	}
	fmt.Fprintln(tw, strings.Join(append(head, "ROUTES"), "\t"))
	for _, c := range s.Calls {
		row := []string{c.Caller, portText(c)}
		for i := range names {
			switch {
			case len(c.Parts) == 0:
				row = append(row, "-")
			case i < len(c.Parts) && c.Parts[i].Source == "":
				row = append(row, c.Parts[i].Setting)
			case i < len(c.Parts):
				row = append(row, c.Parts[i].Setting+" ["+c.Parts[i].Source+"]")
			}
		}
		routes := strings.Join(c.Routes, ", ")
		if routes == "" {
			routes = "-"
		}
		fmt.Fprintln(tw, strings.Join(append(row, routes), "\t"))
	}
	if s.CallsTruncated {
		fmt.Fprintf(tw, "(more than %d calls: the rest are left out)\n", MaxCalls)
	}
	return tw.Flush()
}

// headerOf turns a part's name into a column header: requestTimeout is
// REQUEST-TIMEOUT.
func headerOf(part string) string {
	var b strings.Builder
	for i, r := range part {
		if r >= 'A' && r <= 'Z' && i > 0 {
			b.WriteByte('-')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

func portText(c Call) string {
	s := strconv.Itoa(c.Port)
	if c.PortName != "" {
		s += " (" + c.PortName + ")"
	}
	return s + "/" + c.AppProtocol
}

func sourceText(src string) string {
	if src == "" {
		return "-"
	}
	return src
}
