package fakearm

// The ARM operations: the handlers of the SDK's compute and network fake
// servers, each answering from a snapshot of the fixture.

import (
	"context"
	"net/http"
	"regexp"
	"strings"

	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	computefake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9"
	networkfake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9/fake"
)

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

func (m *Model) computeServers() *computefake.ServerFactory {
	return &computefake.ServerFactory{
		VirtualMachineScaleSetsServer: computefake.VirtualMachineScaleSetsServer{
			NewListPager: func(rg string, _ *armcompute.VirtualMachineScaleSetsClientListOptions) (resp azfake.PagerResponder[armcompute.VirtualMachineScaleSetsClientListResponse]) {
				fx, ok := beginList(m, &resp, OpListScaleSets, rg)
				if !ok {
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
				fx, ok := beginList(m, &resp, OpListAllScaleSets)
				if !ok {
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
				fx, ok := beginList(m, &resp, OpListScaleSetVMs)
				if !ok {
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
				fx, ok := beginList(m, &resp, OpListVMs, rg)
				if !ok {
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
				fx, ok := beginList(m, &resp, OpListAllVMs)
				if !ok {
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
				fx, ok := beginList(m, &resp, OpListNICs, rg)
				if !ok {
					return resp
				}
				addPages(&resp, fx, m.rgNICs(fx, rg), func(v []*armnetwork.Interface) armnetwork.InterfacesClientListResponse {
					return armnetwork.InterfacesClientListResponse{InterfaceListResult: armnetwork.InterfaceListResult{Value: v}}
				})
				return resp
			},
			NewListAllPager: func(*armnetwork.InterfacesClientListAllOptions) (resp azfake.PagerResponder[armnetwork.InterfacesClientListAllResponse]) {
				fx, ok := beginList(m, &resp, OpListAllNICs)
				if !ok {
					return resp
				}
				addPages(&resp, fx, m.rgNICs(fx, ""), func(v []*armnetwork.Interface) armnetwork.InterfacesClientListAllResponse {
					return armnetwork.InterfacesClientListAllResponse{InterfaceListResult: armnetwork.InterfaceListResult{Value: v}}
				})
				return resp
			},
			NewListVirtualMachineScaleSetNetworkInterfacesPager: func(rg, name string, _ *armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesOptions) (resp azfake.PagerResponder[armnetwork.InterfacesClientListVirtualMachineScaleSetNetworkInterfacesResponse]) {
				fx, ok := beginList(m, &resp, OpListScaleSetNICs)
				if !ok {
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
