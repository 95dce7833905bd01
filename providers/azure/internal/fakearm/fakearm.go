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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	computefake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9"
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

type fault struct {
	status int
	code   string
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

func (m *Model) applyCredentialError() {
	m.mu.Lock()
	msg := m.fx.CredentialError
	m.mu.Unlock()
	if msg == "" {
		m.cred.SetError(nil)
	} else {
		m.cred.SetError(errors.New(msg))
	}
}

// Operation names, as the SDK's fakes name them.
const (
	OpListScaleSets        = "VirtualMachineScaleSetsClient.NewListPager"
	OpListAllScaleSets     = "VirtualMachineScaleSetsClient.NewListAllPager"
	OpListScaleSetVMs      = "VirtualMachineScaleSetVMsClient.NewListPager"
	OpListVMs              = "VirtualMachinesClient.NewListPager"
	OpListAllVMs           = "VirtualMachinesClient.NewListAllPager"
	OpInstanceView         = "VirtualMachinesClient.InstanceView"
	OpListNICs             = "InterfacesClient.NewListPager"
	OpListAllNICs          = "InterfacesClient.NewListAllPager"
	OpListScaleSetNICs     = "InterfacesClient.NewListVirtualMachineScaleSetNetworkInterfacesPager"
	opAny                  = "*"
	flexibleScaleSetFilter = `^'virtualMachineScaleSet/id' eq '([^']+)'$`
)

var filterRE = regexp.MustCompile(flexibleScaleSetFilter)

// Fail makes the next times calls of op (an Op constant, or "" for any
// operation) fail with an ARM error response of status and code.
func (m *Model) Fail(op string, times, status int, code string) {
	if op == "" {
		op = opAny
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for range times {
		m.faults[op] = append(m.faults[op], fault{status, code})
	}
}

// Throttle makes the next times requests of op (or "" for any) answer
// with a real HTTP 429 carrying Retry-After: retryAfter, before they reach
// the SDK fake. The SDK's fakes cannot do this themselves: every error
// they return is marked non-retriable and carries no headers, so azcore's
// retry policy (which honours Retry-After) would never see it.
func (m *Model) Throttle(op string, times int, retryAfter time.Duration) {
	if op == "" {
		op = opAny
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for range times {
		m.throttle[op] = append(m.throttle[op], retryAfter)
	}
}

// Calls returns how many requests op has received (each page counts).
func (m *Model) Calls(op string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[op]
}

// ResetCalls zeroes the request counters.
func (m *Model) ResetCalls() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.calls)
}

// takeFault returns the error to answer op with, if any, counting the
// request. Call with m.mu held.
func (m *Model) takeFaultLocked(op string) *fault {
	if m.fx.ARMError != nil {
		return &fault{m.fx.ARMError.Status, m.fx.ARMError.Code}
	}
	for _, key := range []string{op, opAny} {
		if q := m.faults[key]; len(q) > 0 {
			f := q[0]
			m.faults[key] = q[1:]
			return &f
		}
	}
	return nil
}

// begin returns a snapshot of the fixture and
// the fault to answer with, if any.
func (m *Model) begin(op string) (Fixture, *fault) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fx.clone(), m.takeFaultLocked(op)
}

// ---- resource IDs

func (m *Model) rgID(rg string) string {
	return fmt.Sprintf("/subscriptions/%s/resourceGroups/%s", m.sub, rg)
}

// ScaleSetID is the resource ID of a scale set.
func (m *Model) ScaleSetID(rg, name string) string {
	return m.rgID(rg) + "/providers/Microsoft.Compute/virtualMachineScaleSets/" + name
}

// ScaleSetVMID is the resource ID of a Uniform scale set's instance.
func (m *Model) ScaleSetVMID(rg, scaleSet, instanceID string) string {
	return m.ScaleSetID(rg, scaleSet) + "/virtualMachines/" + instanceID
}

