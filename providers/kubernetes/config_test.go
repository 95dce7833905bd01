package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/provider"
)

func TestParseConfig(t *testing.T) {
	cases := []struct {
		name    string
		raw     string
		wantErr []string // substrings of the error; nil means valid
	}{
		{name: "empty is all namespaces in-cluster", raw: ``},
		{name: "full", raw: `{"kubeconfig": "/etc/osm/east.kubeconfig", "context": "east", "namespaces": ["shop", "pay"],
			"labelSelector": "mesh=on", "namespaceMap": {"shop": "store"}}`},
		{name: "unknown key", raw: `{"kube_config": "/x"}`, wantErr: []string{`unknown field "kube_config"`, "known keys: kubeconfig"}},
		{name: "wrong type", raw: `{"namespaces": "shop"}`, wantErr: []string{"namespaces"}},
		{name: "context without kubeconfig", raw: `{"context": "east"}`, wantErr: []string{`context "east"`, "set kubeconfig"}},
		{name: "bad namespace", raw: `{"namespaces": ["Shop"]}`, wantErr: []string{"namespaces[0]", "DNS-1123"}},
		{name: "duplicate namespace", raw: `{"namespaces": ["a", "a"]}`, wantErr: []string{"namespaces[1]", "twice"}},
		{name: "bad selector", raw: `{"labelSelector": "mesh in (a"}`, wantErr: []string{"labelSelector", "for example"}},
		{name: "bad mesh namespace", raw: `{"namespaceMap": {"shop": "Store_1"}}`, wantErr: []string{`namespaceMap["shop"]`, "mesh namespace"}},
		{name: "mapping an unwatched namespace", raw: `{"namespaces": ["a"], "namespaceMap": {"b": "c"}}`,
			wantErr: []string{`namespaceMap["b"]`, "not in namespaces", "add it to namespaces or remove the mapping"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig([]byte(tc.raw))
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("parseConfig: %v", err)
				}
				return
			}
			if !errors.Is(err, provider.ErrInvalidConfig) {
				t.Fatalf("parseConfig error = %v; want one wrapping provider.ErrInvalidConfig", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("parseConfig error = %q; want it to contain %q", err, w)
				}
			}
		})
	}
}

const testKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: east
  cluster: {server: "https://east.example:6443"}
- name: west
  cluster: {server: "https://west.example:6443"}
users:
- name: u
  user: {token: secret}
contexts:
- name: east
  context: {cluster: east, user: u}
- name: west
  context: {cluster: west, user: u}
current-context: east
`

func TestClientFromConfig(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte(testKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	cases := []struct {
		name     string
		cfg      config
		wantHost string
		wantErr  []string
	}{
		{name: "current context", cfg: config{Kubeconfig: kc}, wantHost: "https://east.example:6443"},
		{name: "chosen context", cfg: config{Kubeconfig: kc, Context: "west"}, wantHost: "https://west.example:6443"},
		{name: "missing context", cfg: config{Kubeconfig: kc, Context: "north"}, wantErr: []string{`context "north" is not in kubeconfig`, `["east" "west"]`}},
		{name: "missing file", cfg: config{Kubeconfig: filepath.Join(dir, "nope")}, wantErr: []string{"nope", "no such file", "set kubeconfig"}},
		{name: "not in a cluster", cfg: config{}, wantErr: []string{"KUBERNETES_SERVICE_HOST", "set kubeconfig"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, host, err := newClientset(tc.cfg, "test")
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("newClientset: %v", err)
				}
				if host != tc.wantHost {
					t.Errorf("host = %q, want %q", host, tc.wantHost)
				}
				return
			}
			if !errors.Is(err, provider.ErrInvalidConfig) {
				t.Fatalf("newClientset error = %v; want one wrapping provider.ErrInvalidConfig", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("newClientset error = %q; want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestConfigureRejectsBadConfig(t *testing.T) {
	p := newProvider(testLogger(t), newClientset)
	t.Cleanup(func() { p.Close() })
	err := p.Configure(context.Background(), "east", []byte(`{"labelSelector": "mesh in (a"}`))
	if !errors.Is(err, provider.ErrInvalidConfig) {
		t.Errorf("Configure(bad selector) = %v; want ErrInvalidConfig", err)
	}
	if _, err := p.ListServices(context.Background()); !errors.Is(err, provider.ErrNotConfigured) {
		t.Errorf("ListServices after a failed Configure = %v; want ErrNotConfigured", err)
	}
}

func TestMeshNamespace(t *testing.T) {
	c, err := parseConfig([]byte(`{"namespaceMap": {"shop-prod": "shop"}}`))
	if err != nil {
		t.Fatal(err)
	}
	got := []string{c.meshNamespace("shop-prod"), c.meshNamespace("default")}
	if diff := cmp.Diff([]string{"shop", "default"}, got); diff != "" {
		t.Errorf("meshNamespace (-want +got):\n%s", diff)
	}
}
