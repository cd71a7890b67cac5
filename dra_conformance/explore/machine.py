"""The rule-based state machine: random operations on a `World`, the model kept in step, invariants after each step.

Hypothesis draws the operations (one `step` rule drawing from `OPERATIONS`; one that cannot run in the state is
skipped), runs them against the world, and calls the `invariant` after each one. A broken obligation that fails the
check raises `BrokenObligation`, which Hypothesis shrinks to the shortest sequence that still raises it; one that
does not (defensive, outside strict) is kept as an advisory and the exploration goes on. Each machine is one
example; `RunState` carries what the whole run learned across them, and `StopExploring` ends the run.

The steps are written down as they run, with the example's own claim labels (c1, c2, ...), so the sequence Hypothesis
replays last (the shrunk one) reads the same as any other.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from dra_conformance.explore.invariants import (
    COMES_BACK,
    HOOKED_UNHEALTHY,
    NOT_FAILED_NOT_UNHEALTHY,
    STATUS_PER_DEVICE,
    STATUS_REMOVED,
    STATUS_WRITE_AFTER_UNPREPARE,
    STATUS_WRITTEN,
    Checks,
    Violation,
    check_health,
    check_hooked_health,
    check_not_for_this_node,
    check_prepare,
    check_registration,
    check_republish,
    check_restart,
    check_rollout,
    check_slice_nodes,
    check_state,
    check_status_writes,
    check_unprepare,
    health_settled,
    remember_pools,
    status_settles_at,
    status_watch_ends_at,
    status_written_at,
)
from dra_conformance.explore.model import (
    MAX_DEVICES_PER_REQUEST,
    MAX_REQUESTS,
    AnsweredDevice,
    ClaimConfig,
    ClaimShape,
    ClaimState,
    Model,
    RequestShape,
)
from dra_conformance.explore.world import (
    DELETED_CLAIM,
    OTHER_NODES_CLAIM,
    PREPARE,
    UNKNOWN_CLAIM,
    UNPREPARE,
    DriverDidNotComeBack,
    HarnessProblem,
    Observation,
    PrepareOutcome,
    StatusWrite,
    UnprepareOutcome,
    World,
)
from dra_conformance.kubelet.client import ClaimRef

T = TypeVar("T")

# How often the status.devices an unprepare left are looked at again, until they can be judged.
STATUS_POLL_SECONDS = 0.5
# Claims one prepare or unprepare names at most (a pod with several claims of one driver is one batched call).
MAX_BATCH = 3
# Claims that exist at once in one example: enough for batches and for claims in every state, and a bound on what
# an example costs on a cluster (each claim is a pod the scheduler binds, deleted again between examples).
MAX_LIVE_CLAIMS = 4
# Calls in flight at once, and claims each of them names at most (every claim in one call only).
MAX_CONCURRENT_CALLS = 3
MAX_CONCURRENT_BATCH = 2
# Prepares of a claim not for this node in one example at most: each kind answers the same whatever came before, so
# more of them would only crowd out the sequences that need many steps (a restart after concurrent changes).
MAX_NOT_OWNED_PREPARES = 2
# Opaque config entries of one claim at most: two give an order between them (the last one applying wins).
MAX_CLAIM_CONFIGS = 2
# Devices the health hooks fail at once at most (and always one device fewer than the node has): each is one the
# scheduler may no longer allocate, where the driver taints it.
MAX_FAILED_DEVICES = 2


class StopExploring(BaseException):
    """The run is over (its budget spent, or the suite cannot go on): raised through Hypothesis, which stops at once.

    A BaseException, not an Exception: Hypothesis takes an Exception for a failure to shrink. Where the example
    stopped at a point an earlier one went past, Hypothesis reports inconsistent data generation instead (Flaky):
    `RunState.stop_raised` tells the runner that was this stop.
    """


class BrokenObligation(AssertionError):
    """An obligation that fails the check did not hold: what Hypothesis shrinks."""

    def __init__(self, violation: Violation) -> None:
        """The broken obligation, what was observed and where."""
        super().__init__(violation.describe())
        self.violation = violation


@dataclass(frozen=True)
class Failure:
    """A finding as one example met it: the broken obligation and the steps up to it."""

    violation: Violation
    steps: tuple[str, ...]
    example: int
    # Raised while Hypothesis replayed its shrunk example for the last time.
    final: bool
    # Operations the run had made, and the clock, when it was met.
    steps_before: int
    at: float


@dataclass
class RunState:
    """What one exploration learns across its examples, and when it must stop."""

    # Whether a broken obligation (by id) fails the check: contract ones, and defensive ones under strict.
    fails: Callable[[str], bool]
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    # When new examples stop being explored (clock seconds); None: never, only the example count ends the run.
    explore_until: float | None
    # How long shrinking may go on after the first finding.
    shrink_seconds: float
    # Operations one example runs at most.
    max_steps: int
    examples: int = 0
    steps: int = 0
    # Of those, the examples and steps that ran while shrinking the first finding.
    shrink_examples: int = 0
    shrink_steps: int = 0
    # Obligations stated after the steps (each a verdict on one claim, pool or call) and invariant checks run.
    stated: int = 0
    invariant_checks: int = 0
    operations: Counter[str] = field(default_factory=Counter)
    shapes: Counter[str] = field(default_factory=Counter)
    exercised: set[str] = field(default_factory=set)
    # The first violation of each obligation that does not fail the check.
    advisories: dict[str, Violation] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    # Why the suite could not go on (a HarnessProblem), once it happened.
    harness: str | None = None
    budget_spent: bool = False
    # StopExploring was raised: the run is over, whatever Hypothesis makes of it.
    stop_raised: bool = False
    # The steps of the example running now.
    log: list[str] = field(default_factory=list)
    final: bool = False
    # When shrinking stops (clock seconds), once the first finding set it.
    shrink_until: float | None = None

    def stopped(self) -> bool:
        """Whether no further example (or shrink attempt) should run: a harness problem, or the budget spent."""
        if self.harness is not None:
            return True
        until = self.shrink_until if self.failures else self.explore_until
        spent = until is not None and self.clock() >= until
        self.budget_spent = self.budget_spent or spent
        return spent

    @property
    def target(self) -> str | None:
        """The obligation shrinking is after: the first finding's (None until there is one)."""
        return self.failures[0].violation.obligation if self.failures else None

    def begin(self, final: bool) -> None:
        """A new example (a new machine) starts."""
        self.examples += 1
        self.shrink_examples += 1 if self.failures else 0
        self.final = final
        self.log = []

    def found(self, violation: Violation) -> None:
        """`violation` fails the check: remember it with the steps that led to it."""
        if not self.failures:
            self.shrink_until = self.clock() + self.shrink_seconds
        now = self.clock()
        self.failures.append(Failure(violation, tuple(self.log), self.examples, self.final, self.steps, now))


