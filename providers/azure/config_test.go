package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/provider"
)

func TestParseConfig(t *testing.T) {
	const sub = `"subscriptionId": "6f1c2b3a-4d5e-4f60-8a7b-9c0d1e2f3a4b"`
	cases := []struct {
		name      string
		json      string
		testBuild bool
		want      config
		// errs are substrings of the expected error; none means valid.
		errs []string
	}{
		{
			name: "minimal: defaults filled in",
			json: `{` + sub + `, "credential": {"mode": "managedIdentity"}}`,
			want: config{SubscriptionID: testSub, Credential: credentialConfig{Mode: "managedIdentity"},
				PollInterval: duration(30 * time.Second), ServiceTag: "osm-service", PortTag: "osm-port"},
		},
		{
			name: "everything set",
			json: `{` + sub + `, "resourceGroups": ["rg-a", "My.RG(1)"], "credential": {"mode": "managedIdentity", "clientId": "11111111-2222-3333-4444-555555555555"},
				"pollInterval": "2m", "serviceTag": "mesh-service", "portTag": "mesh-port"}`,
			want: config{SubscriptionID: testSub, ResourceGroups: []string{"rg-a", "My.RG(1)"},
				Credential:   credentialConfig{Mode: "managedIdentity", ClientID: "11111111-2222-3333-4444-555555555555"},
				PollInterval: duration(2 * time.Minute), ServiceTag: "mesh-service", PortTag: "mesh-port"},
		},
		{name: "workload identity", json: `{` + sub + `, "credential": {"mode": "workloadIdentity"}}`,
			want: config{SubscriptionID: testSub, Credential: credentialConfig{Mode: "workloadIdentity"}, PollInterval: duration(30 * time.Second), ServiceTag: "osm-service", PortTag: "osm-port"}},
		{name: "environment", json: `{` + sub + `, "credential": {"mode": "environment"}}`,
			want: config{SubscriptionID: testSub, Credential: credentialConfig{Mode: "environment"}, PollInterval: duration(30 * time.Second), ServiceTag: "osm-service", PortTag: "osm-port"}},
		{name: "azure CLI", json: `{` + sub + `, "credential": {"mode": "azureCLI"}}`,
			want: config{SubscriptionID: testSub, Credential: credentialConfig{Mode: "azureCLI"}, PollInterval: duration(30 * time.Second), ServiceTag: "osm-service", PortTag: "osm-port"}},
		{name: "default only when asked for", json: `{` + sub + `, "credential": {"mode": "default"}}`,
			want: config{SubscriptionID: testSub, Credential: credentialConfig{Mode: "default"}, PollInterval: duration(30 * time.Second), ServiceTag: "osm-service", PortTag: "osm-port"}},
		{
			name: "test mode in a test build: no credential, short poll interval",
			json: `{` + sub + `, "testFixture": "/tmp/f.json", "pollInterval": "20ms"}`, testBuild: true,
			want: config{SubscriptionID: testSub, TestFixture: "/tmp/f.json", PollInterval: duration(20 * time.Millisecond), ServiceTag: "osm-service", PortTag: "osm-port"},
		},

		{name: "empty", json: `{}`, errs: []string{"subscriptionId is required", "az account show"}},
		{name: "subscription not a GUID", json: `{"subscriptionId": "my-sub", "credential": {"mode": "managedIdentity"}}`, errs: []string{`subscriptionId "my-sub" is not a subscription ID`}},
		{name: "unknown key", json: `{` + sub + `, "credential": {"mode": "managedIdentity"}, "resourceGroup": "x"}`, errs: []string{`unknown field "resourceGroup"`, "known keys"}},
		{name: "key with the wrong case", json: `{"subscriptionID": "x"}`, errs: []string{`did you mean "subscriptionId"`}},
		{name: "no credential mode", json: `{` + sub + `}`, errs: []string{"credential.mode is required", "managedIdentity, workloadIdentity, environment, azureCLI, default"}},
		{name: "unknown credential mode", json: `{` + sub + `, "credential": {"mode": "msi"}}`, errs: []string{`credential.mode "msi" is not one of`}},
		{name: "credential mode with the wrong case", json: `{` + sub + `, "credential": {"mode": "ManagedIdentity"}}`, errs: []string{`did you mean "managedIdentity"`}},
		{name: "service principal", json: `{` + sub + `, "credential": {"mode": "servicePrincipal"}}`, errs: []string{`a service principal is mode "environment"`, "AZURE_CLIENT_SECRET"}},
		{name: "clientId with the CLI", json: `{` + sub + `, "credential": {"mode": "azureCLI", "clientId": "11111111-2222-3333-4444-555555555555"}}`, errs: []string{"credential.clientId is only used with credential.mode managedIdentity or workloadIdentity"}},
		{name: "clientId not a GUID", json: `{` + sub + `, "credential": {"mode": "managedIdentity", "clientId": "osm"}}`, errs: []string{`credential.clientId "osm" is not a client ID`}},
		{name: "poll interval too short", json: `{` + sub + `, "credential": {"mode": "managedIdentity"}, "pollInterval": "5s"}`, errs: []string{"pollInterval 5s is below the minimum of 10s", "use 10s or more"}},
		{name: "poll interval not a duration", json: `{` + sub + `, "credential": {"mode": "managedIdentity"}, "pollInterval": 30}`, errs: []string{`pollInterval: want a duration string such as "30s"`}},
		{name: "poll interval bad unit", json: `{` + sub + `, "credential": {"mode": "managedIdentity"}, "pollInterval": "30 seconds"}`, errs: []string{"pollInterval: want a duration string"}},
		{name: "bad resource group", json: `{` + sub + `, "credential": {"mode": "managedIdentity"}, "resourceGroups": ["rg/a"]}`, errs: []string{`resourceGroups[0]: "rg/a" is not a resource group name`}},
		{name: "resource group ending in a dot", json: `{` + sub + `, "credential": {"mode": "managedIdentity"}, "resourceGroups": ["rg."]}`, errs: []string{`resourceGroups[0]: "rg." is not a resource group name`}},
		{name: "duplicate resource group", json: `{` + sub + `, "credential": {"mode": "managedIdentity"}, "resourceGroups": ["rg-a", "RG-A"]}`, errs: []string{`resourceGroups[1]: "RG-A" is listed twice`}},
		{name: "same tag twice", json: `{` + sub + `, "credential": {"mode": "managedIdentity"}, "serviceTag": "osm", "portTag": "OSM"}`, errs: []string{"serviceTag and portTag are both"}},
		{name: "bad tag name", json: `{` + sub + `, "credential": {"mode": "managedIdentity"}, "portTag": "osm/port"}`, errs: []string{`portTag "osm/port" is not an Azure tag name`}},
		{name: "test fixture in a production build", json: `{` + sub + `, "testFixture": "/tmp/f.json"}`, errs: []string{"testFixture is only accepted by osm-provider-azure built with -tags azurefake", "remove testFixture"}},
		{name: "test fixture with a credential", json: `{` + sub + `, "testFixture": "/tmp/f.json", "credential": {"mode": "azureCLI"}}`, testBuild: true, errs: []string{`credential.mode "azureCLI" is set together with testFixture`}},
		{name: "test mode minimum", json: `{` + sub + `, "testFixture": "/tmp/f.json", "pollInterval": "1ms"}`, testBuild: true, errs: []string{"pollInterval 1ms is below the minimum of 10ms"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseConfig([]byte(tc.json), tc.testBuild)
			if len(tc.errs) == 0 {
				if err != nil {
					t.Fatalf("parseConfig: %v", err)
				}
				if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(config{})); diff != "" {
					t.Errorf("config (-want +got):\n%s", diff)
				}
				return
			}
			if !errors.Is(err, provider.ErrInvalidConfig) {
				t.Fatalf("parseConfig error %v; want one wrapping provider.ErrInvalidConfig", err)
			}
			for _, want := range tc.errs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q; want it to contain %q", err, want)
				}
			}
		})
	}
}

