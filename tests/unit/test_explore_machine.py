"""The explorer's state machine and runner against an in-memory node (no cluster).

It finds planted bugs, shrinks them to a short sequence, reproduces them from the seed, and finds nothing in a correct
driver.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from dra_conformance.explore import invariants
from dra_conformance.explore.model import AllocatedDevice, ClaimShape
from dra_conformance.explore.runner import Budget, Exploration, explore, render
from dra_conformance.explore.world import (
    SIGKILL,
    SIGTERM,
    CreatedClaim,
    DriverDidNotComeBack,
    HarnessProblem,
    Observation,
    PoolView,
    PrepareOutcome,
    UnprepareOutcome,
)
from dra_conformance.kubelet.client import ClaimAnswer, ClaimRef

DRIVER = "gpu.example.com"
NODE = "node-a"
DEVICES = 6
# Small budgets: the in-memory node answers in microseconds, so examples, not seconds, bound these runs.
QUICK = Budget(max_examples=200, max_steps=12, seconds=None, shrink_seconds=60.0)


@dataclass
class Allocation:
    ref: ClaimRef
    results: tuple[AllocatedDevice, ...]


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

    def create_claim(self, shape: ClaimShape) -> CreatedClaim:
        self.created += 1
        if self.fail_creating_after is not None and self.created > self.fail_creating_after:
            raise HarnessProblem("pod claim-x not bound to a node within 60 s")
        held = {d.device for a in self.claims.values() for d in a.results if not d.admin}
        free = [f"gpu-{i}" for i in range(DEVICES) if f"gpu-{i}" not in held]
        # As the scheduler's allocator: distinct devices within a claim, free ones for requests without admin access
        # (it backtracks until both fit; here requests with admin access simply go last).
        results: list[AllocatedDevice] = []
        ordered = sorted(zip(shape.names, shape.requests, strict=True), key=lambda item: item[1].admin)
        for name, request in ordered:
            mine = {r.device for r in results}
            pool = [f"gpu-{i}" for i in range(DEVICES)] if request.admin else free
            taken = [d for d in pool if d not in mine][: request.count]
            assert len(taken) == request.count, (shape, free)
            results += [AllocatedDevice(name, NODE, device, request.admin) for device in taken]
        uid = f"uid-{next(self._uids)}"
        ref = ClaimRef("ns", uid, f"claim-{uid}")
        self.claims[uid] = self.allocations[uid] = Allocation(ref, tuple(sorted(results)))
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
            if allocation is None:
                answers[ref.uid] = ClaimAnswer(error="no such claim")
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
            if ref.uid not in self.prepared:
                devices = self._answer(allocation)
                self.prepared[ref.uid] = devices
                spec = {
                    "kind": "example.com/gpu",
                    "devices": [{"name": d["cdiDeviceIDs"][0].split("=")[1]} for d in devices],
                }
                self.files[f"{ref.uid}.json"] = json.dumps(spec)
                self.statuses[ref.uid] = [
                    {"driver": DRIVER, "pool": NODE, "device": d.device} for d in allocation.results
                ]
            answers[ref.uid] = ClaimAnswer(devices=list(self.prepared[ref.uid]))
        if "batch-answers-swapped" in self.bugs and len(claims) > 1:
            uids = [c.uid for c in claims]
            answers = {uid: answers[uids[(index + 1) % len(uids)]] for index, uid in enumerate(uids)}
        return PrepareOutcome(answers)

    def unprepare(self, claims: Sequence[ClaimRef]) -> UnprepareOutcome:
        for position, ref in enumerate(claims):
            if position > 0 and "unprepare-only-first" in self.bugs:
                continue
            if ref.uid in self.prepared:
                del self.prepared[ref.uid]
                self.files.pop(f"{ref.uid}.json", None)
                if "status-kept" not in self.bugs:
                    self.statuses.pop(ref.uid, None)
        return UnprepareOutcome({ref.uid: "" for ref in claims})

    def restart(self, how: str) -> None:
        if "never-back" in self.bugs:
            raise DriverDidNotComeBack(f"no complete pool within 60 s after {how}")
        if "loses-state" in self.bugs:
            self.prepared.clear()
        # The bug: on restart the driver republishes from generation 1 (here: every second restart).
        self.generation = 1 if "generation-reset" in self.bugs and self.generation > 1 else self.generation + 1

    def wipe_cdi(self) -> int:
        count = len(self.files)
        self.files.clear()
        return count

    def delete_claim(self, claim: ClaimRef, force: bool) -> None:
        self.claims.pop(claim.uid, None)
        self.statuses.pop(claim.uid, None)

    def observe(self) -> Observation:
        pool = PoolView(self.generation, 1, 1, tuple(f"gpu-{i}" for i in range(DEVICES)))
        statuses = {uid: list(self.statuses.get(uid, [])) for uid in self.claims}
        return Observation(dict(self.files), statuses, {NODE: pool})

    def reset(self, prepared: Sequence[ClaimRef]) -> None:
        self.unprepare(list(prepared)[:1])
        for ref in list(prepared)[1:]:
            self.unprepare([ref])
        self.claims.clear()
        self.statuses.clear()


def contract_only(obligation: str) -> bool:
    return obligation not in DEFENSIVE


DEFENSIVE = {
    invariants.EVERY_ALLOCATED,
    invariants.REPEATED_IDENTICAL,
    invariants.CDI_REMOVED_AFTER_RESTART,
    invariants.STATUS_REMOVED,
    invariants.POOL_GENERATION,
}


def strict(_obligation: str) -> bool:
    return True


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


def run(node: FakeNode, seed: int = 7, budget: Budget = QUICK, fails: Any = strict) -> Exploration:
    clock = FakeClock()
    return explore(node, budget, seed, fails, clock, clock.sleep)


def test_a_correct_driver_gives_no_finding_and_the_run_covers_every_operation() -> None:
    done = run(FakeNode())
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
    }, done.operations
    assert any("a" in shape for shape in done.shapes) and any("+" in shape for shape in done.shapes), done.shapes
    assert {invariants.CDI_RESOLVES, invariants.REQUEST_NAMES, invariants.POOL_COMPLETE} <= set(done.exercised)
    assert done.examples >= QUICK.max_examples


@pytest.mark.parametrize(
    ("bug", "obligation"),
    [
        ("unprepare-only-first", invariants.CDI_REMOVED),
        ("batch-answers-swapped", invariants.ONLY_ALLOCATED),
        ("first-request-name", invariants.REQUEST_NAMES),
        ("never-back", invariants.COMES_BACK),
    ],
)
def test_a_planted_bug_is_found_and_shrunk_to_a_short_sequence(bug: str, obligation: str) -> None:
    done = run(FakeNode(bugs=frozenset({bug})))
    assert done.finding is not None, render(done, "replay")
    assert done.finding.violation.obligation == obligation, render(done, "replay")
    assert done.finding.shrunk
    assert len(done.finding.steps) <= 5, render(done, "replay")


def test_the_seed_reproduces_the_same_finding_and_steps() -> None:
    first, again = (run(FakeNode(bugs=frozenset({"unprepare-only-first"})), seed=11) for _ in range(2))
    assert first.finding is not None and again.finding is not None
    assert again.finding.steps == first.finding.steps
    assert (again.examples, again.steps) == (first.examples, first.steps)


def test_shrunk_sequence_is_reported_readably_with_the_seed_and_the_replay_command() -> None:
    done = run(FakeNode(bugs=frozenset({"unprepare-only-first"})), seed=3)
    text = "\n".join(render(done, "dra-conformance explore --replay 3"))
    assert "finding: explore.unprepare-removes-the-claims-cdi-specs broken at claim c" in text, text
    assert "sequence (shrunk" in text and "seed 3" in text, text
    assert "  1. create c1" in text, text
    assert text.endswith("reproduce: dra-conformance explore --replay 3"), text


def test_a_defensive_finding_outside_strict_is_an_advisory_and_the_exploration_goes_on() -> None:
    done = run(FakeNode(bugs=frozenset({"generation-reset"})), fails=contract_only)
    assert done.finding is None, render(done, "replay")
    assert [v.obligation for v in done.advisories] == [invariants.POOL_GENERATION]
    strict_run = run(FakeNode(bugs=frozenset({"generation-reset"})))
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
    done = run(node, seed=1, budget=Budget(max_examples=300, max_steps=12, seconds=None))
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
    assert done.finding.steps[-1].startswith("unprepare"), done.finding.steps
    advisory = explore(FakeNode(bugs=frozenset({"status-kept"})), QUICK, 5, contract_only, clock, clock.sleep)
    assert advisory.finding is None and [v.obligation for v in advisory.advisories] == [invariants.STATUS_REMOVED]