def claim_shapes(
    free: int, capacity: int, admin: bool, other_free: int = 0, samples: int = 0
) -> st.SearchStrategy[ClaimShape]:
    """Shapes that fit the node: requests held for the claim fit `free` devices, and all of them `capacity`.

    Where the other driver has `other_free` devices, a request after the first may be for them (the first is the
    driver under test's: a claim with none of its devices is never prepared by it). Where the profile declares
    `samples` opaque config samples, a request's DeviceClass may carry one, and the claim config entries of its own.
    """
    class_config = st.one_of(st.none(), st.integers(0, max(0, samples - 1)))

    @st.composite
    def shapes(draw: st.DrawFn) -> ClaimShape:
        requests: list[RequestShape] = []
        held = total = others = 0
        for index in range(draw(st.integers(1, MAX_REQUESTS), label="requests")):
            if index > 0 and other_free - others > 0 and draw(st.booleans(), label="other driver"):
                count = draw(st.integers(1, min(MAX_DEVICES_PER_REQUEST, other_free - others)), label="devices")
                requests.append(RequestShape(count, other=True))
                others += count
                continue
            # Admin access where the profile declares it; where no device is free, only admin access fits.
            with_admin = admin and (free - held < 1 or draw(st.booleans(), label="admin access"))
            room = capacity - total if with_admin else min(free - held, capacity - total)
            if room < 1:
                break
            count = draw(st.integers(1, min(MAX_DEVICES_PER_REQUEST, room)), label="devices")
            configured = draw(class_config, label="class config") if samples else None
            requests.append(RequestShape(count, with_admin, class_config=configured))
            total += count
            held += 0 if with_admin else count
        names = [name for name, r in zip(ClaimShape(tuple(requests)).names, requests, strict=True) if not r.other]
        configs = draw(claim_configs(samples, names), label="claim configs") if samples and names else ()
        return ClaimShape(tuple(requests), configs)

    return shapes()


def claim_configs(samples: int, requests: Sequence[str]) -> st.SearchStrategy[tuple[ClaimConfig, ...]]:
    """0 to MAX_CLAIM_CONFIGS opaque config entries of one of `samples`, for every request or one of `requests`."""
    entry = st.builds(
        ClaimConfig,
        st.integers(0, samples - 1),
        st.one_of(st.just(()), st.sampled_from(requests).map(lambda name: (name,))),
    )
    return st.lists(entry, max_size=MAX_CLAIM_CONFIGS).map(tuple)


def _some(claims: Sequence[ClaimState], batch: int = MAX_BATCH) -> st.SearchStrategy[list[ClaimState]]:
    """1 to `batch` distinct claims of `claims` in a drawn order; shrinking goes towards one claim, the first.

    The size is drawn first, so batches are as likely as single claims (a list strategy alone mostly draws one).
    """
    most = max(1, min(batch, len(claims)))
    indices = st.integers(1, most).flatmap(
        lambda size: st.lists(st.integers(0, len(claims) - 1), min_size=size, max_size=size, unique=True)
    )
    return indices.map(lambda chosen: [claims[index] for index in chosen])


def _is_final() -> bool:
    """Whether Hypothesis is replaying its shrunk failing example for the last time (it must run, budget or not)."""
    return bool(current_build_context().is_final)


def _call(count: int) -> str:
    return "1 claim" if count == 1 else f"batch of {count}"


