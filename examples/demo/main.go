// Command demo runs the osm-vm bookstore demo behind `make demo`, as if
// on six machines: osm-server on the embedded defaults (static provider
// reading examples/bookstore/endpoints.yaml, debug, API and xDS on
// 127.0.0.1), the bookstore mesh (mesh.yaml and grpc.yaml) applied, a join
// token and an osm-agent per service, each with its own data directory,
// and the proxyless gRPC applications of examples/bookstore, each reading
// its agent's grpc-bootstrap.json and service certificate.
//
// Where envoy is on PATH (or -proxy envoy), each service also gets a
// second machine in the standard VM setup: an osm-agent with --proxy
// envoy on 127.0.11.x that runs Envoy, which gets its listeners, clusters
// and certificates for the same service. The apps' own traffic stays
// proxyless: on one host, the proxyless apps and Envoys would otherwise
// want the same inbound address.
//
// The terminal shows a compact live view: bookbuyer's purchases split
// between bookstore-v1 and v2, bookthief's refusals, and the connected
// proxies. Ctrl-C (or -duration) stops everything; no process is left
// behind: each child runs in its own process group, dies with the demo
// (Pdeathsig), and is terminated, then killed, on every exit path.
// -json prints a machine-readable summary at the end instead of the view.
//
// It expects `make build` to have put the binaries in -bin (the demo apps
// too: `make demo` builds them).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/osm-vm/osm-vm/examples/bookstore/bookapi"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// options are the demo's flags.
type options struct {
	root, bin, state            string
	apiAddr, xdsAddr, debugAddr string
	duration                    time.Duration
	untilPurchases              int64
	jsonOut                     bool
	proxy, envoyPath            string
	python, nodeModules         string
}

// machine is one demo service on its own (simulated) machine.
type machine struct {
	service, account, ip string
	app                  string   // binary in -bin, or a script under examples/bookstore
	args                 []string // app flags
	// lang is the app's language and gRPC implementation for the view;
	// dir names the machine's directory under -state when two machines run
	// one service.
	lang, dir string
}

// name is the machine's directory and process name.
func (m machine) name() string {
	if m.dir != "" {
		return m.dir
	}
	return m.service
}

// polyglotMachines are bookbuyers in Python (gRPC C-core, Debian's
// python3-grpcio) and Node.js (grpc-js with grpc-js-xds), beside the Go
// apps, where those are installed (`make demo` installs them).
var polyglotMachines = []machine{
	{service: "bookbuyer", dir: "bookbuyer-python", ip: "127.0.10.6", app: "python/buyer.py", lang: "Python, gRPC C-core", args: []string{"--app", "bookbuyer-python", "--interval", "0.05"}},
	{service: "bookbuyer", dir: "bookbuyer-node", ip: "127.0.10.7", app: "node/buyer.js", lang: "Node.js, grpc-js", args: []string{"--app", "bookbuyer-node", "--interval", "0.05"}},
}

// envoyIP is the address of the service's Envoy machine: 127.0.11.x
// beside the proxyless app's 127.0.10.x.
func (m machine) envoyIP() string { return strings.Replace(m.ip, "127.0.10.", "127.0.11.", 1) }

// envoyAdminPort is the admin port of the i'th Envoy: five Envoys on one
// host need five.
func envoyAdminPort(i int) int { return 15001 + i }

