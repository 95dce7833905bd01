// Package fakearm is an in-memory Azure subscription served through the
// Azure SDK's own fake servers (armcompute/v8/fake, armnetwork/v9/fake and
// azcore/fake). The Azure provider's tests use it, and so does the plugin's
// test mode, which only binaries built with -tags azurefake contain.
//
// A Model holds a Fixture (scale sets, standalone VMs, their instances and
// addresses) and answers the ARM list calls the provider makes the way ARM
// does: paged lists, instance views only where ARM returns them, and a 404
// from the Uniform scale-set NIC listing for a Flexible scale set.
//
// It must never be imported by the production plugin build.
package fakearm

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	computefake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8/fake"
	networkfake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9/fake"
)

// Fixture is what the fake subscription holds. Its JSON form is the test
// fixture file of the plugin's test mode.
type Fixture struct {
	// ResourceGroups that exist besides those named by scale sets and VMs.
	ResourceGroups []string `json:"resourceGroups,omitempty"`
	// ScaleSets are VM Scale Sets with their instances.
	ScaleSets []ScaleSet `json:"scaleSets,omitempty"`
	// VirtualMachines are standalone VMs (not in a scale set).
	VirtualMachines []VirtualMachine `json:"virtualMachines,omitempty"`
	// PageSize is how many items each page of a list holds; 0 means 100.
	PageSize int `json:"pageSize,omitempty"`
	// CredentialError, when set, makes every token request fail with it.
	CredentialError string `json:"credentialError,omitempty"`
	// ARMError, when set, makes every ARM request fail with it.
	ARMError *ARMError `json:"armError,omitempty"`
}

// ARMError is an error response from ARM.
type ARMError struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
}

// ScaleSet is a VM Scale Set.
type ScaleSet struct {
	ResourceGroup string `json:"resourceGroup"`
	Name          string `json:"name"`
	// Mode is "Uniform" (the default) or "Flexible".
	Mode      string            `json:"mode,omitempty"`
	Tags      map[string]string `json:"tags,omitempty"`
	Instances []Instance        `json:"instances,omitempty"`
}

// Instance is one VM: a scale-set instance or a standalone VM.
type Instance struct {
	// Name is the VM name (Flexible, standalone) or the instance ID
	// (Uniform); empty means the instance's index.
	Name string `json:"name,omitempty"`
	// PrivateIP is the primary private IP of the primary NIC's primary
	// IP configuration.
	PrivateIP string `json:"privateIP"`
	// SecondaryIP, when set, adds a non-primary NIC (listed first) and a
	// non-primary IP configuration on the primary NIC with this address.
	SecondaryIP string `json:"secondaryIP,omitempty"`
	// PowerState is the PowerState/ status code suffix: "running" (the
	// default), "deallocated", "stopped", "starting", ...
	PowerState string `json:"powerState,omitempty"`
	// ProvisioningState is "Succeeded" (the default), "Failed", ...
	ProvisioningState string `json:"provisioningState,omitempty"`
	// NoNIC leaves out the NIC, as while a VM is being created.
	NoNIC bool `json:"noNIC,omitempty"`
}

// VirtualMachine is a standalone VM.
type VirtualMachine struct {
	ResourceGroup string            `json:"resourceGroup"`
	Tags          map[string]string `json:"tags,omitempty"`
	Instance
}

// clone returns a deep copy, so the fake servers never share memory with
// the test that changes the model.
func (f Fixture) clone() Fixture {
	b, err := json.Marshal(f)
	if err != nil {
		panic(fmt.Sprintf("fakearm: marshal fixture: %v", err)) // plain data: cannot happen
	}
	var out Fixture
	if err := json.Unmarshal(b, &out); err != nil {
		panic(fmt.Sprintf("fakearm: unmarshal fixture: %v", err))
	}
	return out
}

// ReadFixture reads a fixture file strictly (unknown keys are errors).
func ReadFixture(path string) (Fixture, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Fixture{}, fmt.Errorf("read azure test fixture: %w", err)
	}
	var f Fixture
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Fixture{}, fmt.Errorf("azure test fixture %s: %w", path, err)
	}
	return f, nil
}

// Model is the fake subscription. It is safe for concurrent use.
type Model struct {
	sub string

	mu       sync.Mutex
	fx       Fixture
	faults   map[string][]fault // by operation, consumed in order
	throttle map[string][]time.Duration
	calls    map[string]int

	cred      *Credential
	compute   *resettingTransport
	network   *resettingTransport
	transport policy.Transporter
}

// New returns a model of subscription sub holding fx.
func New(sub string, fx Fixture) *Model {
	m := &Model{
		sub:      sub,
		fx:       fx.clone(),
		faults:   map[string][]fault{},
		throttle: map[string][]time.Duration{},
		calls:    map[string]int{},
		cred:     &Credential{},
	}
	m.compute = &resettingTransport{m: m, newT: func() policy.Transporter {
		return computefake.NewServerFactoryTransport(m.computeServers())
	}}
	m.network = &resettingTransport{m: m, newT: func() policy.Transporter {
		return networkfake.NewServerFactoryTransport(m.networkServers())
	}}
	m.transport = routingTransport{compute: m.compute, network: m.network}
	m.applyCredentialError()
	return m
}

// Transport is the policy.Transporter that ARM clients of this model use
// (arm.ClientOptions.Transport).
func (m *Model) Transport() policy.Transporter { return m.transport }

// Credential is the token credential that goes with the model.
func (m *Model) Credential() *Credential { return m.cred }

// Set replaces the whole fixture with a copy of fx.
func (m *Model) Set(fx Fixture) {
	m.mu.Lock()
	m.fx = fx.clone()
	m.mu.Unlock()
	m.applyCredentialError()
}

// Update changes the fixture under the model's lock.
func (m *Model) Update(fn func(*Fixture)) {
	m.mu.Lock()
	fn(&m.fx)
	m.mu.Unlock()
	m.applyCredentialError()
}

// Open serves the fixture file at path: it returns the credential and the
// transport for ARM clients of subscription sub, and a reload function
// that re-reads the file into the model (the plugin's test mode calls it
// before every poll, so a test changes what the plugin sees by rewriting
// the file).
func Open(path, sub string) (azcore.TokenCredential, policy.Transporter, func() error, error) {
	fx, err := ReadFixture(path)
	if err != nil {
		return nil, nil, nil, err
	}
	m := New(sub, fx)
	reload := func() error {
		fx, err := ReadFixture(path)
		if err != nil {
			return err
		}
		m.Set(fx)
		return nil
	}
	return m.Credential(), m.Transport(), reload, nil
}