class ExploreMachine(RuleBasedStateMachine):
    """One example: a fresh model of the node, then the operations Hypothesis draws (see the module docstring)."""

    world: ClassVar[World]
    run: ClassVar[RunState]

    def __init__(self) -> None:
        """Start an example with nothing created on the node."""
        super().__init__()
        self.final = _is_final()
        self.run.begin(self.final)
        world = self.world
        self.model = Model(
            world.node,
            world.driver,
            world.capacity(),
            world.other_capacity(),
            world.other_driver(),
            status_devices=world.status_devices(),
            declared_attributes=world.declared_attributes(),
            config_effects=world.config_effects(),
        )
        self.operations = 0
        self.not_owned_prepares = 0
        # A step ended the example early (a finding, the budget, a harness problem): its teardown only resets.
        self.interrupted = False

    # --- helpers ------------------------------------------------------------------------------------------------

    def _go_on(self) -> None:
        """End the whole run once its budget is spent, unless this is Hypothesis's final replay of a finding."""
        if not self.final and self.run.stopped():
            self.run.stop_raised = self.interrupted = True
            raise StopExploring

    def _act(self, operation: Callable[[], T]) -> T:
        try:
            return operation()
        except HarnessProblem as problem:
            self.run.harness = self.run.harness or str(problem)
            self.run.stop_raised = self.interrupted = True
            raise StopExploring from None

    def _status_mark(self, ref: ClaimRef) -> int | None:
        return self._act(lambda: self.world.status_mark(ref))

    def _status_writes(self, ref: ClaimRef) -> tuple[StatusWrite, ...]:
        return self._act(lambda: self.world.status_writes(ref))

    def _step(self, operation: str, text: str) -> None:
        self.run.steps += 1
        self.run.shrink_steps += 1 if self.run.failures else 0
        self.run.operations[operation] += 1
        self.run.log.append(text)

    def _judge(self, checks: Checks) -> None:
        """Raise the first violation that fails the check; keep the others as advisories.

        Once there is a finding, only its obligation counts: shrinking looks for the shortest sequence that breaks
        that one, and does not slip to another that a shorter sequence happens to break.
        """
        self.run.exercised |= checks.exercised
        self.run.stated += checks.stated
        target = self.run.target
        for violation in checks.violations:
            if target is not None and violation.obligation != target:
                continue
            if self.run.fails(violation.obligation):
                self.run.found(violation)
                self.interrupted = True
                raise BrokenObligation(violation)
            self.run.advisories.setdefault(violation.obligation, violation)

    def _prepare(self, claims: list[ClaimState], call: str) -> None:
        outcome = self._act(lambda: self.world.prepare([c.ref for c in claims]))
        checks = Checks()
        succeeded = check_prepare(self.model, claims, outcome, call, checks)
        for claim in claims:
            if claim.ref.uid in succeeded:
                self.model.prepared_ok(claim, succeeded[claim.ref.uid], self.run.clock())
        self._step(f"{call} ({_call(len(claims))})", f"{call} {[c.label for c in claims]} -> {outcome.describe()}")
        self._judge(checks)

    # --- operations ---------------------------------------------------------------------------------------------

    def can_create(self) -> bool:
        """Room for another claim: fewer than MAX_LIVE_CLAIMS, and a free device (or admin access, which needs none)."""
        return len(self.model.live()) < MAX_LIVE_CLAIMS and (self.model.free_devices() > 0 or self.world.admin_access())

    def create_claim(self, data: st.DataObject) -> None:
        """A claim of a random shape, allocated on the node by the scheduler for a pod that uses it."""
        free, others = self.model.free_devices(), self.model.free_other_devices()
        samples = len(self.model.config_effects)
        shape = data.draw(claim_shapes(free, self.model.usable_capacity(), self.world.admin_access(), others, samples))
        created = self._act(lambda: self.world.create_claim(shape))
        claim = self.model.add(created.ref, shape, created.allocated)
        self.run.shapes[shape.label()] += 1
        devices = ", ".join(f"{d.device} ({d.request}{', admin' if d.admin else ''})" for d in created.allocated)
        self._step("create claim", f"create {claim.name}: {shape.describe()} -> allocated {devices}")

    def can_prepare(self) -> bool:
        """A claim to prepare."""
        return bool(self.model.live())

    def prepare(self, data: st.DataObject) -> None:
        """NodePrepareResources for one claim or a batch (prepared ones among them or not)."""
        self._prepare(data.draw(_some(self.model.live()), label="claims"), "prepare")

    def can_prepare_again(self) -> bool:
        """A prepared claim that still exists."""
        return any(not c.deleted for c in self.model.prepared())

    def prepare_again(self, data: st.DataObject) -> None:
        """NodePrepareResources again for claims prepared already (idempotency; also across restarts and wipes)."""
        prepared = [c for c in self.model.prepared() if not c.deleted]
        self._prepare(data.draw(_some(prepared), label="claims"), "prepare again")

    def can_unprepare(self) -> bool:
        """A claim an unprepare may name."""
        return bool(self.model.unpreparable())

    def unprepare(self, data: st.DataObject) -> None:
        """NodeUnprepareResources for one claim or a batch: prepared ones, deleted ones, never or no longer prepared.

        Half the time among prepared claims only (where there are any), so that batches of prepared claims, the
        kubelet's usual call, are not left to chance.
        """
        prepared = self.model.prepared()
        only_prepared = bool(prepared) and not data.draw(st.booleans(), label="also unprepared claims")
        claims = data.draw(_some(prepared if only_prepared else self.model.unpreparable()), label="claims")
        outcome = self._act(lambda: self.world.unprepare([c.ref for c in claims]))
        checks = Checks()
        self._unprepared(claims, outcome, "unprepare", checks)
        self._step(
            f"unprepare ({_call(len(claims))})", f"unprepare {[c.label for c in claims]} -> {outcome.describe()}"
        )
        self._judge(checks)

    def _unprepared(self, claims: list[ClaimState], outcome: UnprepareOutcome, call: str, checks: Checks) -> None:
        done = check_unprepare(self.model, claims, outcome, call, checks)
        now = self.run.clock()
        for claim in claims:
            if claim.ref.uid in done:
                # Where the claim's status writes stood when the driver answered: any later one follows the unprepare.
                mark = self._status_mark(claim.ref) if claim.prepared else None
                self.model.unprepared_ok(claim, now, mark)

    def can_call_concurrently(self) -> bool:
        """Two claims for calls of their own, one of which still exists (a prepare names only those)."""
        return len(self.model.unpreparable()) >= 2 and bool(self.model.live())

    def call_concurrently(self, data: st.DataObject) -> None:
        """2 to MAX_CONCURRENT_CALLS prepares and unprepares in flight at once, as the kubelet's workers for pods.

        Each claim is named by one call only, so what each call must do does not depend on which one the driver
        serves first: each is judged against the model as it was before them all, as if it ran alone.
        """
        left = self.model.unpreparable()
        calls: list[tuple[str, list[ClaimState]]] = []
        for index in range(data.draw(st.integers(2, MAX_CONCURRENT_CALLS), label="calls")):
            if not left:
                break
            live = [c for c in left if not c.deleted]
            kind = data.draw(st.sampled_from((PREPARE, UNPREPARE)), label="call")
            kind = kind if live else UNPREPARE
            choices = live if kind == PREPARE else left
            # The first call leaves a claim for the second.
            batch = min(MAX_CONCURRENT_BATCH, len(left) - 1) if index == 0 else MAX_CONCURRENT_BATCH
            claims = data.draw(_some(choices, batch), label="claims")
            calls.append((kind, claims))
            left = [c for c in left if c not in claims]
        self._concurrently(calls, "concurrent")

    def _changeable(self) -> list[ClaimState]:
        """Claims a call would change: prepared ones (deleted ones too) to unprepare, then live ones to prepare."""
        prepared = self.model.prepared()
        return prepared + [c for c in self.model.live() if c not in prepared]

    def can_change_concurrently(self) -> bool:
        """Two claims a call would change: prepared ones to unprepare, or existing ones not prepared to prepare."""
        return len(self._changeable()) >= 2

    def change_concurrently(self, data: st.DataObject) -> None:
        """Pods start and end at once: 2 to MAX_CONCURRENT_CALLS claims prepared or unprepared, a call each, in flight.

        Every call changes what the driver has prepared (a claim not prepared is prepared, a prepared one
        unprepared), as the kubelet's workers for pods starting and ending on a busy node do; the driver must keep
        each change, whichever it served first (a restart shows what it kept). Among `call_concurrently`'s calls,
        most repeat what was done already (a prepare of a prepared claim, an unprepare of one that is not): there,
        calls that all change something are rare.
        """
        changeable = self._changeable()
        indices = st.integers(2, min(MAX_CONCURRENT_CALLS, len(changeable))).flatmap(
            lambda size: st.lists(st.integers(0, len(changeable) - 1), min_size=size, max_size=size, unique=True)
        )
        claims = [changeable[index] for index in data.draw(indices, label="claims")]
        self._concurrently([(UNPREPARE if c.prepared else PREPARE, [c]) for c in claims], "concurrent changes")

    def _concurrently(self, calls: list[tuple[str, list[ClaimState]]], operation: str) -> None:
        """`calls` in flight at once, each judged against the model as it was before them all."""
        outcomes = self._act(lambda: self.world.concurrently([(kind, [c.ref for c in cs]) for kind, cs in calls]))
        checks = Checks()
        answered: list[tuple[list[ClaimState], dict[str, tuple[AnsweredDevice, ...]]]] = []
        for (kind, claims), outcome in zip(calls, outcomes, strict=True):
            call = f"{kind} (concurrent)"
            if isinstance(outcome, PrepareOutcome):
                answered.append((claims, check_prepare(self.model, claims, outcome, call, checks)))
            elif isinstance(outcome, UnprepareOutcome):
                self._unprepared(claims, outcome, call, checks)
        for claims, succeeded in answered:
            for claim in claims:
                if claim.ref.uid in succeeded:
                    self.model.prepared_ok(claim, succeeded[claim.ref.uid], self.run.clock())
        described = " | ".join(
            f"{kind} {[c.label for c in claims]} -> {outcome.describe()}"
            for (kind, claims), outcome in zip(calls, outcomes, strict=True)
        )
        self._step(f"{operation} ({' + '.join(kind for kind, _ in calls)})", f"at once: {described}")
        self._judge(checks)

    def can_delete(self) -> bool:
        """A claim to delete."""
        return bool(self.model.live())

    def delete_claim(self, data: st.DataObject) -> None:
        """Delete a claim's pod (gracefully or at once) and the claim; a prepared one still awaits its unprepare."""
        live = self.model.live()
        claim = live[data.draw(st.integers(0, len(live) - 1), label="claim")]
        force = data.draw(st.booleans(), label="force")
        self._act(lambda: self.world.delete_claim(claim.ref, force))
        self.model.deleted(claim)
        how = "at once" if force else "gracefully"
        self._step(f"delete claim ({'force' if force else 'graceful'})", f"delete {claim.label} and its pod ({how})")

    def can_restart(self) -> bool:
        """The backend can restart the driver, and some claim exists (an idle driver's restart shows little)."""
        return bool(self.world.restarts()) and bool(self.model.claims)

    def _restart(self, how: str, checks: Checks) -> str:
        """Restart the driver with `how`; returns why it did not come back ("": it did)."""
        try:
            check_restart(self.model, how, self._act(lambda: self.world.restart(how)), checks)
            came_back = ""
        except DriverDidNotComeBack as error:
            came_back = str(error)
        checks.expect(COMES_BACK, not came_back, came_back, f"restart by {how} on {self.model.node}")
        self.model.restarted()
        return came_back

    def _restart_step(self, how: str, operation: str, described: str) -> None:
        """One step: restart the driver with `how`, recorded as `operation` and `described`, and judged."""
        checks = Checks()
        came_back = self._restart(how, checks)
        self._step(operation, described + (f" -> {came_back}" if came_back else ""))
        self._judge(checks)

    def restart_driver(self, data: st.DataObject) -> None:
        """Stop the driver (SIGKILL or SIGTERM, where the backend can send it) and start it again."""
        how = data.draw(st.sampled_from(self.world.restarts()), label="signal")
        self._restart_step(how, f"restart driver ({how})", f"restart the driver ({how})")

    def can_reboot(self) -> bool:
        """The CDI dir can be emptied and the driver restarted, and a prepared claim still exists (its pod runs)."""
        return (
            self.world.can_wipe() and bool(self.world.restarts()) and any(not c.deleted for c in self.model.prepared())
        )

    def reboot(self, data: st.DataObject) -> None:
        """A node reboot as the driver sees it: the CDI dir emptied, the driver restarted, its claims prepared again.

        /var/run/cdi is a tmpfs, the driver's checkpoint is not; once back, the kubelet prepares the claims of the
        pods it runs again (each prepared claim that still exists, in one call) and hands the answered CDI IDs to
        the runtime. The same steps drawn one by one (wipe, restart, prepare again, nothing between them that
        unprepares the claim) are rare in a budget of a few minutes on a cluster.
        """
        how = data.draw(st.sampled_from(self.world.restarts()), label="signal")
        removed = self._act(self.world.wipe_cdi)
        self.model.wiped()
        self._restart_step(
            how, f"reboot ({how})", f"reboot the node: wipe the CDI dir ({removed} files), restart the driver ({how})"
        )
        self._prepare([c for c in self.model.prepared() if not c.deleted], "prepare after the reboot")

    def can_restart_while_pods_end(self) -> bool:
        """The backend can restart the driver, and a claim is prepared (whose unprepare must undo its prepare)."""
        return bool(self.world.restarts()) and bool(self.model.prepared())

    def restart_while_pods_end(self, data: st.DataObject) -> None:
        """The driver restarts while pods of the node end: once it is back, the kubelet unprepares their claims.

        The kubelet retries the unprepare of a pod that ended while the driver was down until the driver registered
        again, then names the pod's claims in one call. What the driver kept of its prepares across the restart shows
        in such an unprepare only (it must undo each prepare: no CDI spec, no status entry left). The same steps
        drawn one by one (a restart, then an unprepare of claims prepared before it, nothing between them that
        prepares them again) are rare in a budget of a few minutes on a cluster; after concurrent calls, whose
        changes the driver must all have kept, they are what shows that it did.
        """
        how = data.draw(st.sampled_from(self.world.restarts()), label="signal")
        prepared = self.model.prepared()
        self._restart_while_pods_end(how, data.draw(_some(prepared, len(prepared)), label="claims"))

    def can_change_concurrently_then_restart(self) -> bool:
        """Two claims a call would change, and the backend can restart the driver."""
        return bool(self.world.restarts()) and self.can_change_concurrently()

    def change_concurrently_then_restart(self, data: st.DataObject) -> None:
        """Pods start and end at once; then the driver restarts while every pod with a prepared claim ends.

        What the driver recorded of changes made at once shows only after a restart, in the unprepare of the claims
        it prepared then (each must be undone); the two operations drawn one after the other, with nothing between
        them that prepares those claims again, are rare in a budget of a few minutes on a cluster.
        """
        self.change_concurrently(data)
        how = data.draw(st.sampled_from(self.world.restarts()), label="signal")
        if self.model.prepared():
            self._restart_while_pods_end(how, self.model.prepared())
        else:
            self._restart_step(how, f"restart driver ({how})", f"restart the driver ({how})")

    def _restart_while_pods_end(self, how: str, claims: list[ClaimState]) -> None:
        """Restart the driver with `how`, then unprepare `claims` in one call once it is back; both judged."""
        self._restart_step(
            how,
            f"restart while pods end ({how})",
            f"restart the driver ({how}) while the pods of {[c.label for c in claims]} end",
        )
        outcome = self._act(lambda: self.world.unprepare([c.ref for c in claims]))
        checks = Checks()
        call = "unprepare after the restart"
        self._unprepared(claims, outcome, call, checks)
        self._step(f"{call} ({_call(len(claims))})", f"{call} {[c.label for c in claims]} -> {outcome.describe()}")
        self._judge(checks)

    def can_roll(self) -> bool:
        """The profile declares rollingUpdate and the backend can start a second instance of the driver."""
        return self.world.can_roll()

    def roll(self, data: st.DataObject) -> None:
        """A rolling update: a new instance beside the running one (as a DaemonSet with maxSurge 1), one stopping.

        One instance serves on, with what the old one prepared: the model takes it for a restart.
        """
        del data
        checks = Checks()
        try:
            rollout = self._act(self.world.roll)
            check_rollout(self.model, rollout, checks)
            came_back, seen = "", rollout.describe()
        except DriverDidNotComeBack as error:
            came_back, seen = str(error), f"the driver did not come back: {error}"
        checks.expect(COMES_BACK, not came_back, came_back, f"rolling update on {self.model.node}")
        self.model.restarted()
        self._step("rolling update", f"rolling update: a new instance beside the old one ({seen})")
        self._judge(checks)

    def can_wipe(self) -> bool:
        """The CDI dir can be emptied from this machine, and a claim is prepared (whose specs go with it)."""
        return self.world.can_wipe() and bool(self.model.prepared())

    def wipe_cdi_dir(self, data: st.DataObject) -> None:
        """Empty the driver's CDI dir, as a node reboot empties /var/run/cdi."""
        del data
        removed = self._act(self.world.wipe_cdi)
        self.model.wiped()
        self._step("wipe CDI dir", f"wipe the CDI dir ({removed} files)")

    def can_republish(self) -> bool:
        """The profile declares a way to make the driver republish, and a claim is prepared (its devices must stay)."""
        return self.world.can_republish() and bool(self.model.prepared())

    def republish(self, data: st.DataObject) -> None:
        """Make the driver publish its pool again, with a change (as after a rescan of its devices)."""
        del data
        republished = self._act(self.world.republish)
        self.model.republishes += 1
        self.model.publishing_unchecked = True
        checks = Checks()
        check_republish(self.model, republished, checks)
        self._step("republish", f"make the driver republish ({republished.changed})")
        self._judge(checks)

    def can_prepare_not_for_this_node(self) -> bool:
        """Fewer than MAX_NOT_OWNED_PREPARES so far in the example (an unknown claim can always be named)."""
        return self.not_owned_prepares < MAX_NOT_OWNED_PREPARES

    def prepare_not_for_this_node(self, data: st.DataObject) -> None:
        """NodePrepareResources for a claim this node does not own, alone in its call.

        One the API server never had, one of the example's claims deleted since (and not prepared: a prepared one
        the driver may still answer from what it recorded), or one the scheduler allocated to another node of the
        driver. A kubelet sends none of them (its claims are those of the pods bound to its node, read from the API
        server), but a misrouted or stale call does: the driver must not report the claim prepared, set up nothing
        on the node for it, and write nothing into the other node's claim.
        """
        deleted = [c for c in self.model.claims.values() if c.deleted and not c.prepared]
        kinds = [UNKNOWN_CLAIM, *([DELETED_CLAIM] if deleted else [])]
        kinds += [OTHER_NODES_CLAIM] if self.world.can_allocate_elsewhere() else []
        kind = data.draw(st.sampled_from(kinds), label="claim not for this node")
        specs_judged = True
        if kind == DELETED_CLAIM:
            claim = deleted[data.draw(st.integers(0, len(deleted) - 1), label="claim")]
            ref, named = claim.ref, claim.name
            # Specs its last unprepare left are that unprepare's to judge, not this prepare's.
            specs_judged = claim.unprepared_at is None
        elif kind == OTHER_NODES_CLAIM:
            ref = self._act(self.world.claim_on_another_node).ref
            named = ref.name
        else:
            ref = self.world.unknown_claim(str(data.draw(st.uuids(), label="uid")))
            named = ref.name
        self.not_owned_prepares += 1
        outcome = self._act(lambda: self.world.prepare_not_owned(ref))
        work = self._act(lambda: self.world.node_local_work(ref))
        checks = Checks()
        check_not_for_this_node(self.model, kind, named, outcome, work, checks, specs_judged=specs_judged)
        self._step(f"prepare a claim not for this node ({kind})", f"prepare {kind} {named} -> {outcome.describe()}")
        self._judge(checks)

    def can_read_health(self) -> bool:
        """The profile declares healthStream, and the running process's stream was not read yet.

        Once per process (a restart or a rolling update starts a new one): what its stream answers depends on the
        process, not on the claims, so more reads would only crowd out the other operations.
        """
        return self.world.health_stream() and self.model.health_unread

    def read_health(self, data: st.DataObject) -> None:
        """Open each DRAResourceHealth stream GetInfo advertises and read its first report, for a short window."""
        del data
        reading = self._act(self.world.read_health)
        self.model.health_unread = False
        checks = Checks()
        check_health(self.model, reading, checks)
        self.model.health_reported.update(*(devices for devices in reading.reports.values() if devices is not None))
        self._step("read the health stream", f"read the health stream ({reading.describe()})")
        self._judge(checks)

    def _published(self) -> list[tuple[str, str]]:
        """(pool, device) of every device the driver publishes on the node, as last seen, in order."""
        return sorted((name, device) for name, pool in self.model.pools.items() for device in pool.devices)

    def can_make_unhealthy(self) -> bool:
        """The profile declares health hooks, and another device may fail (MAX_FAILED_DEVICES, one left sound)."""
        failing = len(self.model.unavailable())
        room = failing < min(MAX_FAILED_DEVICES, self.model.capacity - 1)
        return self.world.can_set_health() and room and len(self._published()) > failing

    def make_unhealthy(self, data: st.DataObject) -> None:
        """Fail one device through the profile's health.makeUnhealthy hook, as a device fails under a running pod.

        The health stream then reports it UNHEALTHY, with a message, and every device not failed not UNHEALTHY (the
        invariant after each step, `health_follows_the_hooks`).
        """
        sound = [device for device in self._published() if device not in self.model.unavailable()]
        device = sound[data.draw(st.integers(0, len(sound) - 1), label="device")]
        problem = self._act(lambda: self.world.set_health(device, False))
        self._set_health(device, False, problem, HOOKED_UNHEALTHY)

    def can_make_healthy(self) -> bool:
        """The profile declares health hooks, and a device is failed (or was, before a restart)."""
        return self.world.can_set_health() and bool(self.model.unavailable())

    def make_healthy(self, data: st.DataObject) -> None:
        """Make a failed device healthy again through the profile's health.makeHealthy hook."""
        failed = sorted(self.model.unavailable())
        device = failed[data.draw(st.integers(0, len(failed) - 1), label="device")]
        problem = self._act(lambda: self.world.set_health(device, True))
        self._set_health(device, True, problem, NOT_FAILED_NOT_UNHEALTHY)

    def _set_health(self, device: tuple[str, str], healthy: bool, problem: str | None, obligation: str) -> None:
        """The model after a health hook on `device`; a hook that did not run breaks `obligation` (fail closed)."""
        if problem is not None:
            self.model.health_lost(device)
        elif healthy:
            self.model.made_healthy(device)
        else:
            self.model.made_unhealthy(device)
        hook = "health.makeHealthy" if healthy else "health.makeUnhealthy"
        state = "healthy again" if healthy else "unhealthy"
        self._step(f"make a device {state}", f"make {device[1]} of pool {device[0]} {state} ({hook})")
        if problem is not None:
            checks = Checks()
            checks.expect(obligation, False, f"{hook} failed: {problem}", f"device {device[1]} on {self.model.node}")
            self._judge(checks)

    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        """One operation of a fixed list; one that cannot run in this state makes the step do nothing.

        One rule draws the operation, rather than one rule per operation, and a drawn operation that cannot run is
        skipped rather than replaced, so that one choice always means one operation. Shrinking then deletes steps
        and moves operations towards the first of the list (see OPERATIONS) without changing what the other steps
        mean. (Rules per operation shrank worse: Hypothesis's swarm testing draws, per rule and lazily, whether an
        example uses it, inside whichever step first meets the rule; and a filtered draw gives the shrinker a reason
        to keep claims around that only disable operations.)
        """
        self._go_on()
        operation = data.draw(st.sampled_from(OPERATIONS), label="operation")
        if self.operations < self.run.max_steps and operation.enabled(self):
            self.operations += 1
            operation.run(self, data)

    # --- after every step ---------------------------------------------------------------------------------------

    @invariant()
    def node_agrees_with_the_model(self) -> None:
        """CDI specs, status.devices and pools as the model says they must be."""
        seen = self._act(self.world.observe)
        now = self.run.clock()
        self.run.invariant_checks += 1
        # Writes after an unprepare first: entries an unprepare left may be such a write, which says more.
        writes = Checks()
        self._check_writes(writes)
        published = Checks()  # once per process and publish: kept whatever is looked at again below
        self._check_publishing(published)
        checks = Checks()
        check_state(self.model, seen, now, checks)
        # Entries an unprepare left, or entries a prepare should have written, where nothing else is wrong: looked at
        # again until they can be judged (a correct driver has none left and none missing, so this costs it nothing;
        # nor does shrinking a finding of another obligation).
        failing = [
            v for v in writes.violations + checks.violations + published.violations if self.run.fails(v.obligation)
        ]
        if not failing:
            settled = False
            while (due := self._looks_again_at(seen)) is not None and now < due:
                self.run.sleep(min(STATUS_POLL_SECONDS, due - now))
                seen, now, settled = self._act(self.world.observe), self.run.clock(), True
            if settled:
                writes, checks = Checks(), Checks()
                self._check_writes(writes)
                check_state(self.model, seen, now, checks)
        remember_pools(self.model, seen)
        for more in (published, checks):
            writes.violations += more.violations
            writes.exercised |= more.exercised
            writes.stated += more.stated
        self._judge(writes)

    @invariant()
    def health_follows_the_hooks(self) -> None:
        """Once a health hook ran in the example: the health stream says what the hooks set, within its deadline.

        Read as the kubelet reads it (reports merged) until every failed device is UNHEALTHY and no other one is, or
        the deadline passed; a correct driver costs one report.
        """
        if not self.model.health_hooked:
            return
        seen = self._act(lambda: self.world.watch_health(health_settled(self.model)))
        checks = Checks()
        check_hooked_health(self.model, seen, checks)
        self._judge(checks)

    def _looks_again_at(self, seen: Observation) -> float | None:
        """When status.devices entries still to be judged can be (None: none), as far as shrinking is after them."""
        target = self.run.target
        due = [
            *([status_settles_at(self.model, seen)] if target in (None, STATUS_REMOVED) else []),
            *([status_written_at(self.model, seen)] if target in (None, STATUS_WRITTEN, STATUS_PER_DEVICE) else []),
        ]
        known = [at for at in due if at is not None]
        return max(known) if known else None

    def _check_publishing(self, checks: Checks) -> None:
        """Once per driver process and publish: the name it registers under, and the nodes its slices are bound to."""
        if not self.model.publishing_unchecked:
            return
        check_registration(self.model, self._act(self.world.registered_name), checks)
        check_slice_nodes(self.model, self._act(self.world.unbound_slices), checks)
        self.model.publishing_unchecked = False

    def _check_writes(self, checks: Checks, now: float | None = None) -> None:
        """Status writes of the driver after the unprepare of each claim watched, as far as the world saw them."""
        watched = self.model.watched_for_writes()
        if watched:
            writes = {c.ref.uid: self._status_writes(c.ref) for c in watched}
            check_status_writes(self.model, writes, checks, now)

    def _watch_status_writes(self) -> None:
        """At the end of an example: status writes after the last unprepares, watched until their window ended.

        Only where a claim still exists whose unprepare is younger than STATUS_WRITE_WINDOW_SECONDS (a correct
        driver costs that wait and no more); a write seen ends the wait at once.
        """
        if self.run.target not in (None, STATUS_WRITE_AFTER_UNPREPARE):
            return
        ends = status_watch_ends_at(self.model)
        while True:
            now = self.run.clock()
            checks = Checks()
            self._check_writes(checks, now)
            if checks.violations or ends is None or now >= ends:
                break
            self.run.sleep(min(STATUS_POLL_SECONDS, ends - now))
        self._judge(checks)

    def teardown(self) -> None:
        """Judge the status writes of the example's last unprepares, then leave the node as the example found it.

        Nothing prepared, no claim or pod of the explorer. The writes are judged only where the example ran to its
        end: one a step ended (a finding, the budget) is only reset.
        """
        try:
            if not self.interrupted and sys.exc_info()[0] is None:
                self._watch_status_writes()
        finally:
            try:
                self.world.reset([c.ref for c in self.model.prepared()])
            except HarnessProblem as problem:
                self.run.harness = self.run.harness or f"reset between examples: {problem}"


