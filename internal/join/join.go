// Package join serves the one-line join from osm-server's HTTPS API,
// without the admin token, and renders that line for `osm-server token
// create`. The line a machine runs first fetches the mesh CA without
// trusting it and checks its SHA-256 against the hash in the line, then
// trusts only that CA for everything else it downloads: this script
// (install.sh), the osm-agent package for its format and architecture from
// the server's package directory, and the enrollment itself (which pins the
// CA's key again, as kubeadm's --discovery-token-ca-cert-hash).
//
// It owns no state: the CA comes from the caller, the packages from a
// directory the operator fills (docs/operator-guide.md).
package join

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// The routes, under Prefix.
const (
	Prefix     = "/join/"
	CAPath     = "/join/ca.pem"
	ScriptPath = "/join/install.sh"
	// PackagePath is followed by "deb" or "rpm"; ?arch= takes the machine's
	// architecture as its package manager names it (dpkg
	// --print-architecture, uname -m for RPM).
	PackagePath = "/join/packages/osm-agent."
)

//go:embed install.sh
var script []byte

// Handler serves the join routes: the CA's PEM exactly as Line hashed it,
// the join script, and the newest osm-agent package in dir for a format
// and architecture, a bounded number at a time (Limits).
type Handler struct {
	log       *slog.Logger
	caPEM     []byte
	dir       string
	downloads *downloads
}

// Default bounds on package downloads (Limits).
const (
	// DefaultDownloads: a download holds a connection, an open file and
	// about 100 KiB of buffers while the client takes it; 32 at once hold
	// 3 MiB and send a 10 MiB package to a hundred machines on a 1 Gbit/s
	// link in about ten seconds.
	DefaultDownloads = 32
	// DefaultDownloadsPerClient leaves room for machines joining at once
	// from behind one NAT address, and keeps any one address from taking
	// every slot.
	DefaultDownloadsPerClient = 4
)

// RetryAfter is what a refused download is told to wait, in the
// Retry-After header (curl --retry, as the join script runs it, waits so).
const RetryAfter = 10 * time.Second

// Limits bound the package downloads served at once; the CA and the
// script are small and not counted. A zero field takes its default.
type Limits struct {
	// Downloads is how many packages are sent at once in all; one more
	// is refused with 503 Service Unavailable.
	Downloads int
	// PerClient is how many are sent at once to one client address (an
	// IPv6 client's /64, which one machine may hold whole); one more is
	// refused with 429 Too Many Requests.
	PerClient int
}

// NewHandler returns the handler for Prefix. caPEM is the mesh CA's
// certificate as the admin API's GET /api/v1/ca returns it; dir holds
// osm-agent .deb and .rpm files (as `make packages` names them).
func NewHandler(log *slog.Logger, caPEM []byte, dir string, limits Limits) *Handler {
	if limits.Downloads <= 0 {
		limits.Downloads = DefaultDownloads
	}
	if limits.PerClient <= 0 {
		limits.PerClient = DefaultDownloadsPerClient
	}
	return &Handler{log: log, caPEM: caPEM, dir: dir, downloads: &downloads{limits: limits, perClient: map[netip.Prefix]int{}}}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed: the join routes are GET only", http.StatusMethodNotAllowed)
		return
	}
	switch p := r.URL.Path; {
	case p == CAPath:
		w.Header().Set("Content-Type", "application/x-pem-file")
		w.Write(h.caPEM)
	case p == ScriptPath:
		w.Header().Set("Content-Type", "text/x-shellscript")
		w.Write(script)
	case strings.HasPrefix(p, PackagePath):
		h.servePackage(w, r, strings.TrimPrefix(p, PackagePath), r.URL.Query().Get("arch"))
	default:
		http.Error(w, fmt.Sprintf("no join route %s: there are %s, %s and %s{deb,rpm}?arch=", p, CAPath, ScriptPath, PackagePath), http.StatusNotFound)
	}
}

var archRE = regexp.MustCompile(`^[a-z0-9_]+$`)

func (h *Handler) servePackage(w http.ResponseWriter, r *http.Request, format, arch string) {
	if (format != "deb" && format != "rpm") || !archRE.MatchString(arch) {
		http.Error(w, fmt.Sprintf("want %sdeb or %srpm with ?arch=<the machine's architecture, e.g. amd64 or x86_64>", PackagePath, PackagePath), http.StatusBadRequest)
		return
	}
	path, err := FindPackage(h.dir, format, arch)
	if err != nil {
		h.log.Warn("join: no osm-agent package to serve", "format", format, "arch", arch, "err", err)
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	release, refusal := h.downloads.acquire(r.RemoteAddr)
	if refusal != nil {
		h.log.Warn("join: agent package download refused", "remote", r.RemoteAddr, "err", refusal.msg)
		// Closing the connection frees its socket at once, whether or
		// not the client reads the refusal.
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
		http.Error(w, refusal.msg, refusal.code)
		return
	}
	defer release()
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", filepath.Base(path)))
	http.ServeFile(w, r, path)
}

// downloads counts the package downloads in progress, in all and per
// client.
type downloads struct {
	limits    Limits
	mu        sync.Mutex
	total     int
	perClient map[netip.Prefix]int
}

type refusal struct {
	code int
	msg  string
}

// acquire takes a download slot for the client at remote (host:port),
// or says why not; release gives it back.
func (d *downloads) acquire(remote string) (release func(), _ *refusal) {
	client := clientKey(remote)
	d.mu.Lock()
	defer d.mu.Unlock()
	// A client over its own bound is told so first: it is the one to wait.
	switch {
	case d.perClient[client] >= d.limits.PerClient:
		who := client.String()
		if client.Addr().Is4() {
			who = client.Addr().String()
		}
		return nil, &refusal{http.StatusTooManyRequests, fmt.Sprintf("osm-server is sending the osm-agent package to %d downloads from %s already, its bound per client address (joinDownloadsPerClient in the server config): retry in %s (the join script does)", d.limits.PerClient, who, RetryAfter)}
	case d.total >= d.limits.Downloads:
		return nil, &refusal{http.StatusServiceUnavailable, fmt.Sprintf("osm-server is sending the osm-agent package to %d machines already, its bound (joinDownloads in the server config): retry in %s (the join script does)", d.limits.Downloads, RetryAfter)}
	}
	d.total++
	d.perClient[client]++
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.total--
		if d.perClient[client]--; d.perClient[client] <= 0 {
			delete(d.perClient, client)
		}
	}, nil
}

