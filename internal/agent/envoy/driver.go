package envoy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/agent/sidecar"
)

// Name is the name the Envoy driver is registered under.
const Name = "envoy"

// Driver runs Envoy. Build it with New.
type Driver struct {
	path      string
	dataDir   string
	adminPort uint16
	drainTime time.Duration
	hc        *http.Client
}

// New returns the Envoy driver for opts. An empty BinaryPath means "envoy"
// on PATH; a zero AdminPort means DefaultAdminPort.
func New(opts sidecar.Options) (*Driver, error) {
	if opts.DataDir == "" {
		return nil, errors.New("envoy driver: data directory not set")
	}
	d := &Driver{
		path:      cmpOr(opts.BinaryPath, "envoy"),
		dataDir:   opts.DataDir,
		adminPort: opts.AdminPort,
		drainTime: opts.DrainTime,
		hc:        &http.Client{Timeout: 5 * time.Second},
	}
	if d.adminPort == 0 {
		d.adminPort = DefaultAdminPort
	}
	if d.drainTime <= 0 {
		d.drainTime = 5 * time.Second
	}
	return d, nil
}

// Factory is New as a sidecar.Factory, for a sidecar.Registry.
func Factory(opts sidecar.Options) (sidecar.Driver, error) { return New(opts) }

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Name returns "envoy".
func (d *Driver) Name() string { return Name }

// BootstrapFile returns the bootstrap's name in the data directory.
func (d *Driver) BootstrapFile() string { return BootstrapFile }

// BootstrapPath is where the bootstrap Envoy runs on is written.
func (d *Driver) BootstrapPath() string { return filepath.Join(d.dataDir, BootstrapFile) }

// Files renders the two SDS files and the bootstrap, in that order: the
// SDS files the bootstrap names exist before it does.
func (d *Driver) Files(p sidecar.ProxyConfig) ([]sidecar.File, error) {
	b, err := Bootstrap(p, d.dataDir, d.adminPort)
	if err != nil {
		return nil, err
	}
	if err := ValidateBootstrap(b); err != nil {
		return nil, fmt.Errorf("envoy bootstrap: %w", err)
	}
	cert, ca, err := Secrets(p)
	if err != nil {
		return nil, err
	}
	var files []sidecar.File
	for _, f := range []struct {
		name string
		msg  proto.Message
	}{{ClientCertSDS, cert}, {CASDS, ca}, {BootstrapFile, b}} {
		data, err := MarshalJSON(f.msg)
		if err != nil {
			return nil, fmt.Errorf("render %s: %w", f.name, err)
		}
		files = append(files, sidecar.File{Name: f.name, Data: data, Mode: 0o644})
	}
	return files, nil
}

// Check reports whether the Envoy binary can be run, naming the path and
// the setting that changes it.
func (d *Driver) Check() error {
	_, err := d.resolve()
	return err
}

const fix = "install Envoy (https://www.envoyproxy.io/docs/envoy/latest/start/install) or point --envoy-path (envoyPath in agent.yaml) at it"

func (d *Driver) resolve() (string, error) {
	if !strings.ContainsRune(d.path, filepath.Separator) && !strings.ContainsRune(d.path, '/') {
		p, err := exec.LookPath(d.path)
		if err != nil {
			return "", fmt.Errorf("envoy binary %q not found on PATH: %s", d.path, fix)
		}
		return p, nil
	}
	fi, err := os.Stat(d.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("envoy binary %s does not exist: %s", d.path, fix)
	case err != nil:
		return "", fmt.Errorf("envoy binary %s: %w: %s", d.path, err, fix)
	case fi.IsDir():
		return "", fmt.Errorf("envoy binary %s is a directory: %s", d.path, fix)
	case runtime.GOOS != "windows" && fi.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("envoy binary %s is not executable (mode %v): chmod +x it, or %s", d.path, fi.Mode().Perm(), fix)
	}
	return d.path, nil
}

// Command runs Envoy on the bootstrap with hot restart disabled (the agent
// restarts Envoy itself) and the drain time the supervisor waits for.
func (d *Driver) Command() *exec.Cmd {
	path, err := d.resolve()
	if err != nil {
		path = d.path // Start fails and the supervisor reports it
	}
	secs := max(1, int((d.drainTime+time.Second-1)/time.Second))
	return exec.Command(path,
		"-c", d.BootstrapPath(),
		"--drain-time-s", strconv.Itoa(secs),
		"--drain-strategy", "gradual",
		"--disable-hot-restart",
		"--log-level", "info",
	)
}

// Drain asks Envoy to drain its listeners gracefully through the admin
// endpoint POST /drain_listeners?graceful.
func (d *Driver) Drain(ctx context.Context) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/drain_listeners?graceful", d.adminPort)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return fmt.Errorf("envoy admin: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("envoy admin POST /drain_listeners: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
