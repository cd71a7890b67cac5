"""The explorer's invariants: each an obligation of `registry/explore.yaml`, checked from the model and what was seen.

Every function here is pure: it takes the model (what the explorer knows must hold), what a call answered or what
the node shows, and states obligations through a `Checks` collector, which keeps the verdicts the way
`dra_conformance.model.findings.Obligations` does (by registry id, with what was observed and where). The state
machine decides what a broken one means (`runner`): a finding to shrink, or an advisory.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_conformance.driver.profile import ConfigEffect
from dra_conformance.explore.cdi import defined_ids, edit_env, edit_words
from dra_conformance.explore.model import AnsweredDevice, ClaimState, Model, PoolSeen, answered_devices, base_request
from dra_conformance.explore.world import (
    OTHER_NODES_CLAIM,
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
from dra_conformance.timeouts import Timeouts

PREPARES = "explore.allocated-claim-prepares"
ANSWER_KEYS = "explore.answers-name-exactly-the-requested-claims"
ONLY_ALLOCATED = "explore.answer-reports-only-allocated-devices"
EVERY_ALLOCATED = "explore.answer-reports-every-allocated-device"
REQUEST_NAMES = "explore.answer-request-names-match-allocation"
REPEATED_SAME_DEVICES = "explore.repeated-prepare-reports-same-devices"
REPEATED_IDENTICAL = "explore.repeated-prepare-answers-identically"
UNPREPARES = "explore.unprepare-succeeds"
CDI_RESOLVES = "explore.prepared-claims-cdi-ids-resolve"
CDI_REMOVED = "explore.unprepare-removes-the-claims-cdi-specs"
CDI_REMOVED_AFTER_RESTART = "explore.unprepare-after-restart-removes-cdi-specs"
CDI_EDITS = "explore.cdi-edits-set-up-the-answered-device"
STATUS_ALLOCATED = "explore.status-entries-name-allocated-devices"
STATUS_REMOVED = "explore.status-entries-removed-after-unprepare"
STATUS_OTHER_DRIVER = "explore.no-status-entries-of-a-driver-that-did-not-prepare"
STATUS_WRITE_AFTER_UNPREPARE = "explore.no-status-write-after-unprepare"
STATUS_WRITTEN = "explore.declared-status-written"
STATUS_PER_DEVICE = "explore.status-entry-per-allocated-device"
REGISTRATION_NAME = "explore.registration-name-is-driver-name"
SLICES_ON_NODES = "explore.slices-bound-to-existing-nodes"
POOL_COMPLETE_DURING_REPUBLISH = "explore.pool-stays-complete-during-republish"
ROLLOUT_SOCKETS = "explore.rolling-update-instances-never-share-a-socket"
POOL_COMPLETE = "explore.pool-stays-complete"
POOL_UNIQUE = "explore.pool-device-names-unique"
POOL_DEVICES = "explore.pool-keeps-its-devices"
POOL_GENERATION = "explore.pool-generation-never-goes-back"
POOL_CONTENT = "explore.pool-changes-only-with-a-new-generation"
POOL_ATTRIBUTES = "explore.pool-keeps-attribute-types"
POOL_DECLARED_TYPES = "explore.pool-attributes-have-declared-types"
COMES_BACK = "explore.driver-comes-back-after-restart"
UNKNOWN_NOT_PREPARED = "explore.unknown-claim-not-prepared"
OTHER_NODE_NO_DEVICE = "explore.other-nodes-claim-reports-no-device"
NOT_FOR_NODE_NO_CDI = "explore.claim-not-for-this-node-gets-no-cdi-spec"
OTHER_NODE_NO_STATUS_WRITE = "explore.no-status-write-for-other-nodes-claim"
HEALTH_VERSIONS_ANSWER = "explore.advertised-health-versions-answer"
HEALTH_PUBLISHED = "explore.health-reports-name-published-devices"
CONFIG_APPLIED = "explore.claim-config-applies-over-class-config"
HEALTH_KEPT = "explore.health-keeps-reporting-prepared-devices"
HOOKED_UNHEALTHY = "explore.hooked-device-reported-unhealthy"
UNHEALTHY_MESSAGE = "explore.unhealthy-report-carries-message"
NOT_FAILED_NOT_UNHEALTHY = "explore.device-not-failed-not-reported-unhealthy"
SIGTERM_SOCKETS = "explore.sigterm-stop-removes-the-served-sockets"
SLICES_UNTOUCHED = "explore.unchanged-restart-leaves-slices-untouched"
HARNESS = "explore.harness-explores-the-node"

# A driver may remove its status.devices entries after the unprepare returns (one API round trip, retried on a
# conflict): entries are judged only once the unprepare is this many seconds old.
STATUS_SETTLE_SECONDS = 5.0
# How long after a prepare the explorer watches for a status write of the driver that the prepare queued, where the
# claim was unprepared meanwhile, before an example ends. Such a write (a retry after a conflict, a refresh loop, a
# status reconciler on a timer) lands within a few seconds on a healthy API server, and the kubelet may unprepare right
# after the prepare; the claim then still exists (its pod is deleted, the claim deallocated only later), and the write
# puts entries back that nobody removes. 5 s, as STATUS_SETTLE_SECONDS: a driver gets that long to remove its entries,
# and a write of its own that long to show. Measured from the prepare, not the unprepare, so that an example whose
# claims were unprepared long after their prepare waits for nothing.
STATUS_WRITE_WINDOW_SECONDS = STATUS_SETTLE_SECONDS
# And at least this long after the unprepare answered: a write the unprepare itself queued (a retry) lands at once.
UNPREPARE_WRITE_GRACE_SECONDS = 1.0
# A driver that declares statusDevices writes the entries of a claim it prepared during the prepare or soon after: a
# claim prepared this long ago must have them. The same time the named check (protocol.declared-status-written) gives
# one claim, the suite's default status_written timeout, so that a driver that writes slower but within it is never a
# finding here and a pass there. The explorer waits only while entries are missing: a driver that writes them before
# it answers costs no wait; a broken one makes each failing replay wait this long, which shortens its shrinking.
STATUS_WRITTEN_SECONDS = Timeouts().status_written
# A changed device field is quoted up to this long in a finding (attributes and capacity can be long).
DIFF_CHARS = 200
# Mistyped attributes quoted in a finding (one per device and attribute: a pool of 100 devices is 100 of them).
DIFF_ITEMS = 5


@dataclass(frozen=True)
class Violation:
    """One obligation that did not hold: its id, what was observed, and where."""

    obligation: str
    observed: str
    where: str

    def describe(self) -> str:
        """'explore.x broken at c1 (claim-2) on node: observed ...'."""
        return f"{self.obligation} broken at {self.where}: {self.observed}"


@dataclass
class Checks:
    """Collects the verdicts of one step: the obligations checked, and those that did not hold."""

    exercised: set[str] = field(default_factory=set)
    violations: list[Violation] = field(default_factory=list)
    # How many times an obligation was stated (one per claim, pool or call it was judged for).
    stated: int = 0

    def expect(self, obligation: str, holds: bool, observed: object, where: str) -> bool:
        """State `obligation`; returns whether it held."""
        self.exercised.add(obligation)
        self.stated += 1
        if not holds:
            self.violations.append(Violation(obligation, str(observed), where))
        return holds


def _where(model: Model, claim: ClaimState, call: str) -> str:
    return f"{call}: claim {claim.name} on {model.node}"


def _effective_requests(claim: ClaimState, device: AnsweredDevice) -> set[str]:
    """The requests the kubelet gives `device` to: those it names, or every request of the claim when it names none.

    The kubelet hands a container the CDI devices whose request names hold the request it references, or that name
    none (pkg/kubelet/cm/dra/claiminfo.go cdiDevicesAsList).
    """
    names = {base_request(name) for name in device.request_names}
    return names or set(claim.shape.names)


def _check_answer_keys(
    checks: Checks, model: Model, claims: Sequence[ClaimState], outcome: PrepareOutcome | UnprepareOutcome, call: str
) -> None:
    """The answer names exactly the claims the call asked for."""
    requested = sorted(claim.ref.uid for claim in claims)
    answered = sorted(outcome.claims)
    checks.expect(
        ANSWER_KEYS,
        answered == requested,
        f"answered for UIDs {answered}, asked for {requested}",
        f"{call} of {[c.name for c in claims]} on {model.node}",
    )


def check_prepare(
    model: Model, claims: Sequence[ClaimState], outcome: PrepareOutcome, call: str, checks: Checks
) -> dict[str, tuple[AnsweredDevice, ...]]:
    """Obligations of one NodePrepareResources answer for live claims of the model; returns the successful answers.

    Checked against the model as it was before the call (whether each claim was already prepared, and what it
    answered then).
    """
    succeeded: dict[str, tuple[AnsweredDevice, ...]] = {}
    # Claims the driver may refuse for now: a device of theirs is still held by another claim prepared on the node.
    held = {claim.ref.uid: model.held_by_others(claim) for claim in claims}
    if outcome.error is not None:
        excused = any(held.values())  # a refusal of the whole call, where one of its claims may be refused
        for claim in claims:
            checks.expect(PREPARES, excused, f"whole-call error: {outcome.error}", _where(model, claim, call))
        return succeeded
    _check_answer_keys(checks, model, claims, outcome, call)
    for claim in claims:
        where = _where(model, claim, call)
        answer = outcome.claims.get(claim.ref.uid)
        refused = answer is not None and bool(answer.error) and bool(held[claim.ref.uid])
        observed = f"{answer}; held by other claims: {held[claim.ref.uid]}" if held[claim.ref.uid] else answer
        prepared = answer is not None and not answer.error
        if not checks.expect(PREPARES, prepared or refused, observed, where) or answer is None or answer.error:
            continue
        devices = answered_devices(answer.devices)
        _check_devices(claim, devices, where, checks)
        if claim.prepared and claim.answer is not None:
            before = sorted({d.key for d in claim.answer})
            now = sorted({d.key for d in devices})
            checks.expect(REPEATED_SAME_DEVICES, now == before, f"now {now}, before {before}", where)
            checks.expect(
                REPEATED_IDENTICAL,
                devices == claim.answer,
                f"now {[d.describe() for d in devices]}, before {[d.describe() for d in claim.answer]}",
                where,
            )
        succeeded[claim.ref.uid] = devices
    return succeeded


def _check_devices(claim: ClaimState, devices: tuple[AnsweredDevice, ...], where: str, checks: Checks) -> None:
    allocated = claim.allocated_keys()
    reported = {d.key for d in devices}
    compared = f"reported {sorted(reported)}, allocated {sorted(allocated)}"
    checks.expect(ONLY_ALLOCATED, reported <= allocated, compared, where)
    checks.expect(EVERY_ALLOCATED, allocated <= reported, compared, where)
    given: dict[tuple[str, str], set[str]] = {}
    for device in devices:
        if device.key in allocated:
            given.setdefault(device.key, set()).update(_effective_requests(claim, device))
    wrong = {
        f"{pool}/{name}": {"answered for": sorted(requests), "allocated for": sorted(expected)}
        for (pool, name), requests in sorted(given.items())
        if requests != (expected := {a.request for a in claim.allocated if a.key == (pool, name)})
    }
    checks.expect(REQUEST_NAMES, not wrong, wrong, where)


def check_unprepare(
    model: Model, claims: Sequence[ClaimState], outcome: UnprepareOutcome, call: str, checks: Checks
) -> set[str]:
    """Obligations of one NodeUnprepareResources answer; returns the UIDs it unprepared."""
    if outcome.error is not None:
        for claim in claims:
            checks.expect(UNPREPARES, False, f"whole-call error: {outcome.error}", _where(model, claim, call))
        return set()
    _check_answer_keys(checks, model, claims, outcome, call)
    done = set()
    for claim in claims:
        error = outcome.claims.get(claim.ref.uid)
        if checks.expect(UNPREPARES, error == "", "no answer" if error is None else error, _where(model, claim, call)):
            done.add(claim.ref.uid)
    return done


def check_state(model: Model, seen: Observation, now: float, checks: Checks) -> None:
    """Obligations of the node's state between two steps: CDI specs, status.devices and pools."""
    if seen.cdi_files is not None:
        _check_cdi(model, seen.cdi_files, checks)
        _check_cdi_edits(model, seen, checks)
    _check_statuses(model, seen.statuses, now, checks)
    _check_declared_statuses(model, seen.statuses, now, checks)
    _check_pools(model, seen, checks)
    _check_config_effects(model, seen, checks)