// VMID is the resource ID of a VM (standalone or in a Flexible scale set).
func (m *Model) VMID(rg, name string) string {
	return m.rgID(rg) + "/providers/Microsoft.Compute/virtualMachines/" + name
}

func (m *Model) nicID(rg, vm string, secondary bool) string {
	if secondary {
		return m.rgID(rg) + "/providers/Microsoft.Network/networkInterfaces/" + vm + "-nic2"
	}
	return m.rgID(rg) + "/providers/Microsoft.Network/networkInterfaces/" + vm + "-nic"
}

func uniformNICID(vmID string, secondary bool) string {
	if secondary {
		return vmID + "/networkInterfaces/nic2"
	}
	return vmID + "/networkInterfaces/nic"
}

// ---- conversions

func instanceName(in Instance, i int) string {
	if in.Name != "" {
		return in.Name
	}
	return strconv.Itoa(i)
}

func statuses(in Instance) []*armcompute.InstanceViewStatus {
	prov := in.ProvisioningState
	if prov == "" {
		prov = "Succeeded"
	}
	power := in.PowerState
	if power == "" {
		power = "running"
	}
	return []*armcompute.InstanceViewStatus{
		{Code: to.Ptr("ProvisioningState/" + strings.ToLower(prov))},
		{Code: to.Ptr("PowerState/" + power)},
	}
}

func provisioning(in Instance) *string {
	if in.ProvisioningState == "" {
		return to.Ptr("Succeeded")
	}
	return to.Ptr(in.ProvisioningState)
}

func tags(t map[string]string) map[string]*string {
	if t == nil {
		return nil
	}
	out := make(map[string]*string, len(t))
	for k, v := range t {
		out[k] = to.Ptr(v)
	}
	return out
}

func mode(ss ScaleSet) armcompute.OrchestrationMode {
	if strings.EqualFold(ss.Mode, "Flexible") {
		return armcompute.OrchestrationModeFlexible
	}
	return armcompute.OrchestrationModeUniform
}

func (m *Model) scaleSet(ss ScaleSet) *armcompute.VirtualMachineScaleSet {
	return &armcompute.VirtualMachineScaleSet{
		ID:         to.Ptr(m.ScaleSetID(ss.ResourceGroup, ss.Name)),
		Name:       to.Ptr(ss.Name),
		Tags:       tags(ss.Tags),
		Properties: &armcompute.VirtualMachineScaleSetProperties{OrchestrationMode: to.Ptr(mode(ss))},
	}
}

// vm renders a standalone or Flexible VM; scaleSetID is "" for standalone.
func (m *Model) vm(rg, name string, t map[string]string, in Instance, scaleSetID string, withInstanceView bool) *armcompute.VirtualMachine {
	props := &armcompute.VirtualMachineProperties{ProvisioningState: provisioning(in)}
	if scaleSetID != "" {
		props.VirtualMachineScaleSet = &armcompute.SubResource{ID: to.Ptr(scaleSetID)}
	}
	if !in.NoNIC {
		var refs []*armcompute.NetworkInterfaceReference
		if in.SecondaryIP != "" {
			refs = append(refs, &armcompute.NetworkInterfaceReference{
				ID:         to.Ptr(m.nicID(rg, name, true)),
				Properties: &armcompute.NetworkInterfaceReferenceProperties{Primary: to.Ptr(false)},
			})
		}
		refs = append(refs, &armcompute.NetworkInterfaceReference{
			ID:         to.Ptr(m.nicID(rg, name, false)),
			Properties: &armcompute.NetworkInterfaceReferenceProperties{Primary: to.Ptr(true)},
		})
		props.NetworkProfile = &armcompute.NetworkProfile{NetworkInterfaces: refs}
	}
	if withInstanceView {
		props.InstanceView = &armcompute.VirtualMachineInstanceView{Statuses: statuses(in)}
	}
	return &armcompute.VirtualMachine{
		ID:         to.Ptr(m.VMID(rg, name)),
		Name:       to.Ptr(name),
		Tags:       tags(t),
		Properties: props,
	}
}

