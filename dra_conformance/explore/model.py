"""What the explorer knows must hold on the node: its claims, their devices, which are prepared and what they answered.

The model changes only through what the explorer did and the driver confirmed (a claim allocated, a prepare or an
unprepare that succeeded, a restart, a wipe, a deletion); `invariants` compares it with what the node shows. Pure
data: no cluster, no gRPC, so the unit tests drive it directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_conformance.driver.profile import ConfigEffect
from dra_conformance.kubelet.client import ClaimRef

# A claim's shape: at most this many requests, each for at most this many devices (issue 43's first version).
MAX_REQUESTS = 3
MAX_DEVICES_PER_REQUEST = 2


@dataclass(frozen=True)
class RequestShape:
    """One request of a claim: `count` devices of the explorer's DeviceClass, with admin access or not.

    `other`: of the other driver's DeviceClass instead (a claim that mixes two drivers), never with admin access.
    """

    count: int
    admin: bool = False
    other: bool = False
    # The profile's opaque config sample (by index) the request's DeviceClass carries; None: a class without config.
    class_config: int | None = None

    def label(self) -> str:
        """'2', '1a' (admin access), '1o' (the other driver's), '1k0' (its class carries the first config sample)."""
        configured = f"k{self.class_config}" if self.class_config is not None else ""
        return f"{self.count}{'a' if self.admin else ''}{'o' if self.other else ''}{configured}"


@dataclass(frozen=True)
class ClaimConfig:
    """An opaque config entry of the claim: the profile's sample (by index), for `requests` (none: every request)."""

    sample: int
    requests: tuple[str, ...] = ()

    def label(self) -> str:
        """'c1' (for every request) or 'c1@req-0'."""
        return f"c{self.sample}" + (f"@{','.join(self.requests)}" if self.requests else "")

    def applies_to(self, request: str) -> bool:
        """Whether the entry configures the devices of `request`."""
        return not self.requests or request in self.requests


@dataclass(frozen=True)
class ClaimShape:
    """The requests of a claim, named req-0, req-1, ... in order."""

    requests: tuple[RequestShape, ...]
    # Its opaque config entries, in order (the last one applying to a request wins).
    configs: tuple[ClaimConfig, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The request names, in order."""
        return tuple(f"req-{index}" for index in range(len(self.requests)))

    def devices(self) -> int:
        """Devices of the driver under test the claim is allocated in all."""
        return sum(request.count for request in self.requests if not request.other)

    def held_devices(self) -> int:
        """Devices of the driver under test it holds for itself: admin access ones may be in use by other claims."""
        return sum(request.count for request in self.requests if not request.admin and not request.other)

    def other_devices(self) -> int:
        """Devices of the other driver it holds."""
        return sum(request.count for request in self.requests if request.other)

    def label(self) -> str:
        """'2+1a c0': the requests' counts, `a` for admin access, then its configs (how the explored space names it)."""
        return "+".join(request.label() for request in self.requests) + "".join(
            f" {config.label()}" for config in self.configs
        )

    def describe(self) -> str:
        """'req-0: 2 devices, req-1: 1 device (admin access)' for the steps of a finding."""
        requests = ", ".join(
            f"{name}: {r.count} device{'s' if r.count > 1 else ''}{' (admin access)' if r.admin else ''}"
            f"{' of the other driver' if r.other else ''}"
            f"{f' (its class carries config sample {r.class_config})' if r.class_config is not None else ''}"
            for name, r in zip(self.names, self.requests, strict=True)
        )
        configs = [f"config sample {c.sample} for {', '.join(c.requests) or 'every request'}" for c in self.configs]
        return "; ".join([requests, *configs])

    def applied_config(self, request: str) -> int | None:
        """The config sample the devices of `request` get: the claim's last entry for it, else its class's (None)."""
        claims = [config.sample for config in self.configs if config.applies_to(request)]
        if claims:
            return claims[-1]
        return dict(zip(self.names, (r.class_config for r in self.requests), strict=True)).get(request)

    def spec(
        self,
        device_class: str,
        other_class: str | None = None,
        *,
        config_classes: Sequence[str] = (),
        opaque: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, Any]:
        """The ResourceClaim spec (resource.k8s.io/v1) for these requests of `device_class` (or of `other_class`).

        `config_classes[i]`: the DeviceClass carrying config sample i; `opaque[i]`: its `opaque` entry (driver and
        parameters), for the claim's configs.
        """
        requests = []
        for name, request in zip(self.names, self.requests, strict=True):
            chosen = device_class if request.class_config is None else config_classes[request.class_config]
            exactly: dict[str, Any] = {
                "deviceClassName": other_class if request.other and other_class else chosen,
                "allocationMode": "ExactCount",
                "count": request.count,
            }
            if request.admin:
                exactly["adminAccess"] = True
            requests.append({"name": name, "exactly": exactly})
        configs = [
            {"opaque": dict(opaque[c.sample]), **({"requests": list(c.requests)} if c.requests else {})}
            for c in self.configs
        ]
        return {"devices": {"requests": requests, **({"config": configs} if configs else {})}}


def base_request(name: str) -> str:
    """The request a result or an answer names, without a subrequest (`req/sub` -> `req`), as the kubelet keys it."""
    return name.split("/", 1)[0]


@dataclass(frozen=True, order=True)
class AllocatedDevice:
    """One allocation result of the driver under test: the request it serves and the device."""

    request: str
    pool: str
    device: str
    admin: bool = False

    @property
    def key(self) -> tuple[str, str]:
        """(pool, device)."""
        return (self.pool, self.device)


def allocated_devices(results: Iterable[Mapping[str, Any]], driver: str) -> tuple[AllocatedDevice, ...]:
    """The results of `driver` in a claim's `status.allocation.devices.results`, sorted."""
    return tuple(
        sorted(
            AllocatedDevice(
                base_request(str(r["request"])), str(r["pool"]), str(r["device"]), bool(r.get("adminAccess"))
            )
            for r in results
            if r.get("driver") == driver
        )
    )


@dataclass(frozen=True)
class AnsweredDevice:
    """One device of a prepare answer, as the kubelet stores it."""

    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...] = ()
    share_id: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        """(pool, device)."""
        return (self.pool, self.device)

    def describe(self) -> str:
        """'gpu-0 [req-0] cdi: vendor/class=name'."""
        requests = ",".join(self.request_names) or "all requests"
        return f"{self.pool}/{self.device} [{requests}]" + (f" cdi {list(self.cdi_ids)}" if self.cdi_ids else "")


def answered_devices(devices: Sequence[Mapping[str, Any]]) -> tuple[AnsweredDevice, ...]:
    """A prepare answer's devices (`ClaimAnswer.devices`), in the order the driver gave them."""
    return tuple(
        AnsweredDevice(
            tuple(str(name) for name in d.get("requestNames") or ()),
            str(d.get("poolName", "")),
            str(d.get("deviceName", "")),
            tuple(str(cdi) for cdi in d.get("cdiDeviceIDs") or ()),
            d.get("shareID"),
        )
        for d in devices
    )


@dataclass
class ClaimState:
    """One claim the explorer created: its allocation, and what the driver confirmed about it."""

    # c1, c2, ... in the order created within one example: the steps of a finding read the same in every replay.
    label: str
    ref: ClaimRef
    shape: ClaimShape
    allocated: tuple[AllocatedDevice, ...]
    # The claim (and its pod) were deleted; a prepared one is still to be unprepared, as after a pod's deletion.
    deleted: bool = False
    prepared: bool = False
    # The answer of its last successful prepare; a repeated prepare must agree with it.
    answer: tuple[AnsweredDevice, ...] | None = None
    # Its answer's CDI IDs must resolve in the CDI dir: it is prepared, and no wipe of the CDI dir happened since the
    # prepare that first prepared it (a repeated prepare need not write the specs again; see `invariants`), or a
    # repeated prepare came after the wipe and a restart of the driver, as after a reboot: the kubelet prepares
    # again, and hands the answered IDs to the runtime (protocol.repeated-prepare-cdi-ids-resolve-after-specs-lost).
    cdi_expected: bool = False
    # Its specs were wiped while it was prepared, and (second) the driver restarted since.
    specs_lost: bool = False
    restarted_since_loss: bool = False
    # The driver was restarted since it was prepared: what its unprepare leaves is judged defensively.
    restarted_since_prepare: bool = False
    # When (monotonic seconds) its last successful unprepare returned; None while it was never unprepared.
    unprepared_at: float | None = None
    # When its last successful prepare returned (None: never, or not told): a write it queued lands in a window after.
    prepared_at: float | None = None
    # How many writes of its status.devices entries by the driver there were when that unprepare answered (the
    # world's `status_mark`): a later one is a write after the unprepare. None: not prepared since, or unknown.
    writes_before_unprepare: int | None = None

    @property
    def name(self) -> str:
        """'c1 (claim-4)': the example's label and the claim's name in the cluster."""
        return f"{self.label} ({self.ref.name})"

    def allocated_keys(self) -> set[tuple[str, str]]:
        """(pool, device) of every allocation result of the driver."""
        return {device.key for device in self.allocated}


@dataclass
class PoolSeen:
    """What the explorer saw of one pool of the node: its highest generation and its devices the first time.

    Also what its slices said at that generation (`content`) and each device's attribute types and version values
    the last time they were seen.
    """

    generation: int
    devices: tuple[str, ...]
    content: str = ""
    attributes: dict[str, dict[str, str]] = field(default_factory=dict)
    versions: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass
class Model:
    """Everything the explorer knows must hold on the node, for one example (one sequence of steps)."""

    node: str
    driver: str
    # Devices the driver publishes on the node (all of its pools).
    capacity: int
    # Devices the other driver publishes on the node, for claims that mix two drivers (0: none runs there).
    other_capacity: int = 0
    # Its name: the explorer never has it prepare a claim, so no status.devices entry of it may appear.
    other_driver: str = ""
    # The profile declares statusDevices: each claim the driver prepared gets status.devices entries of it.
    status_devices: bool = False
    # The attributes the profile declares its devices carry, by name: their types (string, int, bool, version).
    declared_attributes: dict[str, str] = field(default_factory=dict)
    # The declared effects of the profile's opaque config samples, by index (none: it declares no opaqueConfig).
    config_effects: tuple[ConfigEffect, ...] = ()
    claims: dict[str, ClaimState] = field(default_factory=dict)
    pools: dict[str, PoolSeen] = field(default_factory=dict)
    restarts: int = 0
    wipes: int = 0
    republishes: int = 0
    # What the driver's process registers under and where its slices are bound is still to be read: at the start of
    # an example, and after each restart (a new process) or republish (the slices written again).
    publishing_unchecked: bool = True
    # The health stream of the driver's running process is still to be read (the explorer reads it once per process).
    health_unread: bool = True
    # Devices (pool, device) the profile's health hooks made unhealthy in this example, not made healthy again since.
    failed: set[tuple[str, str]] = field(default_factory=set)
    # Devices failed before a restart of the driver: whether a hook's failure outlives the process is the driver's
    # (a fault kept in its memory does not, a file the hook wrote does), so their health is judged again only once a
    # hook set it again.
    health_unknown: set[tuple[str, str]] = field(default_factory=set)
    # A health hook ran in this example: from then on the health stream is read after every step.
    health_hooked: bool = False
    # Devices (pool, device) a read of the health stream reported in this example, by any process of the driver.
    health_reported: set[tuple[str, str]] = field(default_factory=set)

    def add(self, ref: ClaimRef, shape: ClaimShape, allocated: tuple[AllocatedDevice, ...]) -> ClaimState:
        """A claim the scheduler allocated."""
        state = ClaimState(f"c{len(self.claims) + 1}", ref, shape, allocated)
        self.claims[ref.uid] = state
        return state

    def live(self) -> list[ClaimState]:
        """Claims that still exist, in the order created."""
        return [c for c in self.claims.values() if not c.deleted]

    def prepared(self) -> list[ClaimState]:
        """Claims prepared and not unprepared since (deleted ones too: their unprepare is still due)."""
        return [c for c in self.claims.values() if c.prepared]

    def unpreparable(self) -> list[ClaimState]:
        """Claims an unprepare may name: prepared ones first, then the other live ones (never prepared, or done)."""
        prepared = self.prepared()
        return prepared + [c for c in self.live() if c not in prepared]

    def held_by_others(self, claim: ClaimState) -> list[tuple[str, str, str]]:
        """(pool, device, holder label) of `claim`'s devices another claim still holds on the node.

        A claim holds its devices (not those it has for admin access) from its prepare until its unprepare; the
        scheduler may allocate one again once that claim is deleted, before its unprepare. A driver may refuse to
        prepare such a claim until then (the kubelet retries), as some GPU drivers do.
        """
        mine = {d.key for d in claim.allocated if not d.admin}
        return sorted(
            (pool, device, other.label)
            for other in self.prepared()
            if other is not claim
            for (pool, device) in {d.key for d in other.allocated if not d.admin} & mine
        )

    def free_other_devices(self) -> int:
        """Devices of the other driver no live claim holds."""
        return self.other_capacity - sum(c.shape.other_devices() for c in self.live())

    def free_devices(self) -> int:
        """Devices of the node no live claim holds for itself (admin access claims hold none), failed ones not counted.

        A driver may taint a failed device in its slice, and the scheduler then allocates it to no new claim.
        """
        held = {d.key for c in self.live() for d in c.allocated if not d.admin}
        return self.capacity - sum(c.shape.held_devices() for c in self.live()) - len(self.unavailable() - held)

    def usable_capacity(self) -> int:
        """Devices a new claim may be allocated at all (with admin access, also those other claims hold)."""
        return self.capacity - len(self.unavailable())

    def unavailable(self) -> set[tuple[str, str]]:
        """Devices the health hooks failed, and those whose failure may have outlived a restart."""
        return self.failed | self.health_unknown

    def made_unhealthy(self, device: tuple[str, str]) -> None:
        """The health hook made `device` unhealthy."""
        self.failed.add(device)
        self.health_unknown.discard(device)
        self.health_hooked = True

    def made_healthy(self, device: tuple[str, str]) -> None:
        """The health hook made `device` healthy again."""
        self.failed.discard(device)
        self.health_unknown.discard(device)
        self.health_hooked = True

    def health_lost(self, device: tuple[str, str]) -> None:
        """A health hook on `device` did not run: what the device's health is now is not the explorer's to know."""
        self.failed.discard(device)
        self.health_unknown.add(device)
        self.health_hooked = True

    def prepared_ok(self, claim: ClaimState, answer: tuple[AnsweredDevice, ...], at: float | None = None) -> None:
        """The driver prepared `claim` and answered `answer` (at clock time `at`)."""
        if not claim.prepared:
            claim.cdi_expected = True  # a first prepare writes what its answer names
        elif claim.specs_lost and claim.restarted_since_loss:
            claim.cdi_expected = True  # a prepare after a reboot writes them again
            claim.specs_lost = claim.restarted_since_loss = False
        claim.prepared, claim.answer, claim.restarted_since_prepare = True, answer, False
        claim.prepared_at = at if at is not None else claim.prepared_at
        # Its entries are the driver's to write again: writes after the unprepare before are no longer told apart.
        claim.writes_before_unprepare = None

    def unprepared_ok(self, claim: ClaimState, at: float, writes: int | None = None) -> None:
        """The driver unprepared `claim` (a no-op for one that was not prepared); `writes`: its `status_mark` then."""
        if claim.prepared:
            claim.unprepared_at, claim.writes_before_unprepare = at, writes
        claim.prepared, claim.cdi_expected, claim.specs_lost, claim.restarted_since_loss = False, False, False, False

    def deleted(self, claim: ClaimState) -> None:
        """`claim` and its pod are gone from the API; its devices are free again."""
        claim.deleted = True

    def restarted(self) -> None:
        """The driver was restarted: what it prepared before is judged as prepared by another process."""
        self.restarts += 1
        self.publishing_unchecked = self.health_unread = True
        self.health_unknown |= self.failed
        self.failed = set()
        for claim in self.prepared():
            claim.restarted_since_prepare = True
            claim.restarted_since_loss = claim.specs_lost

    def watched_for_writes(self) -> list[ClaimState]:
        """Claims unprepared and not prepared since, whose status writes after the unprepare are judged."""
        return [c for c in self.claims.values() if not c.prepared and c.writes_before_unprepare is not None]

    def wiped(self) -> None:
        """The CDI dir was emptied: the specs of claims prepared so far are gone, not the driver's doing."""
        self.wipes += 1
        for claim in self.prepared():
            claim.cdi_expected = False
            claim.specs_lost, claim.restarted_since_loss = True, False