def _check_config_effects(model: Model, seen: Observation, checks: Checks) -> None:
    """Each device of a prepared claim shows the declared effect of the config applying to its request.

    The claim's last config entry for the request, else its DeviceClass's (`ClaimShape.applied_config`); a device
    no config applies to is not judged (the driver's default is its own). Seen in the CDI edits of the device's CDI
    devices (where this machine reads them) and in the data of its status.devices entry (once written).
    """
    if not model.config_effects:
        return
    env = edit_env(seen.cdi_files) if seen.cdi_files is not None else None
    for claim in model.claims.values():
        if not (claim.prepared and claim.cdi_expected and claim.answer is not None):
            continue
        data = {
            (str(e.get("pool")), str(e.get("device"))): e.get("data") or {}
            for e in seen.statuses.get(claim.ref.uid, [])
            if e.get("driver") == model.driver
        }
        requests = {device.key: device.request for device in claim.allocated}
        judged, wrong = 0, []
        for device in claim.answer:
            sample = claim.shape.applied_config(requests[device.key]) if device.key in requests else None
            if sample is None:
                continue
            judged += 1
            shown = _shown_effect(model.config_effects[sample], device, env, data.get(device.key))
            if shown:
                wrong.append(
                    f"{device.pool}/{device.device} (request {requests[device.key]}, sample {sample}): {shown}"
                )
        if judged:
            checks.expect(
                CONFIG_APPLIED,
                not wrong,
                f"devices without the effect of the config applying to them: {wrong}; the claim's shape: "
                f"{claim.shape.describe()}; the samples' effects: {list(model.config_effects)}",
                f"claim {claim.name} on {model.node}",
            )


