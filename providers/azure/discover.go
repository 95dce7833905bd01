package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9"

	"github.com/osm-vm/osm-vm/provider"
)

// labelResourceID is the endpoint label holding the Azure resource ID of
// the VM (or scale-set instance) the endpoint is on.
const labelResourceID = "azure-resource-id"

// discovery is one complete read of the subscription.
type discovery struct {
	services map[provider.Service][]provider.Endpoint
	// problems are resources with tags that cannot be used, one message
	// each; they are left out and reported in the provider's health.
	problems []string
}

// discoverer reads scale sets, VMs and NICs for one poll. It is used once.
type discoverer struct {
	log *slog.Logger
	cfg config
	c   *armClients

	// nicsByRG caches each resource group's NICs for this poll, keyed by
	// lower-case NIC ID.
	nicsByRG map[string]map[string]*armnetwork.Interface
	out      discovery
}

// discover reads what the subscription says now. An error means the read
// is incomplete and must not replace the last good state; a resource that
// disappears while it is read (404) is simply left out.
func discover(ctx context.Context, log *slog.Logger, cfg config, c *armClients) (discovery, error) {
	d := &discoverer{
		log:      log,
		cfg:      cfg,
		c:        c,
		nicsByRG: map[string]map[string]*armnetwork.Interface{},
		out:      discovery{services: map[provider.Service][]provider.Endpoint{}},
	}
	if err := d.run(ctx); err != nil {
		return discovery{}, err
	}
	for svc, eps := range d.out.services {
		d.out.services[svc] = sortEndpoints(eps)
	}
	slices.Sort(d.out.problems)
	return d.out, nil
}

func (d *discoverer) run(ctx context.Context) error {
	scaleSets, err := d.listScaleSets(ctx)
	if err != nil {
		return err
	}
	// Flexible members of a tagged scale set belong to it, not to their
	// own tags.
	claimed := map[string]bool{}
	for _, ss := range scaleSets {
		if _, ok := tag(ss.Tags, d.cfg.ServiceTag); !ok {
			continue
		}
		claimed[strings.ToLower(*ss.ID)] = true
		svc, port, err := d.target(ss.Tags)
		if err != nil {
			d.problem("scale set %s: %v", *ss.ID, err)
			continue
		}
		id, err := arm.ParseResourceID(*ss.ID)
		if err != nil {
			return fmt.Errorf("ARM returned scale set ID %q: %w", *ss.ID, err)
		}
		if ss.Properties != nil && ss.Properties.OrchestrationMode != nil && *ss.Properties.OrchestrationMode == armcompute.OrchestrationModeFlexible {
			err = d.flexible(ctx, id, svc, port)
		} else {
			err = d.uniform(ctx, id, svc, port)
		}
		if err != nil {
			return err
		}
	}

	vms, err := d.listVMs(ctx)
	if err != nil {
		return err
	}
	for _, vm := range vms {
		if _, ok := tag(vm.Tags, d.cfg.ServiceTag); !ok {
			continue
		}
		if vm.Properties != nil && vm.Properties.VirtualMachineScaleSet != nil && vm.Properties.VirtualMachineScaleSet.ID != nil &&
			claimed[strings.ToLower(*vm.Properties.VirtualMachineScaleSet.ID)] {
			continue
		}
		svc, port, err := d.target(vm.Tags)
		if err != nil {
			d.problem("virtual machine %s: %v", *vm.ID, err)
			continue
		}
		if err := d.standalone(ctx, vm, svc, port); err != nil {
			return err
		}
	}
	return nil
}

func (d *discoverer) problem(format string, args ...any) {
	d.out.problems = append(d.out.problems, fmt.Sprintf(format, args...))
}

func (d *discoverer) add(svc provider.Service, ip netip.Addr, port uint16, resourceID string) {
	d.out.services[svc] = append(d.out.services[svc], provider.Endpoint{
		IP: ip, Port: port, Labels: map[string]string{labelResourceID: resourceID},
	})
}

// listScaleSets pages through the scale sets of every configured resource
// group, or of the subscription.
func (d *discoverer) listScaleSets(ctx context.Context) ([]*armcompute.VirtualMachineScaleSet, error) {
	if len(d.cfg.ResourceGroups) == 0 {
		return allPages(ctx, d.c.scaleSets.NewListAllPager(nil),
			func(p armcompute.VirtualMachineScaleSetsClientListAllResponse) []*armcompute.VirtualMachineScaleSet {
				return p.Value
			},
			"list the virtual machine scale sets of subscription %s", d.cfg.SubscriptionID)
	}
	var out []*armcompute.VirtualMachineScaleSet
	for _, rg := range d.cfg.ResourceGroups {
		sets, err := allPages(ctx, d.c.scaleSets.NewListPager(rg, nil),
			func(p armcompute.VirtualMachineScaleSetsClientListResponse) []*armcompute.VirtualMachineScaleSet {
				return p.Value
			},
			"list the virtual machine scale sets of resource group %s", rg)
		if err != nil {
			return nil, err
		}
		out = append(out, sets...)
	}
	return out, nil
}