var machines = []machine{
	{service: "bookwarehouse", ip: "127.0.10.5", app: "bookwarehouse", args: []string{"-listen", "127.0.10.5:14001"}},
	{service: "bookstore-v1", account: "bookstore", ip: "127.0.10.3", app: "bookstore", args: []string{"-listen", "127.0.10.3:14001", "-name", "bookstore-v1"}},
	{service: "bookstore-v2", account: "bookstore", ip: "127.0.10.4", app: "bookstore", args: []string{"-listen", "127.0.10.4:14001", "-name", "bookstore-v2"}},
	{service: "bookbuyer", ip: "127.0.10.1", app: "bookbuyer"},
	{service: "bookthief", ip: "127.0.10.2", app: "bookthief", args: []string{"-direct", "127.0.10.3:14001"}},
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o options
	fs := newFlags(&o)
	if err := fs.Parse(args); err != nil {
		return err
	}
	root, err := filepath.Abs(o.root)
	if err != nil {
		return err
	}
	o.root = root
	if o.bin == "" {
		o.bin = filepath.Join(root, "bin")
	}
	if o.state == "" {
		o.state = filepath.Join(root, ".demo")
	}
	if o.bin, err = filepath.Abs(o.bin); err != nil {
		return err
	}
	if o.state, err = filepath.Abs(o.state); err != nil {
		return err
	}
	for _, b := range []string{"osm-server", "osm-agent", "osm-provider-static", "bookbuyer", "bookthief", "bookstore", "bookwarehouse"} {
		if _, err := os.Stat(filepath.Join(o.bin, b)); err != nil {
			return fmt.Errorf("%s: %w (run `make demo`, which builds everything into bin/)", filepath.Join(o.bin, b), err)
		}
	}
	proxy, proxyNote, err := chooseProxy(o.proxy, o.envoyPath)
	if err != nil {
		return err
	}

	// The view goes to stdout, or to stderr when stdout carries the summary.
	view := stdout
	if o.jsonOut {
		view = stderr
	}
	if err := checkFree(o, proxy); err != nil {
		return err
	}
	if err := os.RemoveAll(o.state); err != nil {
		return err
	}
	if err := os.MkdirAll(o.state, 0o700); err != nil {
		return err
	}

	started := time.Now()
	ps := newProcs()
	sum := &summary{Proxy: proxy}
	err = demo(ctx, o, proxy, proxyNote, ps, sum, view)
	ps.stop(5 * time.Second)
	sum.finish(ps, time.Since(started))
	if o.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(sum); jerr != nil && err == nil {
			err = jerr
		}
	} else {
		fmt.Fprintf(view, "\ndemo stopped; all %d processes ended. Logs stay in %s until the next run.\n", len(sum.Processes), rel(o.state))
	}
	return err
}

func newFlags(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.StringVar(&o.root, "root", ".", "repository root (examples/bookstore is read from here)")
	fs.StringVar(&o.bin, "bin", "", "directory with osm-server, osm-agent, osm-provider-static and the demo apps (default <root>/bin)")
	fs.StringVar(&o.state, "state", "", "directory for the server's and agents' data and the logs, emptied first (default <root>/.demo)")
	fs.StringVar(&o.apiAddr, "api-address", "127.0.0.1:15443", "osm-server HTTPS API address (enrollment, admin)")
	fs.StringVar(&o.xdsAddr, "xds-address", "127.0.0.1:15128", "osm-server xDS address")
	fs.StringVar(&o.debugAddr, "debug-address", "127.0.0.1:15090", "osm-server debug address")
	fs.DurationVar(&o.duration, "duration", 0, "stop after this long (0: run until Ctrl-C)")
	fs.Int64Var(&o.untilPurchases, "until-purchases", 0, "stop once every bookbuyer bought this many books, from both bookstore versions, bookthief was refused half as many times each way and bookwarehouse restocked (0: no such stop; -duration still bounds the run)")
	fs.BoolVar(&o.jsonOut, "json", false, "print a JSON summary on stdout at the end (the view goes to stderr)")
	fs.StringVar(&o.proxy, "proxy", "auto", "envoy: also run an Envoy per service (the standard VM setup); none: proxyless apps only; auto: envoy when -envoy-path is found")
	fs.StringVar(&o.envoyPath, "envoy-path", "envoy", "Envoy binary for -proxy envoy: a path, or a name looked up on PATH")
	fs.StringVar(&o.python, "python", "/usr/bin/python3", "Python with grpcio (Debian's python3-grpcio) for the Python bookbuyer")
	fs.StringVar(&o.nodeModules, "node-modules", os.Getenv("OSM_NODE_MODULES"), "node_modules with @grpc/grpc-js and @grpc/grpc-js-xds for the Node bookbuyer (make demo passes its npm ci of examples/bookstore/node)")
	return fs
}