def _shown_effect(
    effect: ConfigEffect, device: AnsweredDevice, env: dict[str, list[str]] | None, data: dict[str, Any] | None
) -> str:
    """What `device` shows instead of `effect` ("": it shows it, or what it would show is not seen)."""
    wrong = []
    if effect.cdi_env is not None and env is not None:
        name, value = effect.cdi_env
        entries = [entry for cdi in device.cdi_ids for entry in env.get(cdi, [])]
        values = sorted({entry.split("=", 1)[1] for entry in entries if entry.split("=", 1)[0] == name})
        if values != [value]:
            wrong.append(f"CDI env {name}={values}, want {value!r}")
    if effect.status_data and data is not None and set(effect.status_data) <= set(data):
        shown = {key: data[key] for key in effect.status_data}
        if shown != dict(effect.status_data):
            wrong.append(f"status data {shown}, want {dict(effect.status_data)}")
    return "; ".join(wrong)


def _check_cdi(model: Model, files: dict[str, str], checks: Checks) -> None:
    defined = defined_ids(files)
    for claim in model.claims.values():
        where = f"claim {claim.name} on {model.node}"
        if claim.prepared and claim.cdi_expected and claim.answer is not None:
            ids = [cdi for device in claim.answer for cdi in device.cdi_ids]
            missing = [cdi for cdi in ids if cdi not in defined]
            checks.expect(
                CDI_RESOLVES,
                not missing,
                f"prepared, its answer names {ids}; not defined by any spec file: {missing} (the CDI dir defines "
                f"{sorted(defined)})",
                where,
            )
        elif not claim.prepared and claim.unprepared_at is not None:
            left = sorted(name for name, text in files.items() if claim.ref.uid in name or claim.ref.uid in text)
            obligation = CDI_REMOVED_AFTER_RESTART if claim.restarted_since_prepare else CDI_REMOVED
            checks.expect(obligation, not left, f"unprepared; spec files naming its UID remain: {left}", where)