// listVMs pages through the VMs of every configured resource group, or of
// the subscription. These lists carry no instance view.
func (d *discoverer) listVMs(ctx context.Context) ([]*armcompute.VirtualMachine, error) {
	if len(d.cfg.ResourceGroups) == 0 {
		return allPages(ctx, d.c.vms.NewListAllPager(nil),
			func(p armcompute.VirtualMachinesClientListAllResponse) []*armcompute.VirtualMachine { return p.Value },
			"list the virtual machines of subscription %s", d.cfg.SubscriptionID)
	}
	var out []*armcompute.VirtualMachine
	for _, rg := range d.cfg.ResourceGroups {
		vms, err := allPages(ctx, d.c.vms.NewListPager(rg, nil),
			func(p armcompute.VirtualMachinesClientListResponse) []*armcompute.VirtualMachine { return p.Value },
			"list the virtual machines of resource group %s", rg)
		if err != nil {
			return nil, err
		}
		out = append(out, vms...)
	}
	return out, nil
}

// allPages returns the values (value's) of every page of pager; an error
// names the listing as format and args do.
func allPages[P, V any](ctx context.Context, pager *runtime.Pager[P], value func(P) []V, format string, args ...any) ([]V, error) {
	var out []V
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, opError(err, format, args...)
		}
		out = append(out, value(page)...)
	}
	return out, nil
}

// uniform adds the running instances of a Uniform scale set: its
// instances with their instance views, then its NICs (the scale-set NIC
// listing, which only Uniform scale sets have).
func (d *discoverer) uniform(ctx context.Context, ss *arm.ResourceID, svc provider.Service, port uint16) error {
	running := map[string]string{} // lower-case instance ID -> ID as ARM spells it
	pager := d.c.scaleSetVMs.NewListPager(ss.ResourceGroupName, ss.Name, &armcompute.VirtualMachineScaleSetVMsClientListOptions{Expand: to.Ptr("instanceView")})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if isNotFound(err) {
			d.log.Debug("scale set disappeared while being read", "scaleSet", ss.String())
			return nil
		}
		if err != nil {
			return opError(err, "list the instances of scale set %s", ss)
		}
		for _, vm := range page.Value {
			if vm.ID == nil || vm.Properties == nil {
				continue
			}
			var statuses []*armcompute.InstanceViewStatus
			if vm.Properties.InstanceView != nil {
				statuses = vm.Properties.InstanceView.Statuses
			}
			if ok, why := serving(statuses, vm.Properties.ProvisioningState); !ok {
				d.log.Debug("instance left out", "resource", *vm.ID, "reason", why)
				continue
			}
			running[strings.ToLower(*vm.ID)] = *vm.ID
		}
	}
	if len(running) == 0 {
		d.ensureService(svc)
		return nil
	}
	byVM := map[string][]*armnetwork.Interface{}
	nicPager := d.c.nics.NewListVirtualMachineScaleSetNetworkInterfacesPager(ss.ResourceGroupName, ss.Name, nil)
	for nicPager.More() {
		page, err := nicPager.NextPage(ctx)
		if isNotFound(err) {
			d.log.Debug("scale set disappeared while being read", "scaleSet", ss.String())
			return nil
		}
		if err != nil {
			return opError(err, "list the network interfaces of scale set %s", ss)
		}
		for _, nic := range page.Value {
			if nic.Properties == nil || nic.Properties.VirtualMachine == nil || nic.Properties.VirtualMachine.ID == nil {
				continue
			}
			vmID := strings.ToLower(*nic.Properties.VirtualMachine.ID)
			byVM[vmID] = append(byVM[vmID], nic)
		}
	}
	d.ensureService(svc)
	for key, vmID := range running {
		ip, ok := primaryIP(primaryNIC(byVM[key]))
		if !ok {
			d.log.Debug("instance has no primary private IP yet", "resource", vmID)
			continue
		}
		d.add(svc, ip, port, vmID)
	}
	return nil
}

