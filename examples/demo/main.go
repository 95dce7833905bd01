// Command demo runs the osm-vm demo behind `make demo`: osm-server on the
// embedded defaults with the static provider reading
// examples/bookstore/endpoints.yaml, and a compact live view of what the
// server knows. Ctrl-C stops everything; no process is left behind.
//
// It expects `make build` to have put the binaries in bin/.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	root := fs.String("root", ".", "repository root")
	debugAddr := fs.String("debug-address", "127.0.0.1:15090", "osm-server debug address")
	duration := fs.Duration("duration", 0, "stop after this long (0: run until Ctrl-C)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	rootDir, err := filepath.Abs(*root)
	if err != nil {
		return err
	}
	state := filepath.Join(rootDir, ".demo")
	if err := os.RemoveAll(state); err != nil {
		return err
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(state)

	endpoints := filepath.Join(rootDir, "examples", "bookstore", "endpoints.yaml")
	config := fmt.Sprintf(`dataDir: %s
pluginDir: %s
debugAddress: %s
apiAddress: 127.0.0.1:15443
xdsAddress: 127.0.0.1:15128
providers:
  - name: onprem
    plugin: osm-provider-static
    config: {file: %s}
`, filepath.Join(state, "server"), filepath.Join(rootDir, "bin"), *debugAddr, endpoints)
	configFile := filepath.Join(state, "server.yaml")
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		return err
	}

	logFile, err := os.Create(filepath.Join(state, "server.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	server := exec.Command(filepath.Join(rootDir, "bin", "osm-server"), "serve", "--config", configFile)
	server.Stdout, server.Stderr = logFile, logFile
	server.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := server.Start(); err != nil {
		return fmt.Errorf("start osm-server (run `make build` first): %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- server.Wait() }()
	defer func() {
		_ = syscall.Kill(-server.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-server.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		fmt.Println("\ndemo stopped; nothing left running.")
	}()

	base := "http://" + *debugAddr
	fmt.Printf("osm-server started (pid %d, log %s)\n", server.Process.Pid, logFile.Name())
	if err := waitReady(ctx, base, exited, logFile.Name()); err != nil {
		return err
	}
	fmt.Printf("ready. Edit %s and watch the view change within a second; Ctrl-C stops.\n\n", endpoints)

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := ""
	for {
		view, err := render(ctx, base)
		if err != nil {
			view = "debug API: " + err.Error() + "\n"
		}
		if view != last {
			fmt.Printf("---- %s\n%s", time.Now().Format(time.TimeOnly), view)
			last = view
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-exited:
			exited <- err
			log, _ := os.ReadFile(logFile.Name())
			return fmt.Errorf("osm-server exited (%v); its log:\n%s", err, log)
		case <-tick.C:
		}
	}
}

func waitReady(ctx context.Context, base string, exited chan error, logName string) error {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := get(ctx, base+"/readyz"); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-exited:
			exited <- err
			log, _ := os.ReadFile(logName)
			return fmt.Errorf("osm-server exited before it was ready (%v); its log:\n%s", err, log)
		case <-time.After(100 * time.Millisecond):
		}
	}
	log, _ := os.ReadFile(logName)
	return fmt.Errorf("osm-server not ready within 15s; its log:\n%s", log)
}

// render returns the compact view: providers, then each service's endpoints.
func render(ctx context.Context, base string) (string, error) {
	var providers struct {
		Providers []struct {
			Name, State, LastError string
			Restarts               int
		}
	}
	var services struct {
		Services []struct{ Namespace, Name string }
	}
	if err := getJSON(ctx, base+"/api/v1/providers", &providers); err != nil {
		return "", err
	}
	if err := getJSON(ctx, base+"/api/v1/services", &services); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range providers.Providers {
		fmt.Fprintf(&b, "provider %-10s %-10s restarts=%d %s\n", p.Name, p.State, p.Restarts, p.LastError)
	}
	for _, s := range services.Services {
		var eps struct {
			Endpoints []struct {
				IP     string
				Port   int
				Labels map[string]string
			}
		}
		if err := getJSON(ctx, fmt.Sprintf("%s/api/v1/services/%s/%s/endpoints", base, s.Namespace, s.Name), &eps); err != nil {
			return "", err
		}
		var addrs []string
		for _, e := range eps.Endpoints {
			a := fmt.Sprintf("%s:%d", e.IP, e.Port)
			if v := e.Labels["version"]; v != "" {
				a += "(" + v + ")"
			}
			addrs = append(addrs, a)
		}
		fmt.Fprintf(&b, "  %-24s %s\n", s.Namespace+"/"+s.Name, strings.Join(addrs, " "))
	}
	return b.String(), nil
}

func get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
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

func getJSON(ctx context.Context, url string, v any) error {
	body, err := get(ctx, url)
	if err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}
