"""The variant --refuse-devices-held-by-other-claims: no claim is prepared on a device another claim still holds.

Some GPU drivers refuse on purpose to prepare a device that another claim is still prepared for on the node, and the
kubelet retries the prepare until it has unprepared that claim. The scheduler may allocate a device again as soon as
the claim that had it is deallocated, before the kubelet of the node has unprepared that claim.

What "holds" means: a claim holds a device of this driver (pool and device of a prepared claim's record, or of a claim
being prepared right now) from the start of its prepare until it is unprepared, exclusively unless

- it was allocated the device for administrative access (`adminAccess`: such claims are prepared beside the workload
  that holds the device, and hold it for no one else), or
- it holds a share of the device (consumable capacity): shares with distinct share IDs are distinct allocations of one
  device, so only the same share of the same device is held.

Partitions are devices of their own: the scheduler keeps overlapping ones apart through their counters. The Go build
has the same rules (../fake-dra-go/held.go).
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

from fake_dra.state import PreparedClaims


class HeldDevice(NamedTuple):
    """What a claim holds exclusively: one device of this driver's pools, or one share of it ("" for none)."""

    pool: str
    device: str
    share: str

    def __str__(self) -> str:
        where = f"{self.pool}/{self.device}"
        return f"{where} (share {self.share})" if self.share else where


class Holder(NamedTuple):
    """A claim that holds a device, for the refusal's message."""

    namespace: str
    name: str
    uid: str


def exclusive(devices: list[dict[str, Any]]) -> list[HeldDevice]:
    """What the prepared devices of a claim (records' shape) hold exclusively: each one not for admin access."""
    return [
        HeldDevice(d["poolName"], d["deviceName"], str(d.get("shareID") or ""))
        for d in devices
        if not d.get("adminAccess")
    ]


class Holds:
    """The claims being prepared and the devices they hold meanwhile; with the prepared claims, what the node holds."""

    def __init__(self, prepared: PreparedClaims, driver: str, node: str) -> None:
        """Look at `prepared` (the records of prepared claims) of `driver` on `node`."""
        self.prepared = prepared
        self.driver = driver
        self.node = node
        self._lock = threading.Lock()
        self._preparing: dict[str, tuple[Holder, list[HeldDevice]]] = {}

    def reserve(self, claim: Holder, devices: list[dict[str, Any]]) -> str:
        """Hold `devices` (records' shape) for `claim` about to be prepared, or why not: another claim holds one.

        Held until `release`, which comes once the claim's record is written (it holds from then on) or its prepare
        failed.
        """
        wanted = exclusive(devices)
        if not wanted:
            return ""
        with self._lock:
            holders: dict[HeldDevice, list[Holder]] = {}
            for uid, record in self.prepared.all().items():
                if uid != claim.uid:
                    for held in exclusive(record["devices"]):
                        holders.setdefault(held, []).append(Holder(record["namespace"], record["name"], uid))
            for uid, (being, held_devices) in self._preparing.items():
                if uid != claim.uid:
                    for held in held_devices:
                        holders.setdefault(held, []).append(being)
            for held in wanted:
                if held in holders:
                    first = min(holders[held], key=lambda holder: holder.uid)
                    return (
                        f"device {self.driver}/{held} is still prepared for claim {first.namespace}/{first.name} "
                        f"(uid {first.uid}) on node {self.node}; retry once that claim is unprepared"
                    )
            self._preparing[claim.uid] = (claim, wanted)
            return ""

    def release(self, uid: str) -> None:
        """End the hold of a claim's prepare in progress: its record (if it was prepared) holds from now on."""
        with self._lock:
            self._preparing.pop(uid, None)
