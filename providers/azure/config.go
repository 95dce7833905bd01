package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/osm-vm/osm-vm/provider"
)

// config is an instance's `config` block. See docs/plugins/azure.md.
type config struct {
	// SubscriptionID is the subscription that holds the scale sets and VMs.
	SubscriptionID string `json:"subscriptionId"`
	// ResourceGroups limits discovery to these resource groups; empty
	// means the whole subscription.
	ResourceGroups []string `json:"resourceGroups"`
	// Credential says how the plugin authenticates to ARM.
	Credential credentialConfig `json:"credential"`
	// PollInterval is how often ARM is read; default 30s.
	PollInterval duration `json:"pollInterval"`
	// ServiceTag names the tag whose value is "<name>.<namespace>" of the
	// mesh service a scale set or VM serves; default "osm-service".
	ServiceTag string `json:"serviceTag"`
	// PortTag names the tag that holds the service's port; default
	// "osm-port".
	PortTag string `json:"portTag"`
	// TestFixture selects the test mode: the SDK's fake servers answer
	// from this JSON file instead of ARM. Only builds with -tags azurefake
	// accept it.
	TestFixture string `json:"testFixture"`
}

// credentialConfig selects an azidentity credential.
type credentialConfig struct {
	// Mode is one of credentialModes.
	Mode string `json:"mode"`
	// ClientID selects a user-assigned managed identity, or the app of a
	// workload identity (instead of AZURE_CLIENT_ID).
	ClientID string `json:"clientId"`
}

const (
	modeManagedIdentity  = "managedIdentity"
	modeWorkloadIdentity = "workloadIdentity"
	modeEnvironment      = "environment"
	modeAzureCLI         = "azureCLI"
	modeDefault          = "default"
)

var credentialModes = []string{modeManagedIdentity, modeWorkloadIdentity, modeEnvironment, modeAzureCLI, modeDefault}

const (
	defaultPollInterval = 30 * time.Second
	// minPollInterval protects the subscription's ARM read quota, which
	// every other tool using the subscription shares.
	minPollInterval = 10 * time.Second
	// minTestPollInterval applies in test mode, where nothing is shared.
	minTestPollInterval = 10 * time.Millisecond
	defaultServiceTag   = "osm-service"
	defaultPortTag      = "osm-port"
)

// duration is a time.Duration written as a Go duration string ("30s").
// pollInterval is the only key of this type, so its errors name it.
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("pollInterval: want a duration string such as \"30s\" or \"2m\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("pollInterval: want a duration string such as \"30s\" or \"2m\": %w", err)
	}
	*d = duration(v)
	return nil
}

var (
	// Resource group names: 1-90 letters, digits, '_', '-', '.', '(' and
	// ')', not ending in '.'.
	resourceGroupRE = regexp.MustCompile(`^[-\w.()]{0,89}[-\w()]$`)
	// Tag names may not contain < > % & \ ? /.
	badTagChars = `<>%&\?/`
)