def _check_cdi_edits(model: Model, seen: Observation, checks: Checks) -> None:
    """Where an answered device's CDI edits name devices of its pool, they name it and only the claim's devices."""
    words = edit_words(seen.cdi_files or {})
    for claim in model.claims.values():
        if not (claim.prepared and claim.cdi_expected and claim.answer is not None):
            continue
        allocated = claim.allocated_keys()
        for device in claim.answer:
            named_words = set().union(*(words.get(cdi, set()) for cdi in device.cdi_ids))
            pool = seen.pools.get(device.pool)
            named = {
                (device.pool, other)
                for other, names in (pool.identifiers if pool is not None else {}).items()
                if names & named_words
            }
            if named:
                checks.expect(
                    CDI_EDITS,
                    device.key in named and named <= allocated,
                    f"the edits of {list(device.cdi_ids)} name {sorted(named)}; answered "
                    f"{device.pool}/{device.device}, allocated {sorted(allocated)}",
                    f"claim {claim.name} on {model.node}",
                )


def _check_statuses(model: Model, statuses: dict[str, list[dict[str, Any]]], now: float, checks: Checks) -> None:
    for uid, entries in statuses.items():
        claim = model.claims.get(uid)
        if claim is None:
            continue
        where = f"claim {claim.name} on {model.node}"
        ours = [e for e in entries if e.get("driver") == model.driver]
        allocated = claim.allocated_keys()
        stray = [
            f"{e.get('pool')}/{e.get('device')}" for e in ours if (e.get("pool"), e.get("device")) not in allocated
        ]
        checks.expect(
            STATUS_ALLOCATED,
            not stray,
            f"entries of {model.driver} for {stray}; allocated {sorted(allocated)}",
            where,
        )
        if model.other_driver and claim.shape.other_devices():
            theirs = [f"{e.get('pool')}/{e.get('device')}" for e in entries if e.get("driver") == model.other_driver]
            checks.expect(
                STATUS_OTHER_DRIVER,
                not theirs,
                f"entries of {model.other_driver}, which was never asked to prepare the claim: {theirs}",
                where,
            )
        if claim.prepared or claim.unprepared_at is None:
            continue
        left = [f"{e.get('pool')}/{e.get('device')}" for e in ours]
        # Entries still there are judged once the unprepare is STATUS_SETTLE_SECONDS old; none left holds at once.
        if not left or now - claim.unprepared_at >= STATUS_SETTLE_SECONDS:
            checks.expect(
                STATUS_REMOVED,
                not left,
                f"unprepared {now - claim.unprepared_at:.1f}s ago; entries of {model.driver} remain: {left}",
                where,
            )