// chooseProxy resolves -proxy: "envoy" or "none", and a one-line note
// that says what was chosen and why.
func chooseProxy(p, envoyPath string) (string, string, error) {
	const proxyless = "apps: proxyless gRPC"
	switch p {
	case "none":
		return "none", proxyless + "; no Envoy (-proxy none)", nil
	case "envoy", "auto":
		path, err := exec.LookPath(envoyPath)
		if err == nil {
			return "envoy", proxyless + "; plus an Envoy per service, the standard VM setup (" + path + ")", nil
		}
		if p == "envoy" {
			return "", "", fmt.Errorf("-proxy envoy: %w: install Envoy, pass -envoy-path, or use -proxy none", err)
		}
		return "none", proxyless + "; no Envoy (" + envoyPath + " is not on PATH)", nil
	}
	return "", "", fmt.Errorf("-proxy %q: want auto, envoy or none", p)
}

// polyglot returns the Python and Node machines whose runtimes are
// installed, and a note naming the missing ones.
func polyglot(o options) ([]machine, string) {
	var ms []machine
	var missing []string
	if exec.Command(o.python, "-c", "import grpc").Run() == nil {
		ms = append(ms, polyglotMachines[0])
	} else {
		missing = append(missing, "Python ("+o.python+" cannot import grpc: apt-get install python3-grpcio)")
	}
	_, nodeErr := exec.LookPath("node")
	switch {
	case nodeErr != nil:
		missing = append(missing, "Node.js (node is not on PATH)")
	case !fileExists(filepath.Join(o.nodeModules, "@grpc", "grpc-js-xds", "package.json")):
		missing = append(missing, "Node.js (-node-modules has no @grpc/grpc-js-xds; make demo installs it)")
	default:
		ms = append(ms, polyglotMachines[1])
	}
	if len(missing) == 0 {
		return ms, ""
	}
	return ms, "without the bookbuyer in " + strings.Join(missing, " and ")
}