// parseConfig decodes and validates an instance's config block. Errors
// wrap provider.ErrInvalidConfig and name the key and the fix.
// testBuild says whether this build has the test mode (-tags azurefake).
func parseConfig(raw []byte, testBuild bool) (config, error) {
	var c config
	if err := provider.DecodeConfig(raw, &c); err != nil {
		return config{}, fmt.Errorf("%w (known keys: subscriptionId, resourceGroups, credential.mode, credential.clientId, pollInterval, serviceTag, portTag)", err)
	}
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", provider.ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	testMode := c.TestFixture != ""
	if testMode && !testBuild {
		return config{}, invalid("testFixture is only accepted by osm-provider-azure built with -tags azurefake (a test build); remove testFixture to read Azure Resource Manager")
	}

	switch {
	case c.SubscriptionID == "":
		return config{}, invalid("subscriptionId is required: set it to the ID of the subscription that holds the scale sets and VMs (az account show --query id -o tsv)")
	case uuid.Validate(c.SubscriptionID) != nil:
		return config{}, invalid("subscriptionId %q is not a subscription ID; use the GUID form, for example \"00000000-0000-0000-0000-000000000000\" (az account show --query id -o tsv)", c.SubscriptionID)
	}

	for i, rg := range c.ResourceGroups {
		if !resourceGroupRE.MatchString(rg) {
			return config{}, invalid("resourceGroups[%d]: %q is not a resource group name (1-90 letters, digits, '_', '-', '.', '(' or ')', not ending in '.')", i, rg)
		}
		if slices.ContainsFunc(c.ResourceGroups[:i], func(o string) bool { return strings.EqualFold(o, rg) }) {
			return config{}, invalid("resourceGroups[%d]: %q is listed twice (names are case-insensitive); remove the duplicate", i, rg)
		}
	}

	switch {
	case testMode && c.Credential.Mode != "":
		return config{}, invalid("credential.mode %q is set together with testFixture, which uses a fake credential; remove one of them", c.Credential.Mode)
	case testMode:
	case c.Credential.Mode == "":
		return config{}, invalid("credential.mode is required: one of %s (managedIdentity on an Azure VM; default tries them all and is only used when asked for)", strings.Join(credentialModes, ", "))
	case !slices.Contains(credentialModes, c.Credential.Mode):
		hint := ""
		for _, m := range credentialModes {
			if strings.EqualFold(m, c.Credential.Mode) {
				hint = fmt.Sprintf(" (did you mean %q? modes are case-sensitive)", m)
			}
		}
		if strings.EqualFold(c.Credential.Mode, "servicePrincipal") {
			hint = fmt.Sprintf(" (a service principal is mode %q, read from AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET or AZURE_CLIENT_CERTIFICATE_PATH)", modeEnvironment)
		}
		return config{}, invalid("credential.mode %q is not one of %s%s", c.Credential.Mode, strings.Join(credentialModes, ", "), hint)
	}
	if c.Credential.ClientID != "" {
		if c.Credential.Mode != modeManagedIdentity && c.Credential.Mode != modeWorkloadIdentity {
			return config{}, invalid("credential.clientId is only used with credential.mode %s or %s; remove it for mode %q", modeManagedIdentity, modeWorkloadIdentity, c.Credential.Mode)
		}
		if uuid.Validate(c.Credential.ClientID) != nil {
			return config{}, invalid("credential.clientId %q is not a client ID; use the GUID of the identity's client (application) ID", c.Credential.ClientID)
		}
	}

	minimum := minPollInterval
	if testMode {
		minimum = minTestPollInterval
	}
	switch {
	case c.PollInterval == 0:
		c.PollInterval = duration(defaultPollInterval)
	case time.Duration(c.PollInterval) < minimum:
		return config{}, invalid("pollInterval %v is below the minimum of %v, which protects the subscription's ARM read quota (shared with every other tool); use %v or more", time.Duration(c.PollInterval), minimum, minimum)
	}

	if c.ServiceTag == "" {
		c.ServiceTag = defaultServiceTag
	}
	if c.PortTag == "" {
		c.PortTag = defaultPortTag
	}
	for _, t := range []struct{ key, v string }{{"serviceTag", c.ServiceTag}, {"portTag", c.PortTag}} {
		if len(t.v) > 512 || strings.ContainsAny(t.v, badTagChars) {
			return config{}, invalid("%s %q is not an Azure tag name (at most 512 characters, none of %s)", t.key, t.v, badTagChars)
		}
	}
	if strings.EqualFold(c.ServiceTag, c.PortTag) {
		return config{}, invalid("serviceTag and portTag are both %q (tag names are case-insensitive); give them different names", c.ServiceTag)
	}
	return c, nil
}

func (c config) pollInterval() time.Duration { return time.Duration(c.PollInterval) }