def _status_due(claim: ClaimState) -> float:
    """When a prepared claim's status.devices entries must be there: STATUS_WRITTEN_SECONDS after its last prepare."""
    return (claim.prepared_at or 0.0) + STATUS_WRITTEN_SECONDS


def _missing_entries(model: Model, claim: ClaimState, entries: list[dict[str, Any]]) -> list[tuple[str, str]]:
    ours = {(str(e.get("pool")), str(e.get("device"))) for e in entries if e.get("driver") == model.driver}
    return sorted(claim.allocated_keys() - ours)


def _check_declared_statuses(
    model: Model, statuses: dict[str, list[dict[str, Any]]], now: float, checks: Checks
) -> None:
    """A driver that declares statusDevices wrote entries for the devices of each claim it prepared, once they are due.

    Judged for each existing claim prepared (and not unprepared since) once its prepare is STATUS_WRITTEN_SECONDS
    old, or at once where nothing is missing: at least one entry of the driver (the capability), and one per device
    allocated to it (what consumers want).
    """
    if not model.status_devices:
        return
    for uid, entries in statuses.items():
        claim = model.claims.get(uid)
        if claim is None or not claim.prepared or claim.deleted:
            continue
        missing = _missing_entries(model, claim, entries)
        if missing and now < _status_due(claim):
            continue  # looked at again until it is due (`status_written_at`)
        where = f"claim {claim.name} on {model.node}"
        ours = sorted(f"{e.get('pool')}/{e.get('device')}" for e in entries if e.get("driver") == model.driver)
        since = f"prepared {now - claim.prepared_at:.1f}s ago" if claim.prepared_at is not None else "prepared"
        allocated = sorted(f"{pool}/{device}" for pool, device in claim.allocated_keys())
        if checks.expect(
            STATUS_WRITTEN,
            bool(ours),
            f"{since}; no status.devices entry of {model.driver} (allocated {allocated}; the profile declares "
            f"statusDevices)",
            where,
        ):
            checks.expect(
                STATUS_PER_DEVICE,
                not missing,
                f"{since}; entries of {model.driver} for {ours}, none for {[f'{p}/{d}' for p, d in missing]}",
                where,
            )


def status_written_at(model: Model, seen: Observation) -> float | None:
    """When the missing status.devices entries of claims the driver prepared are due (None: none is missing).

    Only where the profile declares statusDevices; the explorer looks again until then rather than judge a driver
    that writes them soon after its prepare answered.
    """
    if not model.status_devices:
        return None
    due = [
        _status_due(claim)
        for uid, entries in seen.statuses.items()
        if (claim := model.claims.get(uid)) is not None
        and claim.prepared
        and not claim.deleted
        and _missing_entries(model, claim, entries)
    ]
    return max(due) if due else None


def status_settles_at(model: Model, seen: Observation) -> float | None:
    """When the status.devices entries of this driver that claims unprepared still carry can be judged (None: none).

    An entry left after an unprepare is judged only once the unprepare is STATUS_SETTLE_SECONDS old; the explorer
    looks again until then rather than leave it unjudged when the example ends sooner.
    """
    due = [
        claim.unprepared_at + STATUS_SETTLE_SECONDS
        for uid, entries in seen.statuses.items()
        if (claim := model.claims.get(uid)) is not None
        and not claim.prepared
        and claim.unprepared_at is not None
        and any(e.get("driver") == model.driver for e in entries)
    ]
    return max(due) if due else None


def check_status_writes(
    model: Model, writes: dict[str, tuple[StatusWrite, ...]], checks: Checks, seen_until: float | None = None
) -> None:
    """No write of the driver sets a claim's status.devices entries after its unprepare answered.

    `writes`: every such write of each claim watched (`Model.watched_for_writes`), in the API server's order;
    `seen_until`: the clock when they were read (the window the verdict covers, for the report).
    """
    for claim in model.watched_for_writes():
        mark = claim.writes_before_unprepare or 0
        after = writes.get(claim.ref.uid, ())[mark:]
        unprepared = claim.unprepared_at or 0.0
        described = [
            f"resourceVersion {w.version}, {w.seen_at - unprepared:.1f}s after the unprepare: {list(w.entries)}"
            for w in after
        ]
        watched = f" (watched for {seen_until - unprepared:.1f}s)" if seen_until is not None else ""
        checks.expect(
            STATUS_WRITE_AFTER_UNPREPARE,
            not after,
            f"unprepared, not prepared again; then {model.driver} wrote its status.devices entries {len(after)} "
            f"time(s){watched}: {described}",
            f"claim {claim.name} on {model.node}",
        )


