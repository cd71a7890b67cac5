"""The explorer's state machine and runner against an in-memory node (no cluster).

It finds planted bugs, shrinks them to a short sequence, reproduces them from the seed, and finds nothing in a correct
driver.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from dra_conformance.driver.profile import ConfigEffect
from dra_conformance.explore import invariants
from dra_conformance.explore.model import AllocatedDevice, ClaimShape, RequestShape
from dra_conformance.explore.runner import DEFAULT_MAX_STEPS, Budget, Exploration, explore, render
from dra_conformance.explore.world import (
    PREPARE,
    SIGKILL,
    SIGTERM,
    CreatedClaim,
    DriverDidNotComeBack,
    HarnessProblem,
    HealthReading,
    HealthSeen,
    NodeLocalWork,
    Observation,
    PoolView,
    PrepareOutcome,
    Republished,
    Restarted,
    Rollout,
    SocketsAfterStop,
    StatusWrite,
    UnprepareOutcome,
)
from dra_conformance.kubelet.client import ClaimAnswer, ClaimRef

DRIVER = "gpu.example.com"
OTHER = "nic.example.com"
NODE = "node-a"
DEVICES = 6
# Small budgets: the in-memory node answers in microseconds, so examples, not seconds, bound these runs.
QUICK = Budget(max_examples=200, max_steps=12, seconds=None, shrink_seconds=60.0)
# `rewrites-status`: how long after a prepare the driver writes the claim's entries again (the reference driver's
# statusRefreshDelay), within the explorer's window.
REWRITE_DELAY = 3.0
REGISTRATION = f"{DRIVER}-reg.sock"
# Another node of the driver, where the scheduler allocates the claims of other nodes.
OTHER_NODE = "node-b"
HEALTH_V1, HEALTH_V1ALPHA1 = "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"
# The opaque config samples' effect: SHARING=<value> in the CDI edits of each device they apply to.
SHARING_ENV = "SHARING"
SHARING = ("TimeSlicing", "Exclusive")


class FakeClock:
    """Time that passes only when the explorer sleeps (or a little on each reading)."""

    def __init__(self, tick: float = 0.001) -> None:
        self.now = 0.0
        self.tick = tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Allocation:
    ref: ClaimRef
    results: tuple[AllocatedDevice, ...]
    # Devices of the other driver (other-0, ...).
    others: tuple[str, ...] = ()
    shape: ClaimShape = field(default_factory=lambda: ClaimShape(()))


@dataclass
class FakeNode:
    """A node whose driver prepares claims as the contract asks, unless told to be broken in one of `bugs` ways."""

    bugs: frozenset[str] = frozenset()
    admin: bool = True
    restart_signals: tuple[str, ...] = (SIGKILL, SIGTERM)
    fail_creating_after: int | None = None
    claims: dict[str, Allocation] = field(default_factory=dict)
    # Every claim ever allocated (deleted ones too), for what a prepared one holds.
    allocations: dict[str, Allocation] = field(default_factory=dict)
    prepared: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    statuses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    generation: int = 1
    _uids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    created: int = 0
    republishing: bool = True
    # Devices of another driver on the node (other-0, ...), for claims that mix two drivers.
    others: int = 0
    # The informational taint a republish toggles, as the reference driver's fault switches do.
    tainted: bool = False
    # The checkpoint: what the driver finds prepared after a restart (`loses-entries` drops concurrent ones).
    checkpoint: set[str] = field(default_factory=set)
    # The profile declares rollingUpdate (no backend offers it yet; always enabled, it would crowd out the rest).
    rolling: bool = False
    # The profile declares statusDevices (`omits-status`: the driver writes none all the same).
    declares_status: bool = True
    # The explorer's clock (`run` gives it to the exploration): `rewrites-status` writes when it says.
    clock: FakeClock = field(default_factory=FakeClock)
    # Each claim's writes of this driver's entries, in order; rewrites still to come (claim UID, due, entries).
    writes: dict[str, list[StatusWrite]] = field(default_factory=dict)
    rewrites: list[tuple[str, float, list[dict[str, Any]]]] = field(default_factory=list)
    # The profile declares healthStream; the driver publishes devices on another node too.
    health: bool = True
    elsewhere: bool = True
    # The claim allocated to the other node in this example, and the driver's refused status writes by claim UID.
    other_nodes_claim: Allocation | None = None
    refused_writes: dict[str, list[str]] = field(default_factory=dict)
    # The profile declares health hooks; the devices they failed, a fault of the process (gone with a restart, unless
    # `failure-outlives-restart`: as a file the hook wrote).
    hooks: bool = True
    unhealthy: set[str] = field(default_factory=set)
    # The profile declares opaqueConfig (two samples, each an env entry in the CDI edits of its devices).
    configs: bool = True
    # The devices of the claims the driver found prepared at its last start.
    restored: set[str] = field(default_factory=set)

    node = NODE
    driver = DRIVER

    def capacity(self) -> int:
        return DEVICES

    def admin_access(self) -> bool:
        return self.admin

    def restarts(self) -> tuple[str, ...]:
        return self.restart_signals

    def can_wipe(self) -> bool:
        return True

    def can_republish(self) -> bool:
        return self.republishing

    def other_driver(self) -> str:
        return OTHER if self.others else ""

    def other_capacity(self) -> int:
        return self.others

    def can_roll(self) -> bool:
        return self.rolling

    def status_devices(self) -> bool:
        return self.declares_status

    def declared_attributes(self) -> dict[str, str]:
        return {}

    def health_stream(self) -> bool:
        return self.health

    def can_allocate_elsewhere(self) -> bool:
        return self.elsewhere

    def config_effects(self) -> tuple[ConfigEffect, ...]:
        return tuple(ConfigEffect(cdi_env=(SHARING_ENV, value)) for value in SHARING) if self.configs else ()

    def can_set_health(self) -> bool:
        return self.health and self.hooks

    def set_health(self, device: tuple[str, str], healthy: bool) -> str | None:
        if healthy:
            self.unhealthy.discard(device[1])
        else:
            self.unhealthy.add(device[1])
        return None

    def watch_health(self, settled: Callable[[dict[tuple[str, str], tuple[str, str]]], bool]) -> HealthSeen:
        # `healthy-while-failing`: every device HEALTHY; `unhealthy-without-message`: UNHEALTHY with no message.
        message = "" if "unhealthy-without-message" in self.bugs else "made unhealthy"
        failing = set() if "healthy-while-failing" in self.bugs else self.unhealthy
        devices = {
            (NODE, name): ("UNHEALTHY", message) if name in failing else ("HEALTHY", "ok")
            for name in (f"gpu-{i}" for i in range(DEVICES))
        }
        waited = 0.0 if settled(devices) else 35.0
        self.clock.sleep(waited)
        return HealthSeen(devices, 1, waited)

    def unknown_claim(self, uid: str) -> ClaimRef:
        return ClaimRef("ns", uid, f"unknown-{uid[:8]}")

    def claim_on_another_node(self) -> CreatedClaim:
        if self.other_nodes_claim is None:
            uid = f"uid-{next(self._uids)}"
            results = (AllocatedDevice("req-0", OTHER_NODE, "gpu-0"),)
            self.other_nodes_claim = Allocation(ClaimRef("ns", uid, f"claim-{uid}"), results)
        return CreatedClaim(self.other_nodes_claim.ref, self.other_nodes_claim.results)

    def prepare_not_owned(self, claim: ClaimRef) -> PrepareOutcome:
        return self.prepare([claim])

    def node_local_work(self, claim: ClaimRef) -> NodeLocalWork:
        specs = tuple(name for name in sorted(self.files) if name == f"{claim.uid}.json")
        writes = [f"entries {list(w.entries)}" for w in self.writes.get(claim.uid, [])]
        return NodeLocalWork(specs, tuple(writes + self.refused_writes.get(claim.uid, [])), audited=True)

    def read_health(self) -> HealthReading:
        # `health-wrong-pool`: reports under the driver's name; `health-alpha-unserved`: advertises v1alpha1 only.
        pool = DRIVER if "health-wrong-pool" in self.bugs else NODE
        # `health-lost-after-restart`: the devices of claims it found prepared at start are in no report.
        lost = self.restored if "health-lost-after-restart" in self.bugs else set()
        devices = frozenset((pool, f"gpu-{i}") for i in range(DEVICES) if f"gpu-{i}" not in lost)
        if "health-alpha-unserved" in self.bugs:
            return HealthReading((HEALTH_V1, HEALTH_V1ALPHA1), {HEALTH_V1: devices}, {HEALTH_V1ALPHA1: "UNIMPLEMENTED"})
        return HealthReading((HEALTH_V1, HEALTH_V1ALPHA1), {HEALTH_V1: devices, HEALTH_V1ALPHA1: devices}, {}, 5.0)

    def registered_name(self) -> str:
        return "example.com" if "product-name" in self.bugs else DRIVER

    def unbound_slices(self) -> dict[str, str]:
        # `wrong-node`: the pool published again for the node's FQDN, an older release's node name.
        return {f"{NODE}.example.com-{DRIVER}": f"{NODE}.example.com"} if "wrong-node" in self.bugs else {}

    def not_explored(self) -> dict[str, str]:
        skipped = {} if self.republishing else {"republish": "the profile declares no way"}
        return skipped | ({} if self.rolling else {"rolling update": "the profile declares no rollingUpdate"})

    def roll(self) -> Rollout:
        # A new process with the checkpoint, as a restart; `shares-socket` registers under the old instance's name.
        self.restart(SIGTERM)
        new = REGISTRATION if "shares-socket" in self.bugs else f"{DRIVER}-new-reg.sock"
        return Rollout(frozenset({REGISTRATION}), frozenset({REGISTRATION, new}))

    def _write_status(self, uid: str, entries: list[dict[str, Any]]) -> None:
        self.statuses[uid] = entries
        ours = tuple(f"{e['pool']}/{e['device']}" for e in entries if e["driver"] == DRIVER)
        writes = self.writes.setdefault(uid, [])
        writes.append(StatusWrite(str(len(writes) + 1), self.clock.now, ours))

    def _rewrite_due(self) -> None:
        for uid, due, entries in list(self.rewrites):
            if due <= self.clock.now:
                self.rewrites.remove((uid, due, entries))
                if uid in self.claims:  # refused once the claim is gone
                    self._write_status(uid, entries)

    def status_mark(self, claim: ClaimRef) -> int | None:
        self._rewrite_due()
        return len(self.writes.get(claim.uid, []))

    def status_writes(self, claim: ClaimRef) -> tuple[StatusWrite, ...]:
        self._rewrite_due()
        return tuple(self.writes.get(claim.uid, []))

    def concurrently(self, calls: Sequence[tuple[str, Sequence[ClaimRef]]]) -> list[PrepareOutcome | UnprepareOutcome]:
        # In the order given; `loses-entries` is a checkpoint written outside the lock: the calls after the first
        # overwrite it with what they read before the first one wrote.
        read = set(self.checkpoint)
        outcomes: list[PrepareOutcome | UnprepareOutcome] = []
        for index, (kind, claims) in enumerate(calls):
            outcomes.append(self.prepare(claims) if kind == PREPARE else self.unprepare(claims))
            if "loses-entries" in self.bugs and index > 0:
                self.checkpoint = read | ({c.uid for c in claims} & set(self.prepared) if kind == PREPARE else set())
        return outcomes

    def republish(self) -> Republished:
        self.tainted = not self.tainted
        if "republish-same-generation" not in self.bugs:
            self.generation += 1
        changed = "taint" if self.tainted else "cleared"
        # `republish-deletes-first`: the pool's slice deleted before the new generation's is created.
        if "republish-deletes-first" in self.bugs:
            return Republished(changed, (f"after DELETED of slice {NODE}-0: pool {NODE} gone",), 2)
        return Republished(changed, (), 1)

    def create_claim(self, shape: ClaimShape) -> CreatedClaim:
        self.created += 1
        if self.fail_creating_after is not None and self.created > self.fail_creating_after:
            raise HarnessProblem("pod claim-x not bound to a node within 60 s")
        held = {d.device for a in self.claims.values() for d in a.results if not d.admin}
        # A failed device is tainted in the slice: the scheduler allocates it to no new claim.
        usable = [f"gpu-{i}" for i in range(DEVICES) if f"gpu-{i}" not in self.unhealthy]
        free = [device for device in usable if device not in held]
        # As the scheduler's allocator: distinct devices within a claim, free ones for requests without admin access
        # (it backtracks until both fit; here requests with admin access simply go last).
        results: list[AllocatedDevice] = []
        ordered = sorted(zip(shape.names, shape.requests, strict=True), key=lambda item: item[1].admin)
        held_others = {d for a in self.claims.values() for d in a.others}
        others: list[str] = []
        for name, request in ordered:
            if request.other:
                others += [d for d in (f"other-{i}" for i in range(self.others)) if d not in held_others][
                    : request.count
                ]
                held_others |= set(others)
                continue
            mine = {r.device for r in results}
            pool = usable if request.admin else free
            taken = [d for d in pool if d not in mine][: request.count]
            assert len(taken) == request.count, (shape, free)
            results += [AllocatedDevice(name, NODE, device, request.admin) for device in taken]
        uid = f"uid-{next(self._uids)}"
        ref = ClaimRef("ns", uid, f"claim-{uid}")
        self.claims[uid] = self.allocations[uid] = Allocation(ref, tuple(sorted(results)), tuple(others), shape)
        return CreatedClaim(ref, tuple(sorted(results)))

    def _answer(self, allocation: Allocation) -> list[dict[str, Any]]:
        first = allocation.results[0].request
        return [
            {
                "requestNames": [first if "first-request-name" in self.bugs else d.request],
                "poolName": d.pool,
                "deviceName": d.device,
                "cdiDeviceIDs": [f"example.com/gpu={allocation.ref.uid}-{d.device}"],
            }
            for d in allocation.results
        ]

    def prepare(self, claims: Sequence[ClaimRef]) -> PrepareOutcome:
        answers = {}
        for ref in claims:
            allocation = self.claims.get(ref.uid)
            elsewhere = self.other_nodes_claim
            if elsewhere is not None and ref.uid == elsewhere.ref.uid:
                if "foreign-status" in self.bugs:
                    self.refused_writes.setdefault(ref.uid, []).append("patch -> 403")
                if "foreign-prepared" not in self.bugs:
                    answers[ref.uid] = ClaimAnswer(error=f"allocated to node {OTHER_NODE}, not {NODE}")
                    continue
                allocation = elsewhere
            if allocation is None:
                unknown = "" if "unknown-prepared" in self.bugs else "no such claim"
                answers[ref.uid] = ClaimAnswer(error=unknown)
                continue
            held = {
                d.device
                for uid in self.prepared
                if uid != ref.uid and uid in self.allocations
                for d in self.allocations[uid].results
                if not d.admin
            }
            mine = {d.device for d in allocation.results if not d.admin}
            if "refuse-held" in self.bugs and ref.uid not in self.prepared and held & mine:
                answers[ref.uid] = ClaimAnswer(error=f"devices {sorted(held & mine)} are held by another claim")
                continue
            if ref.uid in self.prepared and f"{ref.uid}.json" not in self.files:
                # A repeated prepare whose specs are gone (a reboot emptied the CDI dir) writes them again.
                if "replayed-prepare-skips-cdi-specs" not in self.bugs:
                    self._write_spec(ref, self.prepared[ref.uid])
            if ref.uid not in self.prepared:
                devices = self._answer(allocation)
                self.prepared[ref.uid] = devices
                self.checkpoint.add(ref.uid)
                self._write_spec(ref, devices)
                entries = [{"driver": DRIVER, "pool": NODE, "device": d.device} for d in allocation.results]
                if "status-first-device-only" in self.bugs:
                    entries = entries[:1]
                if "status-for-other-driver" in self.bugs:
                    entries += [{"driver": OTHER, "pool": NODE, "device": d} for d in allocation.others]
                if "omits-status" not in self.bugs:
                    self._write_status(ref.uid, entries)
                if "rewrites-status" in self.bugs:
                    self.rewrites.append((ref.uid, self.clock.now + REWRITE_DELAY, entries))
            answers[ref.uid] = ClaimAnswer(devices=list(self.prepared[ref.uid]))
        if "batch-answers-swapped" in self.bugs and len(claims) > 1:
            uids = [c.uid for c in claims]
            answers = {uid: answers[uids[(index + 1) % len(uids)]] for index, uid in enumerate(uids)}
        return PrepareOutcome(answers)

    def _write_spec(self, ref: ClaimRef, devices: list[dict[str, Any]]) -> None:
        spec = {
            "kind": "example.com/gpu",
            "devices": [
                {
                    "name": d["cdiDeviceIDs"][0].split("=")[1],
                    "containerEdits": {"env": self._sharing(ref.uid, d["deviceName"])},
                }
                for d in devices
            ],
        }
        self.files[f"{ref.uid}.json"] = json.dumps(spec)

    def _sharing(self, uid: str, device: str) -> list[str]:
        """The config sample's env entry of the device (`class-config-over-claim`: the class's config wins)."""
        allocation = self.allocations.get(uid)
        if allocation is None or not self.configs:
            return []
        request = next(d.request for d in allocation.results if d.device == device)
        shape = allocation.shape
        classes = dict(zip(shape.names, (r.class_config for r in shape.requests), strict=True))
        sample = shape.applied_config(request)
        if "class-config-over-claim" in self.bugs and classes.get(request) is not None:
            sample = classes[request]
        return [] if sample is None else [f"{SHARING_ENV}={SHARING[sample]}"]

    def unprepare(self, claims: Sequence[ClaimRef]) -> UnprepareOutcome:
        for position, ref in enumerate(claims):
            if position > 0 and "unprepare-only-first" in self.bugs:
                continue
            self.checkpoint.discard(ref.uid)
            if ref.uid in self.prepared:
                del self.prepared[ref.uid]
                self.files.pop(f"{ref.uid}.json", None)
                if "status-kept" not in self.bugs:
                    self.statuses.pop(ref.uid, None)
        return UnprepareOutcome({ref.uid: "" for ref in claims})

    def restart(self, how: str) -> Restarted:
        if "never-back" in self.bugs:
            raise DriverDidNotComeBack(f"no complete pool within 60 s after {how}")
        if "loses-state" in self.bugs:
            self.prepared.clear()
        # What it finds prepared again is its checkpoint; the taint was a fault switch, gone with the process.
        self.prepared = {uid: devices for uid, devices in self.prepared.items() if uid in self.checkpoint}
        self.restored = {d["deviceName"] for devices in self.prepared.values() for d in devices}
        self.tainted = False
        if "failure-outlives-restart" not in self.bugs:
            self.unhealthy.clear()
        if "index-becomes-string" in self.bugs:
            self.retyped = True
        # The bug: on restart the driver republishes from generation 1 (here: every second restart).
        self.generation = 1 if "generation-reset" in self.bugs and self.generation > 1 else self.generation + 1
        # After SIGTERM, its sockets as the stopped process left them (`leaves-sockets`: quits without closing them);
        # its slices, unchanged, written again at each start where it `rewrites-slices`.
        served = (f"/k/plugins_registry/{REGISTRATION}", f"/k/plugins/{DRIVER}/dra.sock")
        left = served if "leaves-sockets" in self.bugs else ()
        sockets = SocketsAfterStop(served, left, "exit status 0") if how == SIGTERM else None
        rewritten = ("node-a-slice rewritten (resourceVersion 5 -> 9)",) if "rewrites-slices" in self.bugs else ()
        return Restarted(sockets, rewritten, 1.0)

    def wipe_cdi(self) -> int:
        count = len(self.files)
        self.files.clear()
        return count

    def delete_claim(self, claim: ClaimRef, force: bool) -> None:
        self.claims.pop(claim.uid, None)
        self.statuses.pop(claim.uid, None)

    retyped: bool = False

    def observe(self) -> Observation:
        self._rewrite_due()
        names = tuple(f"gpu-{i}" for i in range(DEVICES))
        index = "string" if self.retyped else "int"
        pool = PoolView(
            self.generation,
            1,
            1,
            names,
            attributes={name: {"index": index} for name in names},
            versions={name: {} for name in names},
            content=json.dumps({"gpu-0": {"taints": ["informational"] if self.tainted else []}}),
        )
        statuses = {uid: list(self.statuses.get(uid, [])) for uid in self.claims}
        return Observation(dict(self.files), statuses, {NODE: pool})

    def reset(self, prepared: Sequence[ClaimRef]) -> None:
        self.unprepare(list(prepared)[:1])
        for ref in list(prepared)[1:]:
            self.unprepare([ref])
        self.claims.clear()
        self.statuses.clear()
        self.rewrites.clear()
        self.other_nodes_claim = None
        self.tainted = self.retyped = False
        self.unhealthy.clear()
        self.restored.clear()


def contract_only(obligation: str) -> bool:
    return obligation not in DEFENSIVE


DEFENSIVE = {
    invariants.EVERY_ALLOCATED,
    invariants.REPEATED_IDENTICAL,
    invariants.CDI_REMOVED_AFTER_RESTART,
    invariants.STATUS_REMOVED,
    invariants.POOL_GENERATION,
    invariants.NOT_FOR_NODE_NO_CDI,
}


def strict(_obligation: str) -> bool:
    return True


def run(node: FakeNode, seed: int = 7, budget: Budget = QUICK, fails: Any = strict) -> Exploration:
    return explore(node, budget, seed, fails, node.clock, node.clock.sleep)


def test_a_correct_driver_gives_no_finding_and_the_run_covers_every_operation() -> None:
    done = run(FakeNode(rolling=True))
    assert done.finding is None, render(done, "replay")
    assert done.harness is None and not done.advisories
    kinds = {name.split(" (")[0] for name in done.operations}
    assert kinds == {
        "create claim",
        "prepare",
        "prepare again",
        "unprepare",
        "restart driver",
        "wipe CDI dir",
        "delete claim",
        "concurrent",
        "concurrent changes",
        "republish",
        "reboot",
        "prepare after the reboot",
        "restart while pods end",
        "unprepare after the restart",
        "rolling update",
        "prepare a claim not for this node",
        "read the health stream",
        "make a device unhealthy",
        "make a device healthy again",
    }, done.operations
    assert {
        "prepare a claim not for this node (unknown claim)",
        "prepare a claim not for this node (deleted claim)",
        "prepare a claim not for this node (claim of another node)",
    } <= set(done.operations), done.operations
    assert {"delete claim (graceful)", "delete claim (force)"} <= set(done.operations), done.operations
    # The kinds of calls in flight at once, in any order.
    concurrent = {
        tuple(sorted(name.split(" (", 1)[1].rstrip(")").split(" + ")))
        for name in done.operations
        if name.startswith("concurrent")
    }
    assert {("prepare", "unprepare"), ("prepare", "prepare")} <= concurrent, done.operations
    assert done.invariant_checks >= done.steps and done.stated > done.invariant_checks, render(done, "replay")
    assert done.shrink_examples == done.shrink_steps == 0 and not done.not_explored
    assert any("a" in shape for shape in done.shapes) and any("+" in shape for shape in done.shapes), done.shapes
    assert {invariants.CDI_RESOLVES, invariants.REQUEST_NAMES, invariants.POOL_COMPLETE} <= set(done.exercised)
    assert done.examples >= QUICK.max_examples


# The longest shrunk sequence accepted where the shortest failing one is longer than a few steps: create, prepare,
# reboot (wipe, restart) and the prepare after it are four; shrinking under the operations' preconditions may leave
# a step more.
SHRUNK_STEPS = {
    "replayed-prepare-skips-cdi-specs": 5,
    "unprepare-only-first": 6,
    "product-name": 0,
    "wrong-node": 0,
    # Create, prepare, read the health stream, restart, read it again are five; shrinking may leave the restart as one
    # while pods end (its unprepare, then a prepare again).
    "health-lost-after-restart": 7,
}
# Shrinking a status write after an unprepare waits out the write window at the end of each example, and a missing
# declared status entry the status_written window after each prepare (on the fake clock: no real time).
LONG_SHRINK = Budget(max_examples=200, max_steps=12, seconds=None, shrink_seconds=3600.0)


@pytest.mark.parametrize(
    ("bug", "obligation"),
    [
        # All are left: which one the example meets first depends on whether a wipe or a restart came before.
        (
            "unprepare-only-first",
            {invariants.CDI_REMOVED, invariants.CDI_REMOVED_AFTER_RESTART, invariants.STATUS_REMOVED},
        ),
        ("batch-answers-swapped", {invariants.ONLY_ALLOCATED, invariants.EVERY_ALLOCATED}),
        ("first-request-name", invariants.REQUEST_NAMES),
        ("never-back", invariants.COMES_BACK),
        ("republish-same-generation", invariants.POOL_CONTENT),
        ("index-becomes-string", invariants.POOL_ATTRIBUTES),
        # k/k#141433: after a wipe of the CDI dir and a restart, a repeated prepare answers IDs no spec defines.
        ("replayed-prepare-skips-cdi-specs", invariants.CDI_RESOLVES),
        ("rewrites-status", invariants.STATUS_WRITE_AFTER_UNPREPARE),
        ("shares-socket", invariants.ROLLOUT_SOCKETS),
        # Issue 43's last held-out modes: declared status.devices never written (or for one device only), a
        # registration under the product's name, slices for a node that does not exist, a republish that deletes
        # the pool before writing it again.
        ("omits-status", invariants.STATUS_WRITTEN),
        ("status-first-device-only", invariants.STATUS_PER_DEVICE),
        ("product-name", invariants.REGISTRATION_NAME),
        ("wrong-node", invariants.SLICES_ON_NODES),
        ("republish-deletes-first", invariants.POOL_COMPLETE_DURING_REPUBLISH),
        # Claims this node does not own, and the health stream.
        ("unknown-prepared", invariants.UNKNOWN_NOT_PREPARED),
        ("foreign-prepared", {invariants.OTHER_NODE_NO_DEVICE, invariants.NOT_FOR_NODE_NO_CDI}),
        ("foreign-status", invariants.OTHER_NODE_NO_STATUS_WRITE),
        ("health-wrong-pool", invariants.HEALTH_PUBLISHED),
        ("health-alpha-unserved", invariants.HEALTH_VERSIONS_ANSWER),
        # A SIGTERM stop that leaves the sockets the driver served.
        ("leaves-sockets", invariants.SIGTERM_SOCKETS),
        # A restart that writes its unchanged slices again.
        ("rewrites-slices", invariants.SLICES_UNTOUCHED),
        # A device the health hook failed: reported HEALTHY, or UNHEALTHY without a message.
        ("healthy-while-failing", invariants.HOOKED_UNHEALTHY),
        ("unhealthy-without-message", invariants.UNHEALTHY_MESSAGE),
        # Opaque config: the class's applied over the claim's.
        ("class-config-over-claim", invariants.CONFIG_APPLIED),
        # A restarted driver's health reports leave out the devices of the claims it found prepared.
        ("health-lost-after-restart", invariants.HEALTH_KEPT),
    ],
)
def test_a_planted_bug_is_found_and_shrunk_to_a_short_sequence(bug: str, obligation: str | set[str]) -> None:
    done = run(FakeNode(bugs=frozenset({bug}), rolling=True), budget=LONG_SHRINK)
    assert done.finding is not None, render(done, "replay")
    expected = obligation if isinstance(obligation, set) else {obligation}
    assert done.finding.violation.obligation in expected, render(done, "replay")
    assert done.finding.shrunk
    assert len(done.finding.steps) <= SHRUNK_STEPS.get(bug, 5), render(done, "replay")


def test_the_seed_reproduces_the_same_finding_and_steps() -> None:
    first, again = (run(FakeNode(bugs=frozenset({"unprepare-only-first"})), seed=11) for _ in range(2))
    assert first.finding is not None and again.finding is not None
    assert again.finding.steps == first.finding.steps
    assert (again.examples, again.steps) == (first.examples, first.steps)


def test_shrunk_sequence_is_reported_readably_with_the_seed_and_the_replay_command() -> None:
    done = run(FakeNode(bugs=frozenset({"unprepare-only-first"})), seed=3)
    text = "\n".join(render(done, "dra-conformance explore --replay 3"))
    assert done.finding is not None, text
    assert f"finding: {done.finding.violation.obligation} broken at claim c" in text, text
    assert "sequence (shrunk" in text and "seed 3" in text, text
    assert "  1. create c1" in text, text
    assert text.endswith("reproduce: dra-conformance explore --replay 3"), text


def test_a_defensive_finding_outside_strict_is_an_advisory_and_the_exploration_goes_on() -> None:
    # No republish: after a reset, a republish reaches a generation seen before with other devices (a finding).
    done = run(FakeNode(bugs=frozenset({"generation-reset"}), republishing=False), fails=contract_only)
    assert done.finding is None, render(done, "replay")
    assert [v.obligation for v in done.advisories] == [invariants.POOL_GENERATION]
    strict_run = run(FakeNode(bugs=frozenset({"generation-reset"}), republishing=False))
    assert strict_run.finding is not None and strict_run.finding.violation.obligation == invariants.POOL_GENERATION


def test_refusing_a_device_another_claim_still_holds_is_no_finding() -> None:
    # Not a bug: a variant the contract allows (the kubelet retries once it unprepared the claim that had it).
    node = FakeNode(bugs=frozenset({"refuse-held"}))
    answered = node.prepare
    refusals: list[str] = []

    def prepare(claims: Sequence[ClaimRef]) -> PrepareOutcome:
        outcome = answered(claims)
        refusals.extend(uid for uid, answer in outcome.claims.items() if answer.error)
        return outcome

    node.prepare = prepare  # type: ignore[method-assign]
    done = run(node, seed=5, budget=Budget(max_examples=300, max_steps=12, seconds=None))
    assert done.finding is None and not done.advisories, render(done, "replay")
    assert refusals, "the exploration never met a device still held"


def test_losing_state_across_a_restart_is_found_by_what_the_unprepare_leaves() -> None:
    done = run(FakeNode(bugs=frozenset({"loses-state"})), fails=contract_only)
    assert done.finding is None, render(done, "replay")
    assert invariants.CDI_REMOVED_AFTER_RESTART in {v.obligation for v in done.advisories}, render(done, "replay")


def test_a_harness_problem_ends_the_exploration_as_the_suites_problem() -> None:
    done = run(FakeNode(fail_creating_after=3))
    assert done.finding is None
    assert done.harness == "pod claim-x not bound to a node within 60 s"


def test_the_time_budget_ends_the_drawing_of_examples() -> None:
    clock = FakeClock(tick=1.0)
    done = explore(FakeNode(), Budget(max_examples=1000, max_steps=5, seconds=50.0), 1, strict, clock, clock.sleep)
    assert done.budget_spent and done.finding is None
    assert done.examples < 1000


def test_a_finding_whose_shrinking_runs_out_of_time_is_the_shortest_failing_sequence_seen() -> None:
    clock = FakeClock(tick=0.01)
    budget = Budget(max_examples=300, max_steps=12, seconds=None, shrink_seconds=30.0)
    done = explore(FakeNode(bugs=frozenset({"unprepare-only-first"})), budget, 1, strict, clock, clock.sleep)
    assert done.finding is not None and done.budget_spent
    assert not done.finding.shrunk and not done.finding.flaky
    assert "the shrinking budget ended before Hypothesis finished" in "\n".join(render(done, "replay"))


def test_status_entries_left_after_an_unprepare_are_judged_once_settled_even_in_a_short_example() -> None:
    clock = FakeClock()
    done = explore(FakeNode(bugs=frozenset({"status-kept"})), QUICK, 5, strict, clock, clock.sleep)
    assert done.finding is not None, render(done, "replay")
    assert done.finding.violation.obligation == invariants.STATUS_REMOVED
    assert "unprepare" in done.finding.steps[-1], done.finding.steps
    advisory = explore(FakeNode(bugs=frozenset({"status-kept"})), QUICK, 5, contract_only, clock, clock.sleep)
    assert advisory.finding is None and [v.obligation for v in advisory.advisories] == [invariants.STATUS_REMOVED]


def test_a_checkpoint_that_concurrent_calls_overwrite_is_found_by_an_unprepare_after_a_restart() -> None:
    done = run(
        FakeNode(bugs=frozenset({"loses-entries"})), seed=4, budget=Budget(max_examples=400, max_steps=12, seconds=None)
    )
    assert done.finding is not None, render(done, "replay")
    # The lost entry's unprepare after the restart leaves its CDI spec and its status entries.
    left = {invariants.CDI_REMOVED_AFTER_RESTART, invariants.STATUS_REMOVED}
    assert done.finding.violation.obligation in left, render(done, "replay")
    steps = "\n".join(done.finding.steps)
    assert "at once: prepare" in steps and "restart the driver" in steps, steps
    assert done.shrink_examples > 0 and done.shrink_steps > 0, render(done, "replay")
    text = "\n".join(render(done, "replay"))
    assert f"shrinking ran {done.shrink_examples} examples, {done.shrink_steps} steps" in text, text


DEFAULT_STEPS = Budget(max_examples=200, max_steps=DEFAULT_MAX_STEPS, seconds=None, shrink_seconds=60.0)


@pytest.mark.parametrize("seed", [4, 7])
def test_concurrent_changes_a_checkpoint_lost_are_found_within_a_few_examples(seed: int) -> None:
    # Issue 43: on a cluster a few dozen examples fit the default budget (examples of up to DEFAULT_MAX_STEPS);
    # changes made at once, then a restart while pods end (the kubelet unprepares their claims once the driver is
    # back), one operation, show the lost entry in fewer.
    done = run(FakeNode(bugs=frozenset({"loses-entries"})), seed=seed, budget=DEFAULT_STEPS)
    assert done.finding is not None, render(done, "replay")
    assert done.finding.found_after[0] <= 30, render(done, "replay")
    assert done.finding.violation.obligation in {invariants.CDI_REMOVED_AFTER_RESTART, invariants.STATUS_REMOVED}
    assert any(step.startswith("at once: prepare") for step in done.finding.steps), done.finding.steps


def test_a_restart_while_pods_end_unprepares_claims_prepared_before_it_once_the_driver_is_back() -> None:
    done = run(FakeNode(bugs=frozenset({"loses-state"})), seed=2, budget=LONG_SHRINK)
    assert done.finding is not None and done.finding.shrunk, render(done, "replay")
    left = {invariants.CDI_REMOVED_AFTER_RESTART, invariants.STATUS_REMOVED}
    assert done.finding.violation.obligation in left, render(done, "replay")
    steps = done.finding.steps
    # The unprepare once the driver is back: of its own, or the one of a restart while pods end.
    assert len(steps) <= 5 and steps[-1].startswith(("unprepare after the restart ['c1']", "unprepare ['c1']")), steps
    assert steps[-2].startswith("restart the driver (SIG"), steps


def test_an_operation_the_profile_rules_out_is_never_drawn_and_the_run_says_why() -> None:
    done = run(FakeNode(republishing=False, rolling=True))
    assert "republish" not in done.operations, done.operations
    assert done.not_explored == {"republish": "the profile declares no way"}
    assert "not explored: republish: the profile declares no way" in render(done, "replay")


def test_claims_mixing_two_drivers_are_drawn_where_another_driver_runs_and_its_entries_are_found() -> None:
    done = run(FakeNode(others=2))
    assert done.finding is None, render(done, "replay")
    assert any("o" in shape for shape in done.shapes), done.shapes
    assert invariants.STATUS_OTHER_DRIVER in done.exercised
    broken = run(FakeNode(others=2, bugs=frozenset({"status-for-other-driver"})))
    assert broken.finding is not None, render(broken, "replay")
    assert broken.finding.violation.obligation == invariants.STATUS_OTHER_DRIVER, render(broken, "replay")
    assert len(broken.finding.steps) <= 3 and "of the other driver" in broken.finding.steps[0], broken.finding.steps


def test_a_reboot_wipes_the_cdi_dir_restarts_the_driver_and_prepares_its_live_claims_again() -> None:
    done = run(FakeNode(bugs=frozenset({"replayed-prepare-skips-cdi-specs"})), seed=1)
    assert done.finding is not None and done.finding.shrunk, render(done, "replay")
    steps = done.finding.steps
    assert len(steps) <= SHRUNK_STEPS["replayed-prepare-skips-cdi-specs"], steps
    assert steps[-2].startswith("reboot the node: wipe the CDI dir ("), steps
    assert steps[-2].split(", ")[1].startswith("restart the driver (SIG"), steps
    assert steps[-1].startswith("prepare after the reboot ['c1'") and steps[-1].endswith("-> ok"), steps
    assert "not defined by any spec file" in done.finding.violation.observed, done.finding.violation


def test_a_status_write_after_the_unprepare_is_found_at_the_end_of_the_example_that_made_it() -> None:
    done = run(FakeNode(bugs=frozenset({"rewrites-status"})), seed=3, budget=LONG_SHRINK)
    assert done.finding is not None, render(done, "replay")
    assert done.finding.violation.obligation == invariants.STATUS_WRITE_AFTER_UNPREPARE, render(done, "replay")
    steps = done.finding.steps
    # The unprepare is one of its own or the one after a restart while pods end (two steps, one operation; three
    # where changes made at once came first).
    assert len(steps) <= 5 and steps[-1].startswith(("unprepare ['c1']", "unprepare after the restart ['c1'")), steps
    assert "wrote its status.devices entries 1 time(s)" in done.finding.violation.observed, done.finding.violation
    # The end of an example waits for the window only where a claim it unprepared still exists.
    correct = run(FakeNode(), seed=3)
    assert correct.finding is None and invariants.STATUS_WRITE_AFTER_UNPREPARE in correct.exercised, render(
        correct, "replay"
    )


def test_a_rewrite_of_the_in_memory_node_is_refused_once_the_claim_is_gone() -> None:
    # What the planted bug does when the claim was deleted before the rewrite was due: the API server refuses it.
    node = FakeNode(bugs=frozenset({"rewrites-status"}))
    ref = node.create_claim(ClaimShape((RequestShape(1),))).ref
    node.prepare([ref])
    node.unprepare([ref])
    mark = node.status_mark(ref)
    node.delete_claim(ref, True)
    node.clock.sleep(REWRITE_DELAY)
    assert mark == 1 and node.status_writes(ref)[mark:] == (), node.writes


def test_a_rolling_update_is_drawn_only_where_the_profile_declares_it() -> None:
    done = run(FakeNode(rolling=False))
    assert "rolling update" not in done.operations, done.operations
    assert "not explored: rolling update: the profile declares no rollingUpdate" in render(done, "replay")
    broken = run(FakeNode(bugs=frozenset({"shares-socket"}), rolling=True))
    assert broken.finding is not None and broken.finding.steps[-1].startswith("rolling update"), render(
        broken, "replay"
    )
    assert "the new instance registered under no socket name of its own" in broken.finding.violation.observed


def test_missing_declared_status_entries_are_judged_once_due_and_only_where_the_profile_declares_them() -> None:
    done = run(FakeNode(bugs=frozenset({"omits-status"})), seed=3)
    assert done.finding is not None, render(done, "replay")
    assert done.finding.violation.obligation == invariants.STATUS_WRITTEN, render(done, "replay")
    # Waited for until due, on the fake clock: the prepare is the last step, and the finding says how old it was.
    assert done.finding.steps[-1].startswith(("prepare", "at once: prepare")), done.finding.steps
    assert f"prepared {invariants.STATUS_WRITTEN_SECONDS:.1f}s ago" in done.finding.violation.observed, done.finding
    undeclared = run(FakeNode(bugs=frozenset({"omits-status"}), declares_status=False), seed=3)
    assert undeclared.finding is None, render(undeclared, "replay")
    assert invariants.STATUS_WRITTEN not in undeclared.exercised


def test_registration_and_slice_nodes_are_read_once_per_example_and_after_restarts_and_republishes() -> None:
    node = FakeNode()
    calls: list[str] = []
    registered, unbound = node.registered_name, node.unbound_slices

    def name() -> str:
        calls.append("GetInfo")
        return registered()

    def slices() -> dict[str, str]:
        calls.append("slices")
        return unbound()

    node.registered_name = name  # type: ignore[method-assign]
    node.unbound_slices = slices  # type: ignore[method-assign]
    done = run(node, seed=5)
    assert done.finding is None, render(done, "replay")
    assert {invariants.REGISTRATION_NAME, invariants.SLICES_ON_NODES} <= set(done.exercised)
    restarts = sum(count for op, count in done.operations.items() if op.startswith(("restart", "reboot")))
    assert calls.count("GetInfo") <= done.examples + restarts + done.operations.get("republish", 0)
    assert calls.count("GetInfo") < done.invariant_checks, (calls.count("GetInfo"), done.invariant_checks)


def test_a_device_failure_that_outlives_a_restart_is_no_finding() -> None:
    done = run(FakeNode(bugs=frozenset({"failure-outlives-restart"})), seed=5)
    assert done.finding is None and not done.advisories, render(done, "replay")
    assert done.operations["make a device unhealthy"] and done.operations["restart driver (SIGKILL)"], done.operations


def test_health_hooks_are_drawn_only_where_the_profile_declares_them() -> None:
    done = run(FakeNode(hooks=False))
    assert done.finding is None, render(done, "replay")
    assert not {"make a device unhealthy", "make a device healthy again"} & set(done.operations)
    assert invariants.HOOKED_UNHEALTHY not in done.exercised


def test_claims_with_opaque_config_are_drawn_only_where_the_profile_declares_it() -> None:
    done = run(FakeNode(configs=False))
    assert done.finding is None, render(done, "replay")
    assert not any("k" in shape or " c" in shape for shape in done.shapes), done.shapes
    assert invariants.CONFIG_APPLIED not in done.exercised
    configured = run(FakeNode())
    assert any("k" in shape for shape in configured.shapes) and any(" c" in shape for shape in configured.shapes)
    assert invariants.CONFIG_APPLIED in configured.exercised