func TestConfigureRejectsBadConfig(t *testing.T) {
	p := newProvider(testLogger(t), connectARM, nil)
	err := p.Configure(t.Context(), "bad", []byte(`{"subscriptionId": "x"}`))
	if !errors.Is(err, provider.ErrInvalidConfig) {
		t.Errorf("Configure error %v; want ErrInvalidConfig", err)
	}
	if _, err := p.ListServices(t.Context()); !errors.Is(err, provider.ErrNotConfigured) {
		t.Errorf("ListServices after a failed Configure: %v; want ErrNotConfigured", err)
	}
}

func TestRetryAfterHeader(t *testing.T) {
	// retryAfter reads the headers azcore's retry policy reads.
	for _, tc := range []struct {
		header, value string
		want          time.Duration
	}{
		{"Retry-After", "17", 17 * time.Second},
		{"retry-after-ms", "1500", 1500 * time.Millisecond},
		{"x-ms-retry-after-ms", "250", 250 * time.Millisecond},
		{"Retry-After", "soon", 0},
	} {
		t.Run(tc.header+"="+tc.value, func(t *testing.T) {
			if got := retryAfter(responseError(429, tc.header, tc.value)); got != tc.want {
				t.Errorf("retryAfter = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNewCredential(t *testing.T) {
	for _, k := range []string{"AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PATH", "AZURE_FEDERATED_TOKEN_FILE", "AZURE_USERNAME"} {
		t.Setenv(k, "")
	}
	cases := []struct {
		cfg     credentialConfig
		wantErr []string
	}{
		{cfg: credentialConfig{Mode: modeManagedIdentity}},
		{cfg: credentialConfig{Mode: modeManagedIdentity, ClientID: "11111111-2222-3333-4444-555555555555"}},
		{cfg: credentialConfig{Mode: modeAzureCLI}},
		{cfg: credentialConfig{Mode: modeDefault}},
		{cfg: credentialConfig{Mode: modeEnvironment}, wantErr: []string{"credential.mode environment", "AZURE_TENANT_ID", "osm-server's environment"}},
		{cfg: credentialConfig{Mode: modeWorkloadIdentity}, wantErr: []string{"credential.mode workloadIdentity", "AZURE_FEDERATED_TOKEN_FILE"}},
	}
	for _, tc := range cases {
		t.Run(tc.cfg.Mode+tc.cfg.ClientID, func(t *testing.T) {
			cred, err := newCredential(tc.cfg)
			if len(tc.wantErr) == 0 {
				if err != nil || cred == nil {
					t.Fatalf("newCredential(%+v) = %v, %v; want a credential (tokens are only fetched when polling)", tc.cfg, cred, err)
				}
				return
			}
			if !errors.Is(err, provider.ErrInvalidConfig) {
				t.Fatalf("newCredential(%+v) error %v; want ErrInvalidConfig", tc.cfg, err)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q; want it to contain %q", err, want)
				}
			}
		})
	}
}