def status_watch_ends_at(model: Model) -> float | None:
    """When the write windows of the claims still watched for status writes end (None: none is watched).

    Each claim's ends STATUS_WRITE_WINDOW_SECONDS after its last prepare, and no sooner than
    UNPREPARE_WRITE_GRACE_SECONDS after its unprepare. The explorer waits for them only at the end of an example
    (`ExploreMachine.teardown`); every step judges the writes seen so far.
    """
    due = [
        max(
            (claim.prepared_at or claim.unprepared_at) + STATUS_WRITE_WINDOW_SECONDS,
            claim.unprepared_at + UNPREPARE_WRITE_GRACE_SECONDS,
        )
        for claim in model.watched_for_writes()
        if claim.unprepared_at is not None and not claim.deleted
    ]
    return max(due) if due else None


def check_not_for_this_node(
    model: Model,
    kind: str,
    claim: str,
    outcome: PrepareOutcome,
    work: NodeLocalWork,
    checks: Checks,
    *,
    specs_judged: bool = True,
) -> None:
    """A prepare of a claim this node does not own: `kind` (world.UNKNOWN_CLAIM, ...), `claim` its name for the report.

    A claim the API server does not have is never reported prepared; one allocated to another node is reported with
    no device (refused, or answered without devices); for neither does a CDI spec name its UID afterwards (unless
    `specs_judged` is False: a deleted claim the driver prepared once, whose specs its unprepare's obligations
    judge); the driver writes no status of the other node's claim.
    """
    where = f"prepare of {kind} {claim} on {model.node}"
    answered = outcome.claims if outcome.error is None else {}
    said = outcome.describe() if outcome.error is not None else f"answered {answered}"
    if kind == OTHER_NODES_CLAIM:
        devices = [device for answer in answered.values() if not answer.error for device in answer.devices]
        checks.expect(OTHER_NODE_NO_DEVICE, not devices, f"{said}: reported devices {devices}", where)
        writes = work.status_writes
        audit = "" if work.audited else " (the audit log is not readable here: refused writes are not seen)"
        observed = f"status writes of the driver: {list(writes)}{audit}"
        checks.expect(OTHER_NODE_NO_STATUS_WRITE, not writes, observed, where)
    else:
        prepared = [uid for uid, answer in answered.items() if not answer.error]
        checks.expect(UNKNOWN_NOT_PREPARED, not prepared, f"{said}: reported prepared", where)
    if work.cdi_specs is not None and specs_judged:
        specs = list(work.cdi_specs)
        checks.expect(NOT_FOR_NODE_NO_CDI, not specs, f"{said}; CDI spec files naming its UID: {specs}", where)


def check_health(model: Model, reading: HealthReading, checks: Checks) -> None:
    """Every advertised DRAResourceHealth version answers; each reports only devices of the driver's pools here.

    A stream that sent no report within the short window is not judged (the first report may come later); one that
    failed is. The published devices are the model's pools of the node, as last seen. Each report keeps the devices of
    claims still prepared that an earlier read reported (`Model.health_reported`), also after a restart.
    """
    where = f"health stream of {model.driver} on {model.node}"
    for service in reading.advertised:
        error = reading.errors.get(service)
        checks.expect(
            HEALTH_VERSIONS_ANSWER,
            error is None,
            f"GetInfo advertises {list(reading.advertised)}; NodeWatchResources of {service}: {error}",
            where,
        )
    published = {(name, device) for name, pool in model.pools.items() for device in pool.devices}
    # Devices of claims still prepared that an earlier read reported: the kubelet reads a device no report names any
    # more as Unknown in its pods' status.
    in_use = {device.key for claim in model.prepared() for device in claim.answer or ()} & model.health_reported
    for service, devices in sorted(reading.reports.items()):
        if devices is None:
            continue
        stray = sorted(devices - published)
        checks.expect(
            HEALTH_PUBLISHED,
            not stray,
            f"{service} reports {[f'{p}/{d}' for p, d in stray]}, which no pool of {model.driver} on {model.node} "
            f"publishes (its pools: {sorted(model.pools)})",
            where,
        )
        if in_use:
            dropped = sorted(in_use - devices)
            checks.expect(
                HEALTH_KEPT,
                not dropped,
                f"{service}'s first report leaves out {[f'{p}/{d}' for p, d in dropped]}, devices of claims still "
                f"prepared that an earlier read reported ({model.restarts} restart(s) of the driver in the sequence)",
                where,
            )


UNHEALTHY = "UNHEALTHY"


def _judged_healthy(model: Model, devices: dict[tuple[str, str], tuple[str, str]]) -> set[tuple[str, str]]:
    """The devices of `devices` the health hooks left sound: neither failed nor of unknown health since a restart."""
    return set(devices) - model.unavailable()