@dataclass(frozen=True)
class Operation:
    """One kind of step: whether it can run in the machine's state, and what it does."""

    name: str
    enabled: Callable[[ExploreMachine], bool]
    run: Callable[[ExploreMachine, st.DataObject], None]

    def __repr__(self) -> str:
        return self.name


# In the order shrinking prefers. First an operation that never runs: shrinking moves a step it does not need to the
# first operation, and where that is one that does nothing, a sequence whose shrinking its budget cut short already
# lists only the steps that matter (creating claims first left more of them behind).
OPERATIONS = (
    Operation("nothing", lambda machine: False, lambda machine, data: None),
    Operation("create claim", ExploreMachine.can_create, ExploreMachine.create_claim),
    Operation("prepare", ExploreMachine.can_prepare, ExploreMachine.prepare),
    Operation("unprepare", ExploreMachine.can_unprepare, ExploreMachine.unprepare),
    Operation("prepare again", ExploreMachine.can_prepare_again, ExploreMachine.prepare_again),
    Operation("delete claim", ExploreMachine.can_delete, ExploreMachine.delete_claim),
    Operation("restart driver", ExploreMachine.can_restart, ExploreMachine.restart_driver),
    Operation("wipe CDI dir", ExploreMachine.can_wipe, ExploreMachine.wipe_cdi_dir),
    Operation("concurrent calls", ExploreMachine.can_call_concurrently, ExploreMachine.call_concurrently),
    Operation("concurrent changes", ExploreMachine.can_change_concurrently, ExploreMachine.change_concurrently),
    Operation("republish", ExploreMachine.can_republish, ExploreMachine.republish),
    Operation("reboot", ExploreMachine.can_reboot, ExploreMachine.reboot),
    Operation(
        "restart while pods end", ExploreMachine.can_restart_while_pods_end, ExploreMachine.restart_while_pods_end
    ),
    Operation(
        "concurrent changes, then a restart while pods end",
        ExploreMachine.can_change_concurrently_then_restart,
        ExploreMachine.change_concurrently_then_restart,
    ),
    Operation("rolling update", ExploreMachine.can_roll, ExploreMachine.roll),
    Operation(
        "prepare a claim not for this node",
        ExploreMachine.can_prepare_not_for_this_node,
        ExploreMachine.prepare_not_for_this_node,
    ),
    Operation("read the health stream", ExploreMachine.can_read_health, ExploreMachine.read_health),
    Operation("make a device unhealthy", ExploreMachine.can_make_unhealthy, ExploreMachine.make_unhealthy),
    Operation("make a device healthy again", ExploreMachine.can_make_healthy, ExploreMachine.make_healthy),
)


def machine_for(world: World, run: RunState) -> type[ExploreMachine]:
    """A machine class bound to `world` and `run` (Hypothesis makes one instance per example)."""

    class Bound(ExploreMachine):
        pass

    Bound.world = world
    Bound.run = run
    Bound.__name__ = Bound.__qualname__ = "ExploreMachine"
    return Bound
