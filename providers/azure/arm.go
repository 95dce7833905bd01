package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9"

	"github.com/osm-vm/osm-vm/provider"
)

// armClients are the ARM clients discovery uses. Tests and the test mode
// build them on the SDK's fake server transports; production on the real
// one.
type armClients struct {
	scaleSets   *armcompute.VirtualMachineScaleSetsClient
	scaleSetVMs *armcompute.VirtualMachineScaleSetVMsClient
	vms         *armcompute.VirtualMachinesClient
	nics        *armnetwork.InterfacesClient
	// refresh, when set, runs before every poll (the test mode re-reads
	// its fixture file).
	refresh func() error
}

// connectFunc builds the ARM clients for a validated config.
type connectFunc func(cfg config) (*armClients, error)

// fixtureOpener opens a test fixture file as a credential and a transport
// served by the SDK's fake servers, and a function that re-reads the file.
// Only test builds have one.
type fixtureOpener func(path, subscriptionID string) (azcore.TokenCredential, policy.Transporter, func() error, error)

func newARMClients(subscriptionID string, cred azcore.TokenCredential, opts *arm.ClientOptions) (*armClients, error) {
	compute, err := armcompute.NewClientFactory(subscriptionID, cred, opts)
	if err != nil {
		return nil, fmt.Errorf("create Azure compute client: %w", err)
	}
	network, err := armnetwork.NewClientFactory(subscriptionID, cred, opts)
	if err != nil {
		return nil, fmt.Errorf("create Azure network client: %w", err)
	}
	return &armClients{
		scaleSets:   compute.NewVirtualMachineScaleSetsClient(),
		scaleSetVMs: compute.NewVirtualMachineScaleSetVMsClient(),
		vms:         compute.NewVirtualMachinesClient(),
		nics:        network.NewInterfacesClient(),
	}, nil
}

// clientOptions configures azcore's pipeline. Its retry policy already
// retries 408, 429 and 5xx responses and honours Retry-After (and
// retry-after-ms, x-ms-retry-after-ms); we only bound it. A Retry-After
// longer than MaxRetryDelay makes azcore give up at once, and the poll
// loop then waits it out between polls instead (nextPoll), serving the
// last good endpoints meanwhile.
func clientOptions(cfg config, transport policy.Transporter) *arm.ClientOptions {
	return &arm.ClientOptions{ClientOptions: policy.ClientOptions{
		Retry: policy.RetryOptions{
			MaxRetries:    3,
			TryTimeout:    30 * time.Second,
			MaxRetryDelay: min(cfg.pollInterval(), time.Minute),
		},
		Telemetry: policy.TelemetryOptions{ApplicationID: "osm-provider-azure"},
		Transport: transport,
	}}
}

// connectARM builds clients for Azure Resource Manager with the
// configured credential.
func connectARM(cfg config) (*armClients, error) {
	cred, err := newCredential(cfg.Credential)
	if err != nil {
		return nil, err
	}
	return newARMClients(cfg.SubscriptionID, namedCredential{mode: cfg.Credential.Mode, cred: cred}, clientOptions(cfg, nil))
}

// connectFixture builds clients on a test fixture through open.
func connectFixture(open fixtureOpener) connectFunc {
	return func(cfg config) (*armClients, error) {
		cred, transport, reload, err := open(cfg.TestFixture, cfg.SubscriptionID)
		if err != nil {
			return nil, fmt.Errorf("%w: testFixture: %w", provider.ErrInvalidConfig, err)
		}
		c, err := newARMClients(cfg.SubscriptionID, namedCredential{mode: "testFixture", cred: cred}, clientOptions(cfg, transport))
		if err != nil {
			return nil, err
		}
		c.refresh = reload
		return c, nil
	}
}

func newCredential(c credentialConfig) (azcore.TokenCredential, error) {
	var (
		cred azcore.TokenCredential
		err  error
	)
	switch c.Mode {
	case modeManagedIdentity:
		opts := &azidentity.ManagedIdentityCredentialOptions{}
		if c.ClientID != "" {
			opts.ID = azidentity.ClientID(c.ClientID)
		}
		cred, err = azidentity.NewManagedIdentityCredential(opts)
	case modeWorkloadIdentity:
		cred, err = azidentity.NewWorkloadIdentityCredential(&azidentity.WorkloadIdentityCredentialOptions{ClientID: c.ClientID})
	case modeEnvironment:
		cred, err = azidentity.NewEnvironmentCredential(nil)
	case modeAzureCLI:
		cred, err = azidentity.NewAzureCLICredential(nil)
	case modeDefault:
		cred, err = azidentity.NewDefaultAzureCredential(nil)
	default:
		return nil, fmt.Errorf("%w: credential.mode %q is not supported", provider.ErrInvalidConfig, c.Mode)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: credential.mode %s: %w; %s", provider.ErrInvalidConfig, c.Mode, err, credentialHint(c.Mode))
	}
	return cred, nil
}