func demo(ctx context.Context, o options, proxy, proxyNote string, ps *procs, sum *summary, view io.Writer) error {
	parent := ctx
	if o.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	say := func(format string, a ...any) { fmt.Fprintf(view, format+"\n", a...) }
	serverDir := filepath.Join(o.state, "server")
	endpoints := filepath.Join(o.root, "examples", "bookstore", "endpoints.yaml")
	config := fmt.Sprintf(`dataDir: %s
pluginDir: %s
debugAddress: %s
apiAddress: %s
xdsAddress: %s
providers:
  - name: onprem
    plugin: osm-provider-static
    config: {file: %s}
`, serverDir, o.bin, o.debugAddr, o.apiAddr, o.xdsAddr, endpoints)
	configFile := filepath.Join(o.state, "server.yaml")
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		return err
	}
	serverLog := filepath.Join(o.state, "server.log")
	server, err := ps.start("osm-server", exec.Command(filepath.Join(o.bin, "osm-server"), "serve", "--config", configFile), serverLog, false)
	if err != nil {
		return err
	}
	base := "http://" + o.debugAddr
	if err := waitFor(ctx, 20*time.Second, server, func() bool { _, err := get(ctx, base+"/readyz", ""); return err == nil }); err != nil {
		return fmt.Errorf("osm-server not ready: %w; its log %s:\n%s", err, serverLog, tail(serverLog))
	}
	say("osm-server ready (API https://%s, xDS %s, debug http://%s; log %s)", o.apiAddr, o.xdsAddr, o.debugAddr, rel(serverLog))
	// /debug/proxies takes the admin token, which the server wrote before it listened.
	tokenBytes, err := os.ReadFile(filepath.Join(serverDir, "admin.token"))
	if err != nil {
		return fmt.Errorf("read the admin token for the debug listener: %w", err)
	}
	adminToken := strings.TrimSpace(string(tokenBytes))

	admin := func(args ...string) (string, error) {
		full := append(args, "--server", "https://"+o.apiAddr, "--data-dir", serverDir)
		return output(ctx, filepath.Join(o.bin, "osm-server"), full...)
	}
	mesh := filepath.Join(o.root, "examples", "bookstore")
	if out, err := admin("apply", "-f", filepath.Join(mesh, "mesh.yaml"), "-f", filepath.Join(mesh, "grpc.yaml")); err != nil {
		return fmt.Errorf("apply the bookstore mesh: %w\n%s", err, out)
	}
	say("applied examples/bookstore/mesh.yaml and grpc.yaml")
	say("%s", proxyNote)
	extra, polyNote := polyglot(o)
	if polyNote != "" {
		say("%s", polyNote)
	}
	all := append(slices.Clone(machines), extra...)

	// One join token and one agent per machine: the proxyless apps' agents,
	// then, with Envoy, the Envoy machines' agents.
	// agents are the agents' names and machine addresses (metrics on
	// agentMetricsAddr).
	agents := map[string]string{}
	for _, m := range all {
		if err := startAgent(ctx, o, ps, admin, m, m.name(), m.ip, "--proxy", "none"); err != nil {
			return err
		}
		agents[m.name()] = m.ip
	}
	if proxy == "envoy" {
		for i, m := range machines {
			args := []string{"--proxy", "envoy", "--envoy-path", o.envoyPath, "--admin-port", strconv.Itoa(envoyAdminPort(i))}
			if err := startAgent(ctx, o, ps, admin, m, m.service+"-envoy", m.envoyIP(), args...); err != nil {
				return err
			}
			agents[m.service+"-envoy"] = m.envoyIP()
		}
		say("started %d osm-agents (data and logs in %s/<service>/ and %s/<service>-envoy/), each enrolled with its own join token; the -envoy ones run Envoy", len(all)+len(machines), rel(o.state), rel(o.state))
	} else {
		say("started %d osm-agents (data and logs in %s/<service>/), each enrolled with its own join token", len(all), rel(o.state))
	}
	say("each agent serves its metrics on its machine's address: http://%s/metrics (bookbuyer's), ...", agentMetricsAddr(machines[3].ip))
	say("the dashboard: http://%s/dashboard/ (the admin token it asks for is in %s)", o.debugAddr, rel(filepath.Join(serverDir, "admin.token")))

	// Each app starts once its agent has written the gRPC bootstrap and the
	// service certificate.
	for _, m := range all {
		dir := filepath.Join(o.state, m.name())
		ready := func() bool {
			return fileExists(filepath.Join(dir, "grpc-bootstrap.json")) && fileExists(filepath.Join(dir, "service.crt"))
		}
		if err := waitFor(ctx, 30*time.Second, server, ready); err != nil {
			return fmt.Errorf("agent of %s wrote no grpc-bootstrap.json and service certificate: %w; its log:\n%s", m.service, err, tail(filepath.Join(dir, "agent.log")))
		}
		args := m.args
		if m.app == "bookthief" {
			args = append(slices.Clone(args), "-cert-dir", dir)
		}
		cmd := exec.Command(filepath.Join(o.bin, m.app), args...)
		cmd.Env = append(os.Environ(), "GRPC_XDS_BOOTSTRAP="+filepath.Join(dir, "grpc-bootstrap.json"))
		switch filepath.Ext(m.app) {
		case ".py":
			cmd = exec.Command(o.python, append([]string{filepath.Join(mesh, m.app)}, args...)...)
			cmd.Env = append(os.Environ(), "GRPC_XDS_BOOTSTRAP="+filepath.Join(dir, "grpc-bootstrap.json"))
		case ".js":
			cmd = exec.Command("node", append([]string{filepath.Join(mesh, m.app)}, args...)...)
			cmd.Env = append(os.Environ(), "GRPC_XDS_BOOTSTRAP="+filepath.Join(dir, "grpc-bootstrap.json"), "NODE_PATH="+o.nodeModules)
		}
		appLog := filepath.Join(dir, "app.log")
		if _, err := ps.start(m.name(), cmd, appLog, true); err != nil {
			return err
		}
		if slices.Contains(m.args, "-listen") {
			// The callers start once the servers serve (an xDS-enabled
			// server closes connections until its listener arrives).
			serving := func() bool {
				b, _ := os.ReadFile(appLog)
				return strings.Contains(string(b), bookapi.ServingMarker)
			}
			if err := waitFor(ctx, 30*time.Second, server, serving); err != nil {
				return fmt.Errorf("%s is not serving: %w; its log:\n%s", m.service, err, tail(appLog))
			}
		}
	}
	names := make([]string, len(all))
	for i, m := range all {
		names[i] = m.name()
	}
	say("started the apps: %s", strings.Join(names, ", "))
	splitCmd := fmt.Sprintf("%s apply -f %s --data-dir %s", rel(filepath.Join(o.bin, "osm-server")), rel(filepath.Join(mesh, "split-50-50.yaml")), rel(serverDir))
	if o.apiAddr != "127.0.0.1:15443" {
		splitCmd += " --server https://" + o.apiAddr
	}
	say("")

	v := newViewer(view, isTerminal(view), proxyNote, splitCmd, rel(o.state), proxy == "envoy")
	v.polyglot = extra
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		connected, err := connectedProxies(ctx, base, adminToken)
		if err == nil {
			sum.observeProxies(connected)
		}
		v.show(ps, connected, err)
		sum.observeAgentMetrics(agentsWithMetrics(ctx, agents))
		select {
		case <-ctx.Done():
			sum.snapshot(ps)
			sum.StoppedBy = "duration"
			if parent.Err() != nil {
				sum.StoppedBy = "interrupt"
			}
			return nil
		case p := <-ps.exited:
			sum.snapshot(ps)
			return fmt.Errorf("%s exited (%v); its log %s:\n%s", p.name, p.err, p.log, tail(p.log))
		case <-tick.C:
			sum.snapshot(ps)
			if o.untilPurchases > 0 && sum.enough(o.untilPurchases, extra) {
				sum.StoppedBy = "purchases"
				return nil
			}
		}
	}
}

