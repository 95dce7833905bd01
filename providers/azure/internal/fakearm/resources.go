package fakearm

// The store, as ARM shows it: resource IDs, and the fixture's scale sets,
// VMs and NICs converted to the SDK's types, paged as ARM pages them.

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9"
)

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