// nics renders the NICs of one VM: a non-primary one first when the
// instance has a secondary address, then the primary one with a
// non-primary IP configuration before the primary one.
func nics(vmID, primaryID, secondaryID string, in Instance) []*armnetwork.Interface {
	if in.NoNIC {
		return nil
	}
	ipconf := func(ip string, primary bool) *armnetwork.InterfaceIPConfiguration {
		return &armnetwork.InterfaceIPConfiguration{Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{
			Primary: to.Ptr(primary), PrivateIPAddress: to.Ptr(ip),
		}}
	}
	nic := func(id string, primary bool, confs ...*armnetwork.InterfaceIPConfiguration) *armnetwork.Interface {
		return &armnetwork.Interface{ID: to.Ptr(id), Properties: &armnetwork.InterfacePropertiesFormat{
			Primary:          to.Ptr(primary),
			VirtualMachine:   &armnetwork.SubResource{ID: to.Ptr(vmID)},
			IPConfigurations: confs,
		}}
	}
	if in.SecondaryIP == "" {
		return []*armnetwork.Interface{nic(primaryID, true, ipconf(in.PrivateIP, true))}
	}
	return []*armnetwork.Interface{
		nic(secondaryID, false, ipconf(in.SecondaryIP, true)),
		nic(primaryID, true, ipconf(in.SecondaryIP, false), ipconf(in.PrivateIP, true)),
	}
}

func rgExists(fx Fixture, rg string) bool {
	for _, r := range fx.ResourceGroups {
		if strings.EqualFold(r, rg) {
			return true
		}
	}
	for _, ss := range fx.ScaleSets {
		if strings.EqualFold(ss.ResourceGroup, rg) {
			return true
		}
	}
	for _, vm := range fx.VirtualMachines {
		if strings.EqualFold(vm.ResourceGroup, rg) {
			return true
		}
	}
	return false
}

func findScaleSet(fx Fixture, rg, name string) (ScaleSet, bool) {
	for _, ss := range fx.ScaleSets {
		if strings.EqualFold(ss.ResourceGroup, rg) && strings.EqualFold(ss.Name, name) {
			return ss, true
		}
	}
	return ScaleSet{}, false
}

func pageSize(fx Fixture) int {
	if fx.PageSize <= 0 {
		return 100
	}
	return fx.PageSize
}

// addPages splits items into pages of fx's page size (at least one page).
func addPages[T, R any](p *azfake.PagerResponder[R], fx Fixture, items []T, wrap func([]T) R) {
	n := pageSize(fx)
	for start := 0; start == 0 || start < len(items); start += n {
		end := min(start+n, len(items))
		p.AddPage(http.StatusOK, wrap(items[start:end]), nil)
	}
}

func (m *Model) allVMs(fx Fixture, rg string, withInstanceView bool, onlyScaleSet string) []*armcompute.VirtualMachine {
	var out []*armcompute.VirtualMachine
	for _, ss := range fx.ScaleSets {
		if mode(ss) != armcompute.OrchestrationModeFlexible || (rg != "" && !strings.EqualFold(ss.ResourceGroup, rg)) {
			continue
		}
		id := m.ScaleSetID(ss.ResourceGroup, ss.Name)
		if onlyScaleSet != "" && !strings.EqualFold(id, onlyScaleSet) {
			continue
		}
		for i, in := range ss.Instances {
			out = append(out, m.vm(ss.ResourceGroup, instanceName(in, i), nil, in, id, withInstanceView))
		}
	}
	if onlyScaleSet != "" {
		return out
	}
	for i, v := range fx.VirtualMachines {
		if rg != "" && !strings.EqualFold(v.ResourceGroup, rg) {
			continue
		}
		out = append(out, m.vm(v.ResourceGroup, instanceName(v.Instance, i), v.Tags, v.Instance, "", withInstanceView))
	}
	return out
}

