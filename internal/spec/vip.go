package spec

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// allocateVIPs gives every service in st, and every external host an
// Egress names (keyed by egressVIPKey), a virtual IP from prefix, keeping
// the ones already allocated inside it, and drops allocations of services
// and hosts that no longer exist. It returns the services whose VIP moved because it
// fell outside prefix (a range change).
func allocateVIPs(st *state, prefix netip.Prefix) (moved []mesh.MeshService, err error) {
	var holders []mesh.MeshService
	for _, k := range sortedObjectKeys(st.objects) {
		if k.Kind == KindService {
			holders = append(holders, mesh.MeshService{Namespace: k.Namespace, Name: k.Name})
		}
	}
	for _, h := range egressHosts(st) {
		holders = append(holders, egressVIPKey(h))
	}
	wanted := make(map[mesh.MeshService]bool, len(holders))
	for _, h := range holders {
		wanted[h] = true
	}
	used := map[netip.Addr]mesh.MeshService{}
	for svc, ip := range st.vips {
		if !wanted[svc] {
			delete(st.vips, svc)
			continue
		}
		if !prefix.Contains(ip) {
			delete(st.vips, svc)
			moved = append(moved, svc)
			continue
		}
		used[ip] = svc
	}
	return moved, assignVIPs(st, prefix, holders, used)
}

// allocateVIPsOf is allocateVIPs after a change that touched only the
// documents keys name, neither the vipRange nor an Egress: the Services
// among them that are new get a VIP, those deleted lose theirs, and the
// rest keep what they have.
func allocateVIPsOf(st *state, prefix netip.Prefix, keys []Key) error {
	var holders []mesh.MeshService
	for _, k := range keys {
		if k.Kind != KindService {
			continue
		}
		svc := mesh.MeshService{Namespace: k.Namespace, Name: k.Name}
		_, exists := st.objects[k]
		_, has := st.vips[svc]
		switch {
		case !exists:
			delete(st.vips, svc)
		case !has:
			holders = append(holders, svc)
		}
	}
	if len(holders) == 0 {
		return nil
	}
	slices.SortFunc(holders, mesh.MeshService.Compare)
	used := make(map[netip.Addr]mesh.MeshService, len(st.vips))
	for svc, ip := range st.vips {
		used[ip] = svc
	}
	return assignVIPs(st, prefix, holders, used)
}

// assignVIPs gives each of holders without one a VIP from prefix that is
// not in used, starting at the one its name hashes to.
func assignVIPs(st *state, prefix netip.Prefix, holders []mesh.MeshService, used map[netip.Addr]mesh.MeshService) error {
	base := binary.BigEndian.Uint32(prefix.Addr().AsSlice())
	size := uint64(1) << (32 - prefix.Bits())
	usable := size - 2 // network and broadcast addresses are never handed out
	for _, svc := range holders {
		if _, ok := st.vips[svc]; ok {
			continue
		}
		if uint64(len(used)) >= usable {
			return fmt.Errorf("%w: outbound vipRange %s has no free address for %s (%d in use): widen spec.outbound.vipRange in MeshConfig", ErrConflict, prefix, holderKind(svc)+vipHolderName(svc), len(used))
		}
		h := fnv.New32a()
		h.Write([]byte(svc.String()))
		off := uint64(h.Sum32()) % usable
		for {
			var b [4]byte
			binary.BigEndian.PutUint32(b[:], base+uint32(1+off))
			ip := netip.AddrFrom4(b)
			if _, taken := used[ip]; !taken {
				st.vips[svc] = ip
				used[ip] = svc
				break
			}
			off = (off + 1) % usable
		}
	}
	return nil
}

func serviceKey(svc mesh.MeshService) Key {
	return Key{Kind: KindService, Namespace: svc.Namespace, Name: svc.Name}
}

// holderKind is "service " for a Service's VIP, "" for an external host's
// (whose vipHolderName says so).
func holderKind(k mesh.MeshService) string {
	if k.Namespace == egressVIPNamespace {
		return ""
	}
	return "service "
}