// flexible adds the running VMs of a Flexible scale set: a VM list
// filtered by the scale set (with instance views, which ARM returns only
// for a filtered list), then each VM's primary NIC.
func (d *discoverer) flexible(ctx context.Context, ss *arm.ResourceID, svc provider.Service, port uint16) error {
	var members []*armcompute.VirtualMachine
	filter := fmt.Sprintf("'virtualMachineScaleSet/id' eq '%s'", ss.String())
	pager := d.c.vms.NewListPager(ss.ResourceGroupName, &armcompute.VirtualMachinesClientListOptions{
		Filter: to.Ptr(filter),
		Expand: to.Ptr(armcompute.ExpandTypeForListVMsInstanceView),
	})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if isNotFound(err) {
			d.log.Debug("scale set disappeared while being read", "scaleSet", ss.String())
			return nil
		}
		if err != nil {
			return opError(err, "list the virtual machines of scale set %s", ss)
		}
		for _, vm := range page.Value {
			if vm.ID == nil || vm.Properties == nil {
				continue
			}
			var statuses []*armcompute.InstanceViewStatus
			if vm.Properties.InstanceView != nil {
				statuses = vm.Properties.InstanceView.Statuses
			}
			if ok, why := serving(statuses, vm.Properties.ProvisioningState); !ok {
				d.log.Debug("instance left out", "resource", *vm.ID, "reason", why)
				continue
			}
			members = append(members, vm)
		}
	}
	d.ensureService(svc)
	for _, vm := range members {
		if err := d.addVM(ctx, vm, svc, port); err != nil {
			return err
		}
	}
	return nil
}

// standalone adds a tagged VM that is not in a tagged scale set, if it
// runs (its instance view, which a plain VM list does not carry).
func (d *discoverer) standalone(ctx context.Context, vm *armcompute.VirtualMachine, svc provider.Service, port uint16) error {
	id, err := arm.ParseResourceID(*vm.ID)
	if err != nil {
		return fmt.Errorf("ARM returned virtual machine ID %q: %w", *vm.ID, err)
	}
	d.ensureService(svc)
	iv, err := d.c.vms.InstanceView(ctx, id.ResourceGroupName, id.Name, nil)
	if isNotFound(err) {
		d.log.Debug("virtual machine disappeared while being read", "resource", *vm.ID)
		return nil
	}
	if err != nil {
		return opError(err, "read the instance view of virtual machine %s", *vm.ID)
	}
	var prov *string
	if vm.Properties != nil {
		prov = vm.Properties.ProvisioningState
	}
	if ok, why := serving(iv.Statuses, prov); !ok {
		d.log.Debug("virtual machine left out", "resource", *vm.ID, "reason", why)
		return nil
	}
	return d.addVM(ctx, vm, svc, port)
}

// addVM adds a VM's primary private IP, found through its primary NIC.
func (d *discoverer) addVM(ctx context.Context, vm *armcompute.VirtualMachine, svc provider.Service, port uint16) error {
	if vm.Properties.NetworkProfile == nil {
		return nil
	}
	ref := primaryNICRef(vm.Properties.NetworkProfile.NetworkInterfaces)
	if ref == nil {
		d.log.Debug("virtual machine has no network interface yet", "resource", *vm.ID)
		return nil
	}
	nic, err := d.nic(ctx, *ref.ID)
	if err != nil {
		return err
	}
	ip, ok := primaryIP(nic)
	if !ok {
		d.log.Debug("virtual machine has no primary private IP yet", "resource", *vm.ID)
		return nil
	}
	d.add(svc, ip, port, *vm.ID)
	return nil
}

// nic finds a NIC by ID through a listing of its resource group, read at
// most once per poll: one paged list instead of a GET per VM.
func (d *discoverer) nic(ctx context.Context, nicID string) (*armnetwork.Interface, error) {
	id, err := arm.ParseResourceID(nicID)
	if err != nil {
		return nil, fmt.Errorf("ARM returned network interface ID %q: %w", nicID, err)
	}
	rg := strings.ToLower(id.ResourceGroupName)
	nics, ok := d.nicsByRG[rg]
	if !ok {
		nics = map[string]*armnetwork.Interface{}
		pager := d.c.nics.NewListPager(id.ResourceGroupName, nil)
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil && !isNotFound(err) {
				return nil, opError(err, "list the network interfaces of resource group %s", id.ResourceGroupName)
			}
			if err != nil {
				break
			}
			for _, n := range page.Value {
				if n.ID != nil {
					nics[strings.ToLower(*n.ID)] = n
				}
			}
		}
		d.nicsByRG[rg] = nics
	}
	return nics[strings.ToLower(nicID)], nil
}

// ensureService records that a tagged resource names svc, so the service
// is known even while none of its instances runs.
func (d *discoverer) ensureService(svc provider.Service) {
	if _, ok := d.out.services[svc]; !ok {
		d.out.services[svc] = []provider.Endpoint{}
	}
}