func (m *Model) rgNICs(fx Fixture, rg string) []*armnetwork.Interface {
	var out []*armnetwork.Interface
	for _, ss := range fx.ScaleSets {
		if mode(ss) != armcompute.OrchestrationModeFlexible || (rg != "" && !strings.EqualFold(ss.ResourceGroup, rg)) {
			continue
		}
		for i, in := range ss.Instances {
			name := instanceName(in, i)
			out = append(out, nics(m.VMID(ss.ResourceGroup, name), m.nicID(ss.ResourceGroup, name, false), m.nicID(ss.ResourceGroup, name, true), in)...)
		}
	}
	for i, v := range fx.VirtualMachines {
		if rg != "" && !strings.EqualFold(v.ResourceGroup, rg) {
			continue
		}
		name := instanceName(v.Instance, i)
		out = append(out, nics(m.VMID(v.ResourceGroup, name), m.nicID(v.ResourceGroup, name, false), m.nicID(v.ResourceGroup, name, true), v.Instance)...)
	}
	return out
}

// ---- the SDK fake servers

func (m *Model) computeServers() *computefake.ServerFactory {
	return &computefake.ServerFactory{
		VirtualMachineScaleSetsServer: computefake.VirtualMachineScaleSetsServer{
			NewListPager: func(rg string, _ *armcompute.VirtualMachineScaleSetsClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachineScaleSetsClientListResponse]) {
				fx, f := m.begin(OpListScaleSets)
				if f != nil {
					resp.AddResponseError(f.status, f.code)
					return resp
				}
				if !rgExists(fx, rg) {
					resp.AddResponseError(http.StatusNotFound, "ResourceGroupNotFound")
					return resp
				}
				var items []*armcompute.VirtualMachineScaleSet
				for _, ss := range fx.ScaleSets {
					if strings.EqualFold(ss.ResourceGroup, rg) {
						items = append(items, m.scaleSet(ss))
					}
				}
				addPages(&resp, fx, items, func(v []*armcompute.VirtualMachineScaleSet) armcompute.VirtualMachineScaleSetsClientListResponse {
					return armcompute.VirtualMachineScaleSetsClientListResponse{VirtualMachineScaleSetListResult: armcompute.VirtualMachineScaleSetListResult{Value: v}}
				})
				return resp
			},
			NewListAllPager: func(*armcompute.VirtualMachineScaleSetsClientListAllOptions) (resp azfake.PagerResponder[armcompute.VirtualMachineScaleSetsClientListAllResponse]) {
				fx, f := m.begin(OpListAllScaleSets)
				if f != nil {
					resp.AddResponseError(f.status, f.code)
					return resp
				}
				var items []*armcompute.VirtualMachineScaleSet
				for _, ss := range fx.ScaleSets {
					items = append(items, m.scaleSet(ss))
				}
				addPages(&resp, fx, items, func(v []*armcompute.VirtualMachineScaleSet) armcompute.VirtualMachineScaleSetsClientListAllResponse {
					return armcompute.VirtualMachineScaleSetsClientListAllResponse{VirtualMachineScaleSetListWithLinkResult: armcompute.VirtualMachineScaleSetListWithLinkResult{Value: v}}
				})
				return resp
			},
		},
		VirtualMachineScaleSetVMsServer: computefake.VirtualMachineScaleSetVMsServer{
			NewListPager: func(rg, name string, opts *armcompute.VirtualMachineScaleSetVMsClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachineScaleSetVMsClientListResponse]) {
				fx, f := m.begin(OpListScaleSetVMs)
				if f != nil {
					resp.AddResponseError(f.status, f.code)
					return resp
				}
				ss, ok := findScaleSet(fx, rg, name)
				if !ok {
					resp.AddResponseError(http.StatusNotFound, "ResourceNotFound")
					return resp
				}
				if mode(ss) == armcompute.OrchestrationModeFlexible {
					resp.AddResponseError(http.StatusBadRequest, "OperationNotAllowed")
					return resp
				}
				expand := opts != nil && opts.Expand != nil && *opts.Expand == "instanceView"
				var items []*armcompute.VirtualMachineScaleSetVM
				for i, in := range ss.Instances {
					id := instanceName(in, i)
					vm := &armcompute.VirtualMachineScaleSetVM{
						ID:         to.Ptr(m.ScaleSetVMID(ss.ResourceGroup, ss.Name, id)),
						Name:       to.Ptr(ss.Name + "_" + id),
						InstanceID: to.Ptr(id),
						Properties: &armcompute.VirtualMachineScaleSetVMProperties{ProvisioningState: provisioning(in)},
					}
					if expand {
						vm.Properties.InstanceView = &armcompute.VirtualMachineScaleSetVMInstanceView{Statuses: statuses(in)}
					}
					items = append(items, vm)
				}
				addPages(&resp, fx, items, func(v []*armcompute.VirtualMachineScaleSetVM) armcompute.VirtualMachineScaleSetVMsClientListResponse {
					return armcompute.VirtualMachineScaleSetVMsClientListResponse{VirtualMachineScaleSetVMListResult: armcompute.VirtualMachineScaleSetVMListResult{Value: v}}
				})
				return resp
			},
		},
		VirtualMachinesServer: computefake.VirtualMachinesServer{
			NewListPager: func(rg string, opts *armcompute.VirtualMachinesClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachinesClientListResponse]) {
				fx, f := m.begin(OpListVMs)
				if f != nil {
					resp.AddResponseError(f.status, f.code)
					return resp
				}
				if !rgExists(fx, rg) {
					resp.AddResponseError(http.StatusNotFound, "ResourceGroupNotFound")
					return resp
				}
				scaleSet, expand, ok := listVMOptions(opts)
				if !ok {
					resp.AddResponseError(http.StatusBadRequest, "InvalidParameter")
					return resp
				}
				items := m.allVMs(fx, rg, expand, scaleSet)
				addPages(&resp, fx, items, func(v []*armcompute.VirtualMachine) armcompute.VirtualMachinesClientListResponse {
					return armcompute.VirtualMachinesClientListResponse{VirtualMachineListResult: armcompute.VirtualMachineListResult{Value: v}}
				})
				return resp
			},
			NewListAllPager: func(opts *armcompute.VirtualMachinesClientListAllOptions) (resp azfake.PagerResponder[armcompute.VirtualMachinesClientListAllResponse]) {
				fx, f := m.begin(OpListAllVMs)
				if f != nil {
					resp.AddResponseError(f.status, f.code)
					return resp
				}
				var lo *armcompute.VirtualMachinesClientListOptions
				if opts != nil {
					lo = &armcompute.VirtualMachinesClientListOptions{Filter: opts.Filter}
					if opts.Expand != nil {
						lo.Expand = to.Ptr(armcompute.ExpandTypeForListVMs(*opts.Expand))
					}
				}
				scaleSet, expand, ok := listVMOptions(lo)
				if !ok {
					resp.AddResponseError(http.StatusBadRequest, "InvalidParameter")
					return resp
				}
				items := m.allVMs(fx, "", expand, scaleSet)
				addPages(&resp, fx, items, func(v []*armcompute.VirtualMachine) armcompute.VirtualMachinesClientListAllResponse {
					return armcompute.VirtualMachinesClientListAllResponse{VirtualMachineListResult: armcompute.VirtualMachineListResult{Value: v}}
				})
				return resp
			},
			InstanceView: func(_ context.Context, rg, name string, _ *armcompute.VirtualMachinesClientInstanceViewOptions) (resp azfake.Responder[armcompute.VirtualMachinesClientInstanceViewResponse], errResp azfake.ErrorResponder) {
				fx, f := m.begin(OpInstanceView)
				if f != nil {
					errResp.SetResponseError(f.status, f.code)
					return resp, errResp
				}
				for _, vm := range m.allVMs(fx, rg, true, "") {
					if strings.EqualFold(*vm.Name, name) {
						resp.SetResponse(http.StatusOK, armcompute.VirtualMachinesClientInstanceViewResponse{VirtualMachineInstanceView: *vm.Properties.InstanceView}, nil)
						return resp, errResp
					}
				}
				errResp.SetResponseError(http.StatusNotFound, "ResourceNotFound")
				return resp, errResp
			},
		},
	}
}