def health_settled(model: Model) -> Callable[[dict[tuple[str, str], tuple[str, str]]], bool]:
    """Whether merged health reports say what the hooks set: every failed device UNHEALTHY, no other one."""

    def settled(devices: dict[tuple[str, str], tuple[str, str]]) -> bool:
        failed = all(devices.get(device, ("", ""))[0] == UNHEALTHY for device in model.failed)
        return failed and not any(devices[device][0] == UNHEALTHY for device in _judged_healthy(model, devices))

    return settled


def check_hooked_health(model: Model, seen: HealthSeen, checks: Checks) -> None:
    """The health stream reports each device the hooks failed UNHEALTHY, with a message, and no other one UNHEALTHY.

    Devices whose failure may have outlived a restart are not judged (see `Model.health_unknown`).
    """
    for pool, device in sorted(model.failed):
        where = f"device {device} of pool {pool} on {model.node}, made unhealthy by health.makeUnhealthy"
        health, message = seen.health((pool, device))
        said = seen.describe((pool, device))
        if checks.expect(HOOKED_UNHEALTHY, seen.error is None and health == UNHEALTHY, said, where):
            checks.expect(UNHEALTHY_MESSAGE, bool(message.strip()), f"UNHEALTHY with message {message!r}", where)
    wrongly = sorted(d for d in _judged_healthy(model, seen.devices) if seen.devices[d][0] == UNHEALTHY)
    checks.expect(
        NOT_FAILED_NOT_UNHEALTHY,
        not wrongly,
        f"reported UNHEALTHY: {[f'{p}/{d} ({seen.devices[(p, d)][1]!r})' for p, d in wrongly]}; the hooks left failed "
        f"{sorted(model.failed)} (after {seen.reports} report(s) in {seen.waited:.1f}s)",
        f"health stream of {model.driver} on {model.node}",
    )


def check_restart(model: Model, how: str, restarted: Restarted, checks: Checks) -> None:
    """What a restart left: the sockets a SIGTERM stop served, and the slices of a pool whose content is unchanged."""
    if restarted.sockets is not None:
        check_sockets_after_stop(model, restarted.sockets, checks)
    if restarted.slice_writes is not None:
        writes = list(restarted.slice_writes)
        checks.expect(
            SLICES_UNTOUCHED,
            not writes,
            f"restart by {how} of {restarted.took:.1f}s, the pool's content unchanged; {len(writes)} write(s) of "
            f"its slices since the stop: {writes[:DIFF_ITEMS]}",
            f"the slices of {model.driver} on {model.node}",
        )


def check_sockets_after_stop(model: Model, stopped: SocketsAfterStop, checks: Checks) -> None:
    """A driver stopped by SIGTERM removed the sockets it served before its process exited."""
    checks.expect(
        SIGTERM_SOCKETS,
        not stopped.left,
        f"after the driver exited ({stopped.ended}), still there: {list(stopped.left)} (of {list(stopped.served)})",
        f"SIGTERM stop of {model.driver} on {model.node}",
    )


def check_registration(model: Model, name: str, checks: Checks) -> None:
    """The driver's process registers under the driver's name, the one its slices and allocations carry."""
    checks.expect(
        REGISTRATION_NAME,
        name == model.driver,
        f"GetInfo names the plugin {name!r}; its ResourceSlices and allocations name the driver {model.driver!r}",
        f"registration of the driver on {model.node}",
    )


def check_slice_nodes(model: Model, unbound: dict[str, str], checks: Checks) -> None:
    """Every slice of the driver (on any node) is bound to a node of the cluster."""
    stray = sorted(f"{name} -> {node}" for name, node in unbound.items())
    checks.expect(
        SLICES_ON_NODES,
        not stray,
        f"slices of {model.driver} bound to no node of the cluster: {stray}",
        f"the ResourceSlices of {model.driver} on every node",
    )


def check_republish(model: Model, republished: Republished, checks: Checks) -> None:
    """A consumer watching the node's slices saw each pool complete after every event of the republish."""
    checks.expect(
        POOL_COMPLETE_DURING_REPUBLISH,
        not republished.gaps,
        f"{republished.changed}: {len(republished.gaps)} of {republished.events} watch events left a pool gone or "
        f"incomplete: {list(republished.gaps)[:3]}",
        f"republish of {model.driver} on {model.node}",
    )


def check_rollout(model: Model, rollout: Rollout, checks: Checks) -> None:
    """Two instances of a rolling update never share a socket: the new one registers under a name of its own."""
    new = sorted(rollout.during - rollout.old)
    gone = sorted(rollout.old - rollout.during)
    problems = []
    if not new:
        problems.append("the new instance registered under no socket name of its own")
    if gone:
        problems.append(f"the old instance's sockets {gone} were gone while it still ran")
    if rollout.taken_over:
        problems.append(f"sockets bound again by the new instance: {sorted(rollout.taken_over)}")
    checks.expect(
        ROLLOUT_SOCKETS,
        not problems,
        f"{'; '.join(problems)} ({rollout.describe()})",
        f"rolling update of {model.driver} on {model.node}",
    )


