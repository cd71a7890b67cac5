"""What the explorer does to a node, and what it sees there: the `World` a state machine runs against.

`cluster.ClusterWorld` is a real cluster's node, where the suite plays the kubelet; the unit tests use an in-memory
one. A `World` raises `HarnessProblem` when the suite itself cannot go on (an allocation the scheduler never made, an
API error), which ends the exploration as the suite's problem, never as the driver's finding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dra_conformance.driver.profile import ConfigEffect
from dra_conformance.explore.model import AllocatedDevice, ClaimShape
from dra_conformance.kubelet.client import ClaimAnswer, ClaimRef

# How the explorer restarts the driver: the signal its process gets before the backend starts it again.
SIGKILL = "SIGKILL"
SIGTERM = "SIGTERM"
# The kubelet's two calls, as one of several in flight at once names them (`World.concurrently`).
PREPARE = "prepare"
UNPREPARE = "unprepare"
# The claims not for this node a prepare may name (`ExploreMachine.prepare_not_for_this_node`): one the API server
# never had, one deleted since (and not prepared), one the scheduler allocated to another node.
UNKNOWN_CLAIM = "unknown claim"
DELETED_CLAIM = "deleted claim"
OTHER_NODES_CLAIM = "claim of another node"


class HarnessProblem(Exception):
    """The suite cannot go on exploring (its own or the cluster's problem, not a finding about the driver)."""


class DriverDidNotComeBack(Exception):
    """The driver, stopped by the explorer, was not serving again with a complete pool within the deadline."""


@dataclass(frozen=True)
class CreatedClaim:
    """A claim the scheduler allocated on the explorer's node: its reference and the driver's allocation results."""

    ref: ClaimRef
    allocated: tuple[AllocatedDevice, ...]


@dataclass(frozen=True)
class PrepareOutcome:
    """A NodePrepareResources call as the kubelet sees it: a whole-call error, or per-claim answers."""

    claims: dict[str, ClaimAnswer] = field(default_factory=dict)
    error: str | None = None

    def describe(self) -> str:
        """One line for the steps of a finding."""
        if self.error is not None:
            return f"whole-call error: {self.error}"
        failed = {uid: answer.error for uid, answer in self.claims.items() if answer.error}
        return f"errors {failed}" if failed else "ok"


@dataclass(frozen=True)
class UnprepareOutcome:
    """A NodeUnprepareResources call: a whole-call error, or per-claim errors ("" for success)."""

    claims: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    def describe(self) -> str:
        """One line for the steps of a finding."""
        if self.error is not None:
            return f"whole-call error: {self.error}"
        failed = {uid: error for uid, error in self.claims.items() if error}
        return f"errors {failed}" if failed else "ok"


@dataclass(frozen=True)
class StatusWrite:
    """A write that set a claim's status.devices entries of the driver under test (a removal is none), in API order."""

    # The claim's resourceVersion after the write.
    version: str
    # When the explorer saw it (the world's monotonic clock).
    seen_at: float
    # The entries of the driver after it: 'pool/device' of each.
    entries: tuple[str, ...]


@dataclass(frozen=True)
class Rollout:
    """A rolling update as the explorer saw it: the registration sockets of the old and of the new instance."""

    # The driver's registration sockets (file names in the plugin registry) before the new instance started.
    old: frozenset[str]
    # Those after the new instance registered, the old one still running beside it.
    during: frozenset[str]
    # Sockets a second instance took over from the first (bound again under the same name), where the world can tell.
    taken_over: frozenset[str] = frozenset()

    def describe(self) -> str:
        """'old [a], both running [a, b]'."""
        return f"old instance {sorted(self.old)}, both running {sorted(self.during)}"


@dataclass(frozen=True)
class SocketsAfterStop:
    """A SIGTERM stop as this machine saw the driver's socket directories: what it served, what its exit left."""

    # The driver's live sockets (registration and plugin), paths, before the signal.
    served: tuple[str, ...]
    # Those still there once its process exited.
    left: tuple[str, ...]
    # How the process ended ('exit status 0', 'killed by signal 15: no handler of its own ran').
    ended: str


@dataclass(frozen=True)
class Restarted:
    """A restart of the driver as this machine saw it: the sockets a SIGTERM stop left, the slices it wrote."""

    # After SIGTERM, the sockets as the exited process left them; None after SIGKILL, or where this machine cannot
    # read their directories.
    sockets: SocketsAfterStop | None = None
    # The writes of the node's slices from before the stop until the driver was back ('s-1 rewritten
    # (resourceVersion 5 -> 9)', 's-2 added'), where its pool says after the restart what it said before (the
    # slices' specs but for the generation); None where not judged (the pool says something else, or the restart
    # took longer than a real node's kubelet leaves the slices alone).
    slice_writes: tuple[str, ...] | None = None
    # How long the driver was down and coming back, in seconds.
    took: float = 0.0


@dataclass(frozen=True)
class Republished:
    """A republish as a consumer watching the node's slices saw it: what changed, and the pool on the way there."""

    # What the republish changed ('informational-taint on gpu-0').
    changed: str
    # Each state of the node's slices, after an event of the watch, in which a pool of the node that was there
    # before the republish was gone or incomplete at its highest generation ('after DELETED of slice s: pool p
    # gone'), in order.
    gaps: tuple[str, ...] = ()
    # The watch events seen from before the republish until the slices were as the driver left them.
    events: int = 0


@dataclass(frozen=True)
class NodeLocalWork:
    """What the driver did for a claim not for its node, as far as this machine can see it."""

    # CDI spec files of the node's CDI dir that name the claim's UID; None where this machine cannot read the dir.
    cdi_specs: tuple[str, ...] | None
    # The driver's writes of the claim's status: entries of its own the claim carries ('pool/device'), and each
    # attempt the API server's audit log shows ('patch -> 403'), allowed or not.
    status_writes: tuple[str, ...] = ()
    # Whether the audit log was read (refused attempts leave no other trace).
    audited: bool = False


@dataclass(frozen=True)
class HealthReading:
    """The driver's health stream(s) for a short window: what each advertised DRAResourceHealth version answered."""

    # The DRAResourceHealth services GetInfo advertises (v1.DRAResourceHealth, v1alpha1.DRAResourceHealth).
    advertised: tuple[str, ...]
    # Per advertised service: the (pool, device) pairs of its first report, or None where none came in the window.
    reports: dict[str, frozenset[tuple[str, str]] | None] = field(default_factory=dict)
    # Per advertised service whose stream failed: the gRPC status ('UNIMPLEMENTED: unknown service ...').
    errors: dict[str, str] = field(default_factory=dict)
    # The window each stream was read for, in seconds.
    window: float = 0.0

    def describe(self) -> str:
        """'v1.DRAResourceHealth: 8 devices, v1alpha1.DRAResourceHealth: UNIMPLEMENTED: ...' for the steps."""
        said = []
        for service in self.advertised:
            devices = self.reports.get(service)
            if service in self.errors:
                said.append(f"{service}: {self.errors[service]}")
            elif devices is None:
                said.append(f"{service}: no report within {self.window:g}s")
            else:
                said.append(f"{service}: {len(devices)} devices")
        return ", ".join(said) or "GetInfo advertises no DRAResourceHealth version"


# A device's health on the stream before any report named it.
NOT_REPORTED = ("not reported", "")


@dataclass(frozen=True)
class HealthSeen:
    """The health stream the kubelet reads, its reports merged as the kubelet merges them, until it said what was due.

    Each report updates the devices it names; `devices` is each device's latest (health, message) when the stream
    said what the explorer waited for, or when the wait's deadline passed.
    """

    devices: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    reports: int = 0
    # Seconds from opening the stream until the verdict (the deadline where what was due never came).
    waited: float = 0.0
    # The gRPC status of a stream that failed ('UNIMPLEMENTED: ...'), None where it answered.
    error: str | None = None

    def health(self, device: tuple[str, str]) -> tuple[str, str]:
        """(health, message) of `device`: its latest report, or NOT_REPORTED."""
        return self.devices.get(device, NOT_REPORTED)

    def describe(self, device: tuple[str, str]) -> str:
        """'UNHEALTHY ('ECC errors')' as the stream last said of `device`, with how it was read."""
        if self.error is not None:
            return f"the stream failed: {self.error}"
        health, message = self.health(device)
        return f"{health} ({message!r}) after {self.reports} report(s) in {self.waited:.1f}s"


@dataclass(frozen=True)
class PoolView:
    """One pool of the node at its highest generation."""

    generation: int
    slices: int
    expected_slices: int
    devices: tuple[str, ...]
    # Each device's attributes: their names and value types (int, string, bool, version), by device.
    attributes: dict[str, dict[str, str]] = field(default_factory=dict)
    # Each device's version attributes' values, by device: a changed version may change the other attributes.
    versions: dict[str, dict[str, str]] = field(default_factory=dict)
    # What the slices of the generation say about the devices (attributes, capacity, taints), as one comparable text.
    content: str = ""
    # What names each device alone, by device: its name and the string attribute values no other device has.
    identifiers: dict[str, frozenset[str]] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Every slice of the highest generation is there."""
        return self.slices == self.expected_slices


@dataclass(frozen=True)
class Observation:
    """What the node shows between two steps."""

    # Text of each CDI spec file in the driver's CDI dir, by file name; None where this machine cannot read the dir.
    cdi_files: dict[str, str] | None
    # Each explorer claim's status.devices entries (every driver's), by claim UID; deleted claims are absent.
    statuses: dict[str, list[dict[str, Any]]]
    # The driver's pools bound to the node, by name.
    pools: dict[str, PoolView]


class World(Protocol):
    """A node of the driver under test that the explorer can act on and observe."""

    @property
    def node(self) -> str:
        """The node's name."""
        ...

    @property
    def driver(self) -> str:
        """The driver's name."""
        ...

    def capacity(self) -> int:
        """Devices the driver publishes on the node, all of them free when the exploration starts."""
        ...

    def other_driver(self) -> str:
        """The other driver on the node that claims may mix with the driver under test ("": none)."""
        ...

    def other_capacity(self) -> int:
        """Devices the other driver publishes on the node (0: none runs there)."""
        ...

    def admin_access(self) -> bool:
        """Whether claims may ask for admin access (the profile declares adminAccess)."""
        ...

    def restarts(self) -> tuple[str, ...]:
        """The signals (SIGKILL, SIGTERM) the backend can stop the driver with before starting it again."""
        ...

    def can_wipe(self) -> bool:
        """Whether this machine can empty the driver's CDI dir."""
        ...

    def can_republish(self) -> bool:
        """Whether the profile declares a way to make the driver publish its pool again."""
        ...

    def can_roll(self) -> bool:
        """Whether the profile declares rollingUpdate and the backend can start a second instance beside the first."""
        ...

    def declared_attributes(self) -> dict[str, str]:
        """The attributes the profile declares the driver's devices carry: name -> type (string, int, bool, version)."""
        ...

    def status_devices(self) -> bool:
        """Whether the profile declares statusDevices: the driver writes status.devices entries of what it prepared."""
        ...

    def health_stream(self) -> bool:
        """Whether the profile declares healthStream: the driver serves DRAResourceHealth/NodeWatchResources."""
        ...

    def can_allocate_elsewhere(self) -> bool:
        """Whether the scheduler can allocate a claim of the driver on another node (it publishes devices there)."""
        ...

    def config_effects(self) -> tuple[ConfigEffect, ...]:
        """The declared effects of the profile's opaque config samples, by index (none: no opaqueConfig)."""
        ...

    def can_set_health(self) -> bool:
        """Whether the profile declares health hooks (health.makeUnhealthy, makeHealthy) and healthStream."""
        ...

    def not_explored(self) -> dict[str, str]:
        """Operations and claim shapes this driver, its profile or the backend rule out, with the reason."""
        ...

    def create_claim(self, shape: ClaimShape) -> CreatedClaim:
        """A claim of `shape` and a pod using it on the node; returns once the scheduler allocated it."""
        ...

    def prepare(self, claims: Sequence[ClaimRef]) -> PrepareOutcome:
        """NodePrepareResources for `claims`, in one call."""
        ...

    def unprepare(self, claims: Sequence[ClaimRef]) -> UnprepareOutcome:
        """NodeUnprepareResources for `claims`, in one call."""
        ...

    def concurrently(self, calls: Sequence[tuple[str, Sequence[ClaimRef]]]) -> list[PrepareOutcome | UnprepareOutcome]:
        """Each call ((PREPARE or UNPREPARE, its claims)) in flight at once, as the kubelet's pod workers make them."""
        ...

    def republish(self) -> Republished:
        """Make the driver publish its pool again, a change in it (as after a rescan), its slices watched meanwhile."""
        ...

    def restart(self, how: str) -> Restarted:
        """Stop the driver with signal `how`, start it again and wait for its complete pool (DriverDidNotComeBack).

        Returns what the restart left: the driver's sockets after a SIGTERM stop (read once its process exited and
        before it started again), and the writes of its slices where its pool's content did not change.
        """
        ...

    def wipe_cdi(self) -> int:
        """Remove every file of the driver's CDI dir (as a reboot empties /var/run/cdi); returns how many."""
        ...

    def roll(self) -> Rollout:
        """A rolling update: a new instance started beside the running one, then one of them stops.

        Raises DriverDidNotComeBack where the instance left serving has no complete pool within the deadline.
        """
        ...

    def unknown_claim(self, uid: str) -> ClaimRef:
        """A claim with UID `uid`, in the explorer's namespace, that the API server does not have."""
        ...

    def prepare_not_owned(self, claim: ClaimRef) -> PrepareOutcome:
        """NodePrepareResources for `claim`, not this node's, alone; `reset` unprepares it only where it succeeded."""
        ...

    def claim_on_another_node(self) -> CreatedClaim:
        """A claim of one device allocated by the scheduler to another node of the driver (kept for the example)."""
        ...

    def node_local_work(self, claim: ClaimRef) -> NodeLocalWork:
        """What the driver did on this node and in the API for `claim`, which is not this node's to prepare."""
        ...

    def read_health(self) -> HealthReading:
        """Each DRAResourceHealth version GetInfo advertises, its stream read for a short window."""
        ...

    def set_health(self, device: tuple[str, str], healthy: bool) -> str | None:
        """Run the profile's hook making (pool, device) unhealthy, or healthy again; why it did not (None: it did)."""
        ...

    def watch_health(self, settled: Callable[[dict[tuple[str, str], tuple[str, str]]], bool]) -> HealthSeen:
        """The health stream the kubelet reads, its reports merged, until `settled` accepts them or a deadline."""
        ...

    def status_mark(self, claim: ClaimRef) -> int | None:
        """How many `status_writes` of the claim there were when the call that returned just now was answered.

        None where the world cannot tell (its watch did not catch up): the writes after it are then not judged.
        """
        ...

    def status_writes(self, claim: ClaimRef) -> tuple[StatusWrite, ...]:
        """Every write that set the claim's status.devices entries of the driver, in the API server's order."""
        ...

    def delete_claim(self, claim: ClaimRef, force: bool) -> None:
        """Delete the claim's pod (gracefully, or at once) and the claim; returns once both are gone."""
        ...

    def observe(self) -> Observation:
        """What the node shows now."""
        ...

    def registered_name(self) -> str:
        """The name the driver's running process registers under (Registration/GetInfo's PluginInfo.name)."""
        ...

    def unbound_slices(self) -> dict[str, str]:
        """The driver's ResourceSlices, on any node, whose spec.nodeName names no node of the cluster (slice: node)."""
        ...

    def reset(self, prepared: Sequence[ClaimRef]) -> None:
        """Between two examples: unprepare `prepared` (errors ignored), delete every claim and pod it created."""
        ...