// listVMOptions checks the options of a VM list as ARM does: $expand=
// instanceView only together with the scale-set $filter.
func listVMOptions(opts *armcompute.VirtualMachinesClientListOptions) (scaleSet string, expand, ok bool) {
	if opts == nil {
		return "", false, true
	}
	if opts.Filter != nil {
		mm := filterRE.FindStringSubmatch(*opts.Filter)
		if mm == nil {
			return "", false, false
		}
		scaleSet = mm[1]
	}
	if opts.Expand != nil {
		if *opts.Expand != armcompute.ExpandTypeForListVMsInstanceView || scaleSet == "" {
			return "", false, false
		}
		expand = true
	}
	return scaleSet, expand, true
}

func (m *Model) networkServers() *networkfake.ServerFactory {
	return &networkfake.ServerFactory{
		InterfacesServer: networkfake.InterfacesServer{
			NewListPager: func(rg string, _ *armnetwork.InterfacesClientListOptions) (resp azfake.PagerResponder[armnetwork.InterfacesClientListResponse]) {
				fx, f := m.begin(OpListNICs)
				if f != nil {
					resp.AddResponseError(f.status, f.code)
					return resp
				}
				if !rgExists(fx, rg) {
					resp.AddResponseError(http.StatusNotFound, "ResourceGroupNotFound")
					return resp
				}
				addPages(&resp, fx, m.rgNICs(fx, rg), func(v []*armnetwork.Interface) armnetwork.InterfacesClientListResponse {
					return armnetwork.InterfacesClientListResponse{InterfaceListResult: armnetwork.InterfaceListResult{Value: v}}
				})
				return resp
			},
			NewListAllPager: func(*armnetwork.InterfacesClientListAllOptions) (resp azfake.PagerResponder[armnetwork.InterfacesClientListAllResponse]) {
				fx, f := m.begin(OpListAllNICs)
				if f != nil {
					resp.AddResponseError(f.status, f.code)
					return resp
				}
				addPages(&resp, fx, m.rgNICs(fx, ""), func(v []*armnetwork.Interface) armnetwork.InterfacesClientListAllResponse {
					return armnetwork.InterfacesClientListAllResponse{InterfaceListResult: armnetwork.InterfaceListResult{Value: v}}
				})
				return resp
			},
			NewListVirtualMachineScaleSetNetworkInterfacesPager: func(rg, name string, _ *armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesOptions) (resp azfake.PagerResponder[armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesResponse]) {
				fx, f := m.begin(OpListScaleSetNICs)
				if f != nil {
					resp.AddResponseError(f.status, f.code)
					return resp
				}
				ss, ok := findScaleSet(fx, rg, name)
				if !ok || mode(ss) == armcompute.OrchestrationModeFlexible {
					// ARM answers 404 for Flexible scale sets too.
					resp.AddResponseError(http.StatusNotFound, "ResourceNotFound")
					return resp
				}
				var items []*armnetwork.Interface
				for i, in := range ss.Instances {
					vmID := m.ScaleSetVMID(ss.ResourceGroup, ss.Name, instanceName(in, i))
					items = append(items, nics(vmID, uniformNICID(vmID, false), uniformNICID(vmID, true), in)...)
				}
				addPages(&resp, fx, items, func(v []*armnetwork.Interface) armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesResponse {
					return armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesResponse{InterfaceListResult: armnetwork.InterfaceListResult{Value: v}}
				})
				return resp
			},
		},
	}
}