// target reads the mesh service and port from a resource's tags.
func (d *discoverer) target(tags map[string]*string) (provider.Service, uint16, error) {
	v, _ := tag(tags, d.cfg.ServiceTag)
	name, ns, ok := strings.Cut(v, ".")
	if !ok {
		return provider.Service{}, 0, fmt.Errorf("tag %s %q is not <name>.<namespace>; set it to, for example, \"bookstore.default\"", d.cfg.ServiceTag, v)
	}
	svc := provider.Service{Namespace: ns, Name: name}
	if err := svc.Validate(); err != nil {
		return provider.Service{}, 0, fmt.Errorf("tag %s %q: %w; set it to <name>.<namespace>, for example \"bookstore.default\"", d.cfg.ServiceTag, v, err)
	}
	p, ok := tag(tags, d.cfg.PortTag)
	if !ok {
		return provider.Service{}, 0, fmt.Errorf("tag %s is missing; set it to the port %s listens on (1-65535)", d.cfg.PortTag, svc)
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil || port == 0 {
		return provider.Service{}, 0, fmt.Errorf("tag %s %q is not a port; set it to the port %s listens on (1-65535)", d.cfg.PortTag, p, svc)
	}
	return svc, uint16(port), nil
}

// tag looks a tag up; Azure tag names are case-insensitive.
func tag(tags map[string]*string, name string) (string, bool) {
	for k, v := range tags {
		if strings.EqualFold(k, name) && v != nil {
			return strings.TrimSpace(*v), true
		}
	}
	return "", false
}

// serving says whether an instance should receive traffic: its power
// state is running and its provisioning neither failed nor is deleting.
// Deallocated, stopped, starting and unknown power states are left out.
func serving(statuses []*armcompute.InstanceViewStatus, provisioningState *string) (bool, string) {
	if provisioningState != nil {
		switch strings.ToLower(*provisioningState) {
		case "failed", "deleting":
			return false, "provisioning state " + *provisioningState
		}
	}
	power := ""
	for _, s := range statuses {
		if s == nil || s.Code == nil {
			continue
		}
		code := strings.ToLower(*s.Code)
		switch {
		case strings.HasPrefix(code, "powerstate/"):
			power = strings.TrimPrefix(code, "powerstate/")
		case strings.HasPrefix(code, "provisioningstate/failed"), strings.HasPrefix(code, "provisioningstate/deleting"):
			return false, *s.Code
		}
	}
	if power != "running" {
		if power == "" {
			return false, "no power state in the instance view"
		}
		return false, "power state " + power
	}
	return true, ""
}

// primaryNICRef picks the primary NIC of a VM's network profile (the only
// one when there is one).
func primaryNICRef(refs []*armcompute.NetworkInterfaceReference) *armcompute.NetworkInterfaceReference {
	var valid []*armcompute.NetworkInterfaceReference
	for _, r := range refs {
		if r == nil || r.ID == nil {
			continue
		}
		if r.Properties != nil && r.Properties.Primary != nil && *r.Properties.Primary {
			return r
		}
		valid = append(valid, r)
	}
	if len(valid) == 1 {
		return valid[0]
	}
	return nil
}

// primaryNIC picks the primary NIC of a VM's NICs (the only one when
// there is one).
func primaryNIC(nics []*armnetwork.Interface) *armnetwork.Interface {
	for _, n := range nics {
		if n.Properties != nil && n.Properties.Primary != nil && *n.Properties.Primary {
			return n
		}
	}
	if len(nics) == 1 {
		return nics[0]
	}
	return nil
}

// primaryIP returns the private IP of a NIC's primary IP configuration
// (the only one when there is one).
func primaryIP(nic *armnetwork.Interface) (netip.Addr, bool) {
	if nic == nil || nic.Properties == nil {
		return netip.Addr{}, false
	}
	confs := nic.Properties.IPConfigurations
	var pick *armnetwork.InterfaceIPConfiguration
	for _, c := range confs {
		if c != nil && c.Properties != nil && c.Properties.Primary != nil && *c.Properties.Primary {
			pick = c
			break
		}
	}
	if pick == nil && len(confs) == 1 {
		pick = confs[0]
	}
	if pick == nil || pick.Properties == nil || pick.Properties.PrivateIPAddress == nil {
		return netip.Addr{}, false
	}
	ip, err := netip.ParseAddr(*pick.Properties.PrivateIPAddress)
	if err != nil {
		return netip.Addr{}, false
	}
	return ip, true
}

// sortEndpoints orders endpoints by address and drops duplicate
// addresses (the first, by resource ID, wins).
func sortEndpoints(eps []provider.Endpoint) []provider.Endpoint {
	slices.SortFunc(eps, func(a, b provider.Endpoint) int {
		return cmp.Or(a.IP.Compare(b.IP), cmp.Compare(a.Port, b.Port), strings.Compare(a.Labels[labelResourceID], b.Labels[labelResourceID]))
	})
	return slices.CompactFunc(eps, func(a, b provider.Endpoint) bool { return a.IP == b.IP && a.Port == b.Port })
}