// clientKey is the address a download is counted against: an IPv4
// address, or an IPv6 address's /64.
func clientKey(remote string) netip.Prefix {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Prefix{} // not an IP connection: all such count as one client
	}
	a := ap.Addr().Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

// FindPackage returns the newest (by modification time) osm-agent package
// of format and arch in dir: osm-agent_<version>_<arch>.deb or
// osm-agent-<version>-<release>.<arch>.rpm.
func FindPackage(dir, format, arch string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("the server's agent package directory: %w (copy osm-agent packages from `make packages` there)", err)
	}
	type cand struct {
		name string
		mod  int64
	}
	var found []cand
	for _, e := range entries {
		n := e.Name()
		ok := format == "deb" && strings.HasPrefix(n, "osm-agent_") && strings.HasSuffix(n, "_"+arch+".deb") ||
			format == "rpm" && strings.HasPrefix(n, "osm-agent-") && strings.HasSuffix(n, "."+arch+".rpm")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		found = append(found, cand{n, info.ModTime().UnixNano()})
	}
	if len(found) == 0 {
		return "", fmt.Errorf("no osm-agent .%s for %s in the server's agent package directory %s (copy it there from `make packages`' dist/)", format, arch, dir)
	}
	newest := slices.MaxFunc(found, func(a, b cand) int { return int(a.mod - b.mod) })
	return filepath.Join(dir, newest.name), nil
}

// PEMHash is the hex SHA-256 of the CA certificate's PEM as CAPath serves
// it; the line checks the download with sha256sum.
func PEMHash(caPEM []byte) string {
	sum := sha256.Sum256(caPEM)
	return hex.EncodeToString(sum[:])
}

// Line returns the one line an operator pastes, as root, on a machine to
// install osm-agent and enroll it: it needs only sh, curl and sha256sum.
// serverURL is https://host:port as the machine reaches the server.
//
// The line is one `sh -c '...'` (POSIX sh: dash has no pipefail, and the
// operator's shell may not be sh) that stops at the first failed step with
// a message naming it and exit status 1: the CA's download, the CA's
// hash, the script's download (saved to a file, never piped into sh, so a
// failed or cut download runs nothing), and the script (which names its
// own failed step: the package's download, its install, the enrollment,
// starting the service). Automation running the line can trust its status.
// The temporary directory is removed on exit.
func Line(serverURL, secret, caHash string, caPEM []byte, svc mesh.MeshService) string {
	script := fmt.Sprintf(`s=%[1]s; f() { echo "osm-vm join: $*" >&2; exit 1; }; `+
		`d=$(mktemp -d) || f "cannot make a temporary directory"; trap "rm -rf \"\$d\"" EXIT; `+
		`curl -fsSk -o "$d/ca.pem" "$s%[2]s" || f "step 1 of 4 failed: fetching the mesh CA from $s%[2]s (curl says why above)"; `+
		`echo "%[3]s  $d/ca.pem" | sha256sum -c --quiet - >/dev/null 2>&1 || f "step 2 of 4 failed: the mesh CA from $s%[2]s does not match the hash in this line, so nothing was installed (another server answered, or the mesh CA changed: print a new line with osm-server token create)"; `+
		`curl -fsS --cacert "$d/ca.pem" -o "$d/install.sh" "$s%[4]s" || f "step 3 of 4 failed: downloading the join script from $s%[4]s (curl says why above)"; `+
		`sh "$d/install.sh" --ca-file "$d/ca.pem" --server %[1]s --token %[5]s --ca-cert-hash %[6]s --service %[7]s --namespace %[8]s || f "step 4 of 4 failed: the join script stopped (its message above says at which step)"`,
		shellWord(strings.TrimSuffix(serverURL, "/")), CAPath, PEMHash(caPEM), ScriptPath, shellWord(secret), shellWord(caHash), shellWord(svc.Name), shellWord(svc.Namespace))
	return "sh -c " + shellQuote(script)
}

// shellWord returns s as one word of a POSIX shell command: as it is when
// it holds only characters no shell treats specially, quoted otherwise.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@%+,=") == "" {
		return s
	}
	return shellQuote(s)
}

// shellQuote returns s single-quoted for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