def _check_pools(model: Model, seen: Observation, checks: Checks) -> None:
    for name, pool in sorted(seen.pools.items()):
        where = f"pool {name} of node {model.node}"
        checks.expect(
            POOL_COMPLETE,
            pool.complete,
            f"generation {pool.generation}: {pool.slices} slices, resourceSliceCount {pool.expected_slices}",
            where,
        )
        repeated = sorted(device for device, count in Counter(pool.devices).items() if count > 1)
        checks.expect(
            POOL_UNIQUE, not repeated, f"generation {pool.generation}: listed more than once: {repeated}", where
        )
        if model.declared_attributes:
            mistyped = _mistyped_attributes(model.declared_attributes, pool)
            checks.expect(
                POOL_DECLARED_TYPES, not mistyped, f"generation {pool.generation}: {mistyped[:DIFF_ITEMS]}", where
            )
        before = model.pools.get(name)
        if before is None:
            continue
        checks.expect(
            POOL_GENERATION,
            pool.generation >= before.generation,
            f"generation {pool.generation} after {before.generation}",
            where,
        )
        checks.expect(
            POOL_DEVICES,
            pool.devices == before.devices,
            f"devices {list(pool.devices)}, first seen {list(before.devices)}",
            where,
        )
        if pool.generation == before.generation and pool.content and before.content:
            checks.expect(
                POOL_CONTENT,
                pool.content == before.content,
                f"still generation {pool.generation}; changed since: {_changed_devices(before.content, pool.content)}",
                where,
            )
        retyped = _retyped_attributes(before, pool)
        if before.attributes:
            checks.expect(
                POOL_ATTRIBUTES, not retyped, f"generation {before.generation} -> {pool.generation}: {retyped}", where
            )
    for name, before in sorted(model.pools.items()):
        if name not in seen.pools:
            checks.expect(
                POOL_DEVICES, False, f"gone (it had devices {list(before.devices)})", f"pool {name} of {model.node}"
            )


def _changed_devices(before: str, now: str) -> list[str]:
    """The devices whose spec differs between two `PoolView.content` texts, with the fields that differ."""
    old, new = json.loads(before), json.loads(now)
    changed = []
    for device in sorted(set(old) | set(new)):
        a, b = old.get(device) or {}, new.get(device) or {}
        fields = sorted(key for key in set(a) | set(b) if a.get(key) != b.get(key))
        if fields:
            was, now_ = [a.get(f) for f in fields], [b.get(f) for f in fields]
            changed.append(f"{device} {', '.join(fields)}: {str(was)[:DIFF_CHARS]} -> {str(now_)[:DIFF_CHARS]}")
    return changed


def _mistyped_attributes(declared: dict[str, str], pool: PoolView) -> list[str]:
    """'gpu-0: driverVersion string, declared version' for each declared attribute a device carries with another type.

    A published name may be qualified by a domain (`<domain>/<name>`); an attribute a device does not carry is the
    named checks' to judge (which attributes a scenario needs), not this invariant's.
    """
    mistyped = []
    for device, types in sorted(pool.attributes.items()):
        for attribute, kind in sorted(types.items()):
            wanted = declared.get(attribute.rsplit("/", 1)[-1])
            if wanted is not None and kind != wanted:
                mistyped.append(f"{device}: {attribute} {kind}, declared {wanted}")
    return mistyped


def _retyped_attributes(before: PoolSeen, pool: PoolView) -> list[str]:
    """'gpu-0: index int -> string' for each device whose attribute names or types changed, its versions unchanged."""
    retyped = []
    for device, types in sorted(pool.attributes.items()):
        was = before.attributes.get(device)
        if was is None or was == types or before.versions.get(device) != pool.versions.get(device):
            continue
        for attribute in sorted(set(was) | set(types)):
            if was.get(attribute) != types.get(attribute):
                retyped.append(
                    f"{device}: {attribute} {was.get(attribute, 'absent')} -> {types.get(attribute, 'absent')}"
                )
    return retyped


def remember_pools(model: Model, seen: Observation) -> None:
    """Keep each pool's highest generation with what it said then, its devices as first seen, its attributes as last."""
    for name, pool in seen.pools.items():
        before = model.pools.get(name)
        if before is None:
            model.pools[name] = PoolSeen(pool.generation, pool.devices, pool.content, pool.attributes, pool.versions)
            continue
        if pool.generation > before.generation:
            before.generation, before.content = pool.generation, pool.content
        before.attributes, before.versions = pool.attributes, pool.versions
