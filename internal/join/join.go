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
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

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
// and architecture.
type Handler struct {
	log   *slog.Logger
	caPEM []byte
	dir   string
}

// NewHandler returns the handler for Prefix. caPEM is the mesh CA's
// certificate as the admin API's GET /api/v1/ca returns it; dir holds
// osm-agent .deb and .rpm files (as `make packages` names them).
func NewHandler(log *slog.Logger, caPEM []byte, dir string) *Handler {
	return &Handler{log: log, caPEM: caPEM, dir: dir}
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
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", filepath.Base(path)))
	http.ServeFile(w, r, path)
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
func Line(serverURL, secret, caHash string, caPEM []byte, svc mesh.MeshService) string {
	u := strings.TrimSuffix(serverURL, "/")
	return fmt.Sprintf(`ca=$(mktemp) && curl -fsSk %s -o "$ca" && echo "%s  $ca" | sha256sum -c --quiet - && curl -fsS --cacert "$ca" %s | sh -s -- --ca-file "$ca" --server %s --token %s --ca-cert-hash %s --service %s --namespace %s`,
		u+CAPath, PEMHash(caPEM), u+ScriptPath, u, secret, caHash, svc.Name, svc.Namespace)
}