// startAgent creates a join token for m's service, installs an osm-agent
// for it in <state>/<name> (without a system service) advertising ip, and
// runs it. extra are more `osm-agent install` flags.
func startAgent(ctx context.Context, o options, ps *procs, admin func(...string) (string, error), m machine, name, ip string, extra ...string) error {
	dir := filepath.Join(o.state, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	targs := []string{"token", "create", "--print", "enroll", "--service", m.service}
	if m.account != "" {
		targs = append(targs, "--service-account", m.account)
	}
	join, err := admin(targs...)
	if err != nil {
		return fmt.Errorf("token for %s: %w\n%s", name, err, join)
	}
	jf, err := parseJoin(join)
	if err != nil {
		return fmt.Errorf("token for %s: %w", name, err)
	}
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"), 0o644); err != nil {
		return err
	}
	iargs := append([]string{"install", "--no-service", "--server", jf["server"], "--token", jf["token"], "--ca-cert-hash", jf["ca-cert-hash"],
		"--service", m.service, "--namespace", "default", "--advertise-address", ip, "--metrics-address", agentMetricsAddr(ip),
		"--hosts-file", hosts, "--config-dir", dir, "--data-dir", dir}, extra...)
	if out, err := output(ctx, filepath.Join(o.bin, "osm-agent"), iargs...); err != nil {
		return fmt.Errorf("osm-agent install for %s: %w\n%s", name, err, out)
	}
	_, err = ps.start("osm-agent "+name, exec.Command(filepath.Join(o.bin, "osm-agent"), "run", "--config", filepath.Join(dir, "agent.yaml")), filepath.Join(dir, "agent.log"), false)
	return err
}