// credentialHint says what a credential mode needs.
func credentialHint(mode string) string {
	switch mode {
	case modeManagedIdentity:
		return "the plugin must run on an Azure VM (or scale set) with a managed identity; set credential.clientId for a user-assigned one"
	case modeWorkloadIdentity:
		return "set AZURE_TENANT_ID, AZURE_CLIENT_ID (or credential.clientId) and AZURE_FEDERATED_TOKEN_FILE in osm-server's environment"
	case modeEnvironment:
		return "set AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET (or AZURE_CLIENT_CERTIFICATE_PATH) in osm-server's environment"
	case modeAzureCLI:
		return "run `az login` as the user osm-server runs as (development only)"
	case modeDefault:
		return "configure one of the sources DefaultAzureCredential tries (environment, workload identity, managed identity, Azure CLI)"
	}
	return "check the test fixture's credentialError"
}

// namedCredential marks token failures as credential errors, so health
// messages can tell them from ARM and network failures.
type namedCredential struct {
	mode string
	cred azcore.TokenCredential
}

func (c namedCredential) GetToken(ctx context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	tok, err := c.cred.GetToken(ctx, opts)
	if err != nil {
		return tok, &credentialError{mode: c.mode, err: err}
	}
	return tok, nil
}

type credentialError struct {
	mode string
	err  error
}

func (e *credentialError) Error() string {
	return fmt.Sprintf("azure credential (mode %s) could not get a token: %v", e.mode, e.err)
}

func (e *credentialError) Unwrap() error { return e.err }

// armError is a failed ARM call: what was being done and why it failed.
type armError struct {
	op  string
	err error
}

func (e *armError) Error() string { return e.op + ": " + e.err.Error() }
func (e *armError) Unwrap() error { return e.err }

func opError(err error, format string, args ...any) error {
	return &armError{op: fmt.Sprintf(format, args...), err: err}
}

// isNotFound says whether err is ARM's 404 for a resource that does not
// exist (any more).
func isNotFound(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound
}

// retryAfter returns the wait an ARM error response asks for, or 0.
func retryAfter(err error) time.Duration {
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.RawResponse == nil {
		return 0
	}
	h := re.RawResponse.Header
	for _, ms := range []string{"retry-after-ms", "x-ms-retry-after-ms"} {
		if v, err := strconv.Atoi(h.Get(ms)); err == nil && v > 0 {
			return time.Duration(v) * time.Millisecond
		}
	}
	v := h.Get("Retry-After")
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return time.Until(t)
	}
	return 0
}

// isThrottled says whether err is ARM's 429.
func isThrottled(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusTooManyRequests
}

// describe turns a failed poll into a one-line health message that names
// what failed and the fix. wait is when the next poll is.
func describe(err error, cfg config, wait time.Duration) string {
	op, detail := "read Azure Resource Manager", err
	var ae *armError
	if errors.As(err, &ae) {
		op, detail = ae.op, ae.err
	}
	keep := fmt.Sprintf("serving the last good endpoints; next try in %v", wait.Round(time.Millisecond))
	var ce *credentialError
	if errors.As(err, &ce) {
		return fmt.Sprintf("%s: %v; %s; %s", op, ce, credentialHint(ce.mode), keep)
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		status := fmt.Sprintf("%d %s", re.StatusCode, re.ErrorCode)
		switch re.StatusCode {
		case http.StatusUnauthorized:
			return fmt.Sprintf("%s: ARM rejected the credential's token (%s); check that the identity belongs to the subscription's tenant; %s", op, status, keep)
		case http.StatusForbidden:
			return fmt.Sprintf("%s: the credential is not allowed to read it (%s); assign it the Reader role, or a role with the actions listed in docs/plugins/azure.md, on subscription %s or the resource groups; %s", op, status, cfg.SubscriptionID, keep)
		case http.StatusNotFound:
			if re.ErrorCode == "SubscriptionNotFound" {
				return fmt.Sprintf("%s: subscription %s not found (%s); check subscriptionId; %s", op, cfg.SubscriptionID, status, keep)
			}
			return fmt.Sprintf("%s: not found (%s); check that resourceGroups names resource groups of subscription %s; %s", op, status, cfg.SubscriptionID, keep)
		case http.StatusTooManyRequests:
			wait := "backing off"
			if ra := retryAfter(err); ra > 0 {
				wait = fmt.Sprintf("waiting the %v ARM asked for (Retry-After)", ra.Round(time.Second))
			}
			return fmt.Sprintf("%s: ARM is throttling this subscription's reads (%s); %s; raise pollInterval if this persists; %s", op, status, wait, keep)
		}
		return fmt.Sprintf("%s: ARM answered %s; %s", op, status, keep)
	}
	return fmt.Sprintf("%s: %v; check network access to management.azure.com; %s", op, detail, keep)
}