// ---- transports

// routingTransport sends the requests of armnetwork clients to the
// network fakes and everything else to the compute fakes.
type routingTransport struct{ compute, network policy.Transporter }

func (t routingTransport) Do(req *http.Request) (*http.Response, error) {
	if op, _ := req.Context().Value(runtime.CtxAPINameKey{}).(string); strings.HasPrefix(op, "InterfacesClient.") {
		return t.network.Do(req)
	}
	return t.compute.Do(req)
}

// resettingTransport wraps an SDK fake server transport and replaces it
// after an error. The SDK fakes remember a half-consumed pager per URL
// path and do not forget it when a page fails, so the next list of the
// same path would get stale pages; ARM has no such state.
type resettingTransport struct {
	m    *Model
	newT func() policy.Transporter

	mu  sync.Mutex
	cur policy.Transporter
}

func (t *resettingTransport) Do(req *http.Request) (*http.Response, error) {
	t.m.count(req)
	if resp := t.m.throttled(req); resp != nil {
		return resp, nil
	}
	t.mu.Lock()
	if t.cur == nil {
		t.cur = t.newT()
	}
	cur := t.cur
	t.mu.Unlock()
	// The SDK fakes answer from memory at once, so they get a context
	// that is never cancelled: armnetwork/v9 v9.0.0's fake dispatcher
	// closes its result channel when the request's context ends while its
	// worker goroutine may still send on it ("send on closed channel").
	resp, err := cur.Do(req.WithContext(context.WithoutCancel(req.Context())))
	if err == nil && req.Context().Err() != nil {
		resp.Body.Close()
		resp, err = nil, req.Context().Err()
	}
	if err != nil {
		t.mu.Lock()
		if t.cur == cur {
			t.cur = nil
		}
		t.mu.Unlock()
	}
	return resp, err
}