// agentMetricsAddr is where the agent of the machine on ip serves its
// metrics: the agent's default port on the machine's own address, so the
// agents sharing this host do not collide.
func agentMetricsAddr(ip string) string { return ip + ":15091" }

// agentsWithMetrics returns the names of the agents (their directories
// under the state directory) whose metrics endpoint answers.
func agentsWithMetrics(ctx context.Context, agents map[string]string) []string {
	var out []string
	for name, ip := range agents {
		if body, err := get(ctx, "http://"+agentMetricsAddr(ip)+"/metrics", ""); err == nil && strings.Contains(string(body), "osm_agent_server_reachable") {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// checkFree fails when an address the demo listens on is taken: another
// demo or osm-server runs (and would share the state directory).
func checkFree(o options, proxy string) error {
	addrs := []string{o.apiAddr, o.xdsAddr, o.debugAddr}
	for i, m := range machines {
		addrs = append(addrs, m.ip+":14001", agentMetricsAddr(m.ip))
		if proxy == "envoy" {
			addrs = append(addrs, m.envoyIP()+":14001", agentMetricsAddr(m.envoyIP()), "127.0.0.1:"+strconv.Itoa(envoyAdminPort(i)))
		}
	}
	for _, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("%s is in use (%w): is another demo or osm-server running? Stop it first", a, err)
		}
		l.Close()
	}
	return nil
}

// parseJoin reads the flags of the `osm-agent enroll ...` line that
// `osm-server token create` prints.
func parseJoin(out string) (map[string]string, error) {
	re := regexp.MustCompile(`--([a-z-]+)[ =](\S+)`)
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, "osm-agent enroll") {
			continue
		}
		f := map[string]string{}
		for _, m := range re.FindAllStringSubmatch(line, -1) {
			f[m[1]] = strings.Trim(m[2], `'"`)
		}
		for _, k := range []string{"server", "token", "ca-cert-hash"} {
			if f[k] == "" {
				return nil, fmt.Errorf("join command %q has no --%s", line, k)
			}
		}
		return f, nil
	}
	return nil, fmt.Errorf("no `osm-agent enroll` command in the output of token create:\n%s", out)
}

// connectedProxies returns "<service> (<flavor>)" for each connected proxy.
// GET /debug/proxies needs the admin token.
func connectedProxies(ctx context.Context, base, adminToken string) ([]string, error) {
	var body struct {
		Proxies []struct {
			Service struct{ Namespace, Name string }
			Flavor  string
		}
	}
	if err := getJSON(ctx, base+"/debug/proxies", adminToken, &body); err != nil {
		return nil, err
	}
	var out []string
	for _, p := range body.Proxies {
		out = append(out, p.Service.Name+" ("+p.Flavor+")")
	}
	slices.Sort(out)
	return out, nil
}

// waitFor polls cond every 100ms until it holds, ctx is done, timeout
// passes or the server exits.
func waitFor(ctx context.Context, timeout time.Duration, server *proc, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-server.done:
			return fmt.Errorf("osm-server exited (%v)", server.err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// output runs a short command (a minute at most) and returns its output.
func output(ctx context.Context, path string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.SysProcAttr = sysProcAttr()
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	return b.String(), err
}

// tail returns the last lines of a log file.
func tail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > 20 {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// rel returns path relative to the working directory when it is below it.
func rel(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	r, err := filepath.Rel(wd, path)
	if err != nil || strings.HasPrefix(r, "..") {
		return path
	}
	return r
}

// get returns the body of GET url, sent with the admin token unless it is "".
func get(ctx context.Context, url, adminToken string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if adminToken != "" {
		req.Header.Set("Authorization", "Bearer "+adminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, errors.New(resp.Status + ": " + strings.TrimSpace(string(body)))
	}
	return body, nil
}

func getJSON(ctx context.Context, url, adminToken string, v any) error {
	body, err := get(ctx, url, adminToken)
	if err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}
