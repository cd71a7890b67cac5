package main

// The variant --refuse-devices-held-by-other-claims: prepare refuses a claim one of
// whose devices another claim still holds on this node, as some GPU drivers do on purpose, and the kubelet retries
// the prepare until it has unprepared the other claim. The scheduler may allocate a device again as soon as the
// claim that had it is deallocated, before the kubelet of the node has unprepared that claim.
//
// What "holds" means: a claim holds a device of this driver (pool and device of a prepared claim's record, or of a
// claim being prepared right now) from the start of its prepare until it is unprepared, exclusively unless
//   - it was allocated the device for administrative access (adminAccess: such claims are prepared beside the
//     workload that holds the device, and hold it for no one else), or
//   - it holds a share of the device (consumable capacity): shares with distinct share IDs are distinct
//     allocations of one device, so only the same share of the same device is held.
// Partitions are devices of their own: the scheduler keeps overlapping ones apart through their counters.

import (
	"fmt"
	"sort"
)

// heldDevice is what a claim holds exclusively: one device of this driver's pools, or one share of it.
type heldDevice struct{ pool, device, share string }

func (h heldDevice) String() string {
	if h.share != "" {
		return fmt.Sprintf("%s/%s (share %s)", h.pool, h.device, h.share)
	}
	return h.pool + "/" + h.device
}

// exclusive is what the devices of a claim hold exclusively: every one not prepared for admin access.
func exclusive(devices []PreparedDevice) []heldDevice {
	var held []heldDevice
	for _, device := range devices {
		if !device.AdminAccess {
			held = append(held, heldDevice{pool: device.PoolName, device: device.DeviceName, share: device.ShareID})
		}
	}
	return held
}

// holder is a claim that holds a device, for the refusal's message.
type holder struct{ namespace, name, uid string }

// reserveHeld checks, for a claim about to be prepared with `devices`, that no other claim holds one of them on
// this node; if none does, the claim holds them from now on (release ends it once the claim's record is written or
// its prepare failed). The refusal names the device and the claim that holds it.
func (d *DriverCore) reserveHeld(ref ClaimRef, devices []PreparedDevice) string {
	wanted := exclusive(devices)
	if len(wanted) == 0 {
		return ""
	}
	d.holdMu.Lock()
	defer d.holdMu.Unlock()
	records, err := d.prepared.All()
	if err != nil {
		return "read prepared claims: " + err.Error()
	}
	holders := map[heldDevice][]holder{}
	for uid, record := range records {
		if uid == ref.UID {
			continue
		}
		for _, device := range exclusive(record.Devices) {
			holders[device] = append(holders[device], holder{record.Namespace, record.Name, uid})
		}
	}
	for uid, being := range d.preparing {
		if uid == ref.UID {
			continue
		}
		for _, device := range being.devices {
			holders[device] = append(holders[device], holder{being.ref.Namespace, being.ref.Name, uid})
		}
	}
	for _, device := range wanted {
		if found := holders[device]; len(found) > 0 {
			sort.Slice(found, func(i, j int) bool { return found[i].uid < found[j].uid })
			first := found[0]
			return fmt.Sprintf(
				"device %s/%s is still prepared for claim %s/%s (uid %s) on node %s; retry once that claim is unprepared",
				d.config.DriverName, device, first.namespace, first.name, first.uid, d.config.NodeName,
			)
		}
	}
	d.preparing[ref.UID] = preparing{ref: ref, devices: wanted}
	return ""
}

// releaseHeld ends the hold of a claim's prepare in progress: its record (if it was prepared) holds from now on.
func (d *DriverCore) releaseHeld(uid string) {
	d.holdMu.Lock()
	defer d.holdMu.Unlock()
	delete(d.preparing, uid)
}

// preparing is a claim being prepared and the devices it holds meanwhile.
type preparing struct {
	ref     ClaimRef
	devices []heldDevice
}