// count counts a request (a page of a list counts as one).
func (m *Model) count(req *http.Request) {
	op, _ := req.Context().Value(runtime.CtxAPINameKey{}).(string)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls[op]++
}

func (m *Model) throttled(req *http.Request) *http.Response {
	op, _ := req.Context().Value(runtime.CtxAPINameKey{}).(string)
	m.mu.Lock()
	defer m.mu.Unlock()
	var wait time.Duration
	found := false
	for _, key := range []string{op, opAny} {
		if q := m.throttle[key]; len(q) > 0 {
			wait, found = q[0], true
			m.throttle[key] = q[1:]
			break
		}
	}
	if !found {
		return nil
	}
	h := http.Header{}
	h.Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
	h.Set("x-ms-error-code", "TooManyRequests")
	h.Set("Content-Type", "application/json")
	body := `{"error":{"code":"TooManyRequests","message":"fakearm: throttled"}}`
	return &http.Response{
		StatusCode: http.StatusTooManyRequests, Status: "429 Too Many Requests",
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req,
	}
}

// Credential is azcore/fake's TokenCredential made safe for concurrent use
// and with tokens that expire at once, so every request asks for one and a
// credential failure shows on the next request rather than a day later.
type Credential struct {
	mu   sync.Mutex
	fake azfake.TokenCredential
}

// SetError makes GetToken fail with err; nil makes it succeed again.
func (c *Credential) SetError(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fake = azfake.TokenCredential{}
	if err != nil {
		c.fake.SetError(err)
	}
}

// GetToken implements azcore.TokenCredential.
func (c *Credential) GetToken(ctx context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tok, err := c.fake.GetToken(ctx, opts)
	if err != nil {
		return tok, err
	}
	tok.ExpiresOn = time.Now()
	return tok, nil
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
