"""What the explorer knows must hold on the node: its claims, their devices, which are prepared and what they answered.

The model changes only through what the explorer did and the driver confirmed (a claim allocated, a prepare or an
unprepare that succeeded, a restart, a wipe, a deletion); `invariants` compares it with what the node shows. Pure
data: no cluster, no gRPC, so the unit tests drive it directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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

    def label(self) -> str:
        """'2', '1a' (admin access) or '1o' (the other driver's)."""
        return f"{self.count}{'a' if self.admin else ''}{'o' if self.other else ''}"


@dataclass(frozen=True)
class ClaimShape:
    """The requests of a claim, named req-0, req-1, ... in order."""

    requests: tuple[RequestShape, ...]

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
        """'2+1a': the requests' counts, `a` for admin access (how the explored space lists shapes)."""
        return "+".join(request.label() for request in self.requests)

    def describe(self) -> str:
        """'req-0: 2 devices, req-1: 1 device (admin access)' for the steps of a finding."""
        return ", ".join(
            f"{name}: {r.count} device{'s' if r.count > 1 else ''}{' (admin access)' if r.admin else ''}"
            f"{' of the other driver' if r.other else ''}"
            for name, r in zip(self.names, self.requests, strict=True)
        )

    def spec(self, device_class: str, other_class: str | None = None) -> dict[str, Any]:
        """The ResourceClaim spec (resource.k8s.io/v1) for these requests of `device_class` (or of `other_class`)."""
        requests = []
        for name, request in zip(self.names, self.requests, strict=True):
            exactly: dict[str, Any] = {
                "deviceClassName": other_class if request.other and other_class else device_class,
                "allocationMode": "ExactCount",
                "count": request.count,
            }
            if request.admin:
                exactly["adminAccess"] = True
            requests.append({"name": name, "exactly": exactly})
        return {"devices": {"requests": requests}}


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
        """Devices of the node no live claim holds for itself (admin access claims hold none)."""
        return self.capacity - sum(c.shape.held_devices() for c in self.live())

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
