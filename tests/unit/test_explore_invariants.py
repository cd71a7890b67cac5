"""The explorer's invariants as functions of the model and what was seen (pure logic, no cluster)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dra_conformance.driver.profile import ConfigEffect
from dra_conformance.explore import invariants as inv
from dra_conformance.explore.model import (
    AllocatedDevice,
    ClaimConfig,
    ClaimShape,
    ClaimState,
    Model,
    PoolSeen,
    RequestShape,
    answered_devices,
)
from dra_conformance.explore.world import (
    DELETED_CLAIM,
    OTHER_NODES_CLAIM,
    UNKNOWN_CLAIM,
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

NODE, DRIVER = "node-a", "gpu.x"
TWO_REQUESTS = ClaimShape((RequestShape(1), RequestShape(1)))
ALLOCATED = (AllocatedDevice("req-0", NODE, "gpu-0"), AllocatedDevice("req-1", NODE, "gpu-1"))
POOL = PoolView(generation=3, slices=1, expected_slices=1, devices=("gpu-0", "gpu-1", "gpu-2"))


def _device(device: str, *requests: str, cdi: str | None = None) -> dict[str, Any]:
    return {
        "requestNames": list(requests),
        "poolName": NODE,
        "deviceName": device,
        "cdiDeviceIDs": [cdi or f"example.com/gpu=u1-{device}"],
    }


def _model() -> tuple[Model, ClaimState]:
    model = Model(NODE, DRIVER, capacity=3)
    return model, model.add(ClaimRef("ns", "u1", "claim-1"), TWO_REQUESTS, ALLOCATED)


def _prepare(model: Model, claims: list[ClaimState], outcome: PrepareOutcome) -> inv.Checks:
    checks = inv.Checks()
    inv.check_prepare(model, claims, outcome, "prepare", checks)
    return checks


def _broken(checks: inv.Checks) -> list[str]:
    return [v.obligation for v in checks.violations]


RIGHT = [_device("gpu-0", "req-0"), _device("gpu-1", "req-1")]


def test_an_answer_naming_the_allocated_devices_under_their_requests_holds_every_obligation() -> None:
    model, claim = _model()
    checks = _prepare(model, [claim], PrepareOutcome({"u1": ClaimAnswer(devices=RIGHT)}))
    assert checks.violations == []
    assert {
        inv.PREPARES,
        inv.ANSWER_KEYS,
        inv.ONLY_ALLOCATED,
        inv.EVERY_ALLOCATED,
        inv.REQUEST_NAMES,
    } <= checks.exercised


@pytest.mark.parametrize(
    ("devices", "broken"),
    [
        # The bug: every device of a multi-request claim answered under the first request's name.
        ([_device("gpu-0", "req-0"), _device("gpu-1", "req-0")], [inv.REQUEST_NAMES]),
        # No request names: each device goes to both requests' containers.
        ([_device("gpu-0"), _device("gpu-1")], [inv.REQUEST_NAMES]),
        # A device that is not the claim's (another claim's answer, or the next device of the pool).
        ([_device("gpu-0", "req-0"), _device("gpu-2", "req-1")], [inv.ONLY_ALLOCATED, inv.EVERY_ALLOCATED]),
        # One device left out: zero devices is valid, so this is defensive.
        ([_device("gpu-0", "req-0")], [inv.EVERY_ALLOCATED]),
    ],
)
def test_answers_that_name_other_devices_or_requests_break_their_obligation(
    devices: list[dict[str, Any]], broken: list[str]
) -> None:
    model, claim = _model()
    assert _broken(_prepare(model, [claim], PrepareOutcome({"u1": ClaimAnswer(devices=devices)}))) == broken


def test_empty_request_names_are_right_for_a_claim_of_one_request() -> None:
    model = Model(NODE, DRIVER, capacity=3)
    claim = model.add(
        ClaimRef("ns", "u1", "c"),
        ClaimShape((RequestShape(2),)),
        (ALLOCATED[0], AllocatedDevice("req-0", NODE, "gpu-1")),
    )
    assert (
        _prepare(
            model, [claim], PrepareOutcome({"u1": ClaimAnswer(devices=[_device("gpu-0"), _device("gpu-1")])})
        ).violations
        == []
    )


def test_a_whole_call_error_a_claim_error_and_a_missing_key_each_break_prepare() -> None:
    model, claim = _model()
    other = model.add(ClaimRef("ns", "u2", "claim-2"), TWO_REQUESTS, ())
    assert _broken(_prepare(model, [claim], PrepareOutcome(error="UNAVAILABLE: gone"))) == [inv.PREPARES]
    assert _broken(_prepare(model, [claim], PrepareOutcome({"u1": ClaimAnswer(error="busy")}))) == [inv.PREPARES]
    missing = _prepare(model, [claim, other], PrepareOutcome({"u1": ClaimAnswer(devices=RIGHT)}))
    assert _broken(missing) == [inv.ANSWER_KEYS, inv.PREPARES]


def test_a_claim_whose_device_a_deleted_claim_still_holds_may_be_refused_until_that_claim_is_unprepared() -> None:
    model, holder = _model()
    model.prepared_ok(holder, answered_devices(RIGHT))
    model.deleted(holder)  # deleted while prepared: its devices are allocated again before its unprepare
    admin = (AllocatedDevice("req-1", NODE, "gpu-2", admin=True),)
    claim = model.add(ClaimRef("ns", "u2", "claim-2"), TWO_REQUESTS, (AllocatedDevice("req-0", NODE, "gpu-1"), *admin))
    refusal = PrepareOutcome({"u2": ClaimAnswer(error="gpu-1 is held by ns/claim-1")})
    assert model.held_by_others(claim) == [(NODE, "gpu-1", "c1")]
    assert _prepare(model, [claim], refusal).violations == []
    assert _prepare(model, [claim], PrepareOutcome(error="FAILED_PRECONDITION: held")).violations == []
    model.unprepared_ok(holder, at=1.0)
    assert _broken(_prepare(model, [claim], refusal)) == [inv.PREPARES]
    shared = model.add(ClaimRef("ns", "u3", "claim-3"), TWO_REQUESTS, admin)  # admin access holds nothing
    model.prepared_ok(claim, ())
    assert model.held_by_others(shared) == []


def test_a_repeated_prepare_must_report_the_same_devices_and_should_answer_identically() -> None:
    model, claim = _model()
    model.prepared_ok(claim, answered_devices(RIGHT))
    same = _prepare(model, [claim], PrepareOutcome({"u1": ClaimAnswer(devices=list(reversed(RIGHT)))}))
    assert _broken(same) == [inv.REPEATED_IDENTICAL]  # reordered: harmless, but not identical
    moved = [_device("gpu-0", "req-0"), _device("gpu-2", "req-1")]
    assert inv.REPEATED_SAME_DEVICES in _broken(
        _prepare(model, [claim], PrepareOutcome({"u1": ClaimAnswer(devices=moved)}))
    )


def test_unprepare_must_succeed_for_every_claim_it_names() -> None:
    model, claim = _model()
    checks = inv.Checks()
    assert inv.check_unprepare(model, [claim], UnprepareOutcome({"u1": ""}), "unprepare", checks) == {"u1"}
    assert checks.violations == []
    for outcome in (UnprepareOutcome({"u1": "remove CDI spec: no such file"}), UnprepareOutcome(error="INTERNAL: x")):
        checks = inv.Checks()
        assert inv.check_unprepare(model, [claim], outcome, "unprepare", checks) == set()
        assert _broken(checks) == [inv.UNPREPARES]


def _spec(uid: str, *devices: str) -> str:
    return json.dumps({"kind": "example.com/gpu", "devices": [{"name": f"{uid}-{d}"} for d in devices]})


def _seen(
    files: dict[str, str] | None = None,
    statuses: dict[str, list[dict[str, Any]]] | None = None,
    pools: dict[str, PoolView] | None = None,
) -> Observation:
    return Observation(files, statuses or {}, {NODE: POOL} if pools is None else pools)


def _state(model: Model, seen: Observation, now: float = 100.0) -> list[str]:
    checks = inv.Checks()
    inv.check_state(model, seen, now, checks)
    return _broken(checks)


def test_cdi_ids_of_a_prepared_claim_must_resolve_unless_the_explorer_wiped_them() -> None:
    model, claim = _model()
    model.prepared_ok(claim, answered_devices(RIGHT))
    assert _state(model, _seen({"u1.json": _spec("u1", "gpu-0", "gpu-1")})) == []
    assert _state(model, _seen({"u1.json": _spec("u1", "gpu-0")})) == [inv.CDI_RESOLVES]
    assert _state(model, _seen(None)) == []  # the CDI dir is not readable here: not judged
    model.wiped()
    assert _state(model, _seen({})) == []


def test_an_unprepared_claim_leaves_no_spec_naming_it_and_a_restart_makes_that_defensive() -> None:
    model, claim = _model()
    model.prepared_ok(claim, answered_devices(RIGHT))
    model.unprepared_ok(claim, at=1.0)
    left = {"u1.json": _spec("u1", "gpu-0", "gpu-1"), "static.yaml": "kind: example.com/gpu\ndevices: []\n"}
    assert _state(model, _seen(left)) == [inv.CDI_REMOVED]
    assert _state(model, _seen({"static.yaml": left["static.yaml"]})) == []
    model.prepared_ok(claim, answered_devices(RIGHT))
    model.restarted()
    model.unprepared_ok(claim, at=2.0)
    assert _state(model, _seen(left)) == [inv.CDI_REMOVED_AFTER_RESTART]


def test_status_entries_name_only_allocated_devices_and_go_once_the_unprepare_settled() -> None:
    model, claim = _model()
    model.prepared_ok(claim, answered_devices(RIGHT))
    mine = [{"driver": DRIVER, "pool": NODE, "device": "gpu-0"}, {"driver": DRIVER, "pool": NODE, "device": "gpu-1"}]
    assert _state(model, _seen(statuses={"u1": mine})) == []
    stray = [*mine, {"driver": DRIVER, "pool": NODE, "device": "gpu-2"}]
    assert _state(model, _seen(statuses={"u1": stray})) == [inv.STATUS_ALLOCATED]
    model.unprepared_ok(claim, at=100.0)
    assert _state(model, _seen(statuses={"u1": mine}), now=100.0 + inv.STATUS_SETTLE_SECONDS / 2) == []
    assert _state(model, _seen(statuses={"u1": mine}), now=100.0 + inv.STATUS_SETTLE_SECONDS) == [inv.STATUS_REMOVED]
    others = [{"driver": "nic.x", "pool": NODE, "device": "nic-0"}]
    assert _state(model, _seen(statuses={"u1": others}), now=200.0) == []


def test_entries_an_unprepare_left_are_due_for_judgement_once_it_settled() -> None:
    model, claim = _model()
    mine = [{"driver": DRIVER, "pool": NODE, "device": "gpu-0"}]
    assert inv.status_settles_at(model, _seen(statuses={"u1": mine})) is None  # never unprepared
    model.prepared_ok(claim, answered_devices(RIGHT))
    model.unprepared_ok(claim, at=10.0)
    assert inv.status_settles_at(model, _seen(statuses={"u1": mine})) == 10.0 + inv.STATUS_SETTLE_SECONDS
    assert inv.status_settles_at(model, _seen(statuses={"u1": []})) is None


def test_pools_stay_complete_keep_their_devices_and_their_generation_never_goes_back() -> None:
    model, _ = _model()
    assert _state(model, _seen()) == []
    inv.remember_pools(model, _seen())
    assert _state(model, _seen(pools={NODE: PoolView(4, 1, 1, POOL.devices)})) == []
    assert _state(model, _seen(pools={NODE: PoolView(4, 1, 2, POOL.devices)})) == [inv.POOL_COMPLETE]
    assert _state(model, _seen(pools={NODE: PoolView(1, 1, 1, POOL.devices)})) == [inv.POOL_GENERATION]
    assert _state(model, _seen(pools={NODE: PoolView(4, 1, 1, POOL.devices[:2])})) == [inv.POOL_DEVICES]
    assert _state(model, _seen(pools={})) == [inv.POOL_DEVICES]
    inv.remember_pools(model, _seen(pools={NODE: PoolView(7, 1, 1, POOL.devices)}))
    assert model.pools[NODE].generation == 7 and model.pools[NODE].devices == POOL.devices


def test_a_declared_attribute_published_with_another_type_is_found_whatever_its_domain() -> None:
    model, _ = _model()
    model.declared_attributes = {"driverVersion": "version", "index": "int"}
    attributes = {"gpu-0": {"driverVersion": "version", "index": "int", "model": "string"}}
    pool = PoolView(1, 1, 1, ("gpu-0",), attributes=attributes)
    assert _state(model, _seen(pools={NODE: pool})) == []
    mistyped = {"gpu-0": {f"{DRIVER}/driverVersion": "string", "index": "int", "model": "int"}}
    broken = PoolView(1, 1, 1, ("gpu-0",), attributes=mistyped)
    assert _state(model, _seen(pools={NODE: broken})) == [inv.POOL_DECLARED_TYPES]
    model.declared_attributes = {}
    assert _state(model, _seen(pools={NODE: broken})) == [], "a profile that declares nothing states nothing"


def test_a_device_name_listed_twice_in_a_pool_is_found_before_any_claim_is_made() -> None:
    model, _ = _model()
    repeated = PoolView(1, 2, 2, ("gpu-0", "gpu-0", "gpu-1"))
    assert _state(model, _seen(pools={NODE: repeated})) == [inv.POOL_UNIQUE]
    assert _state(model, _seen(pools={NODE: PoolView(1, 2, 2, ("gpu-0", "gpu-1"))})) == []


def test_violations_say_which_obligation_broke_where_and_what_was_seen() -> None:
    checks = inv.Checks()
    assert not checks.expect(inv.POOL_COMPLETE, False, "1/2 slices", "pool p")
    assert checks.violations[0].describe() == "explore.pool-stays-complete broken at pool p: 1/2 slices"


def _edited_spec(edits: dict[str, str]) -> str:
    """One claim's spec: each of its CDI devices (u1-<device>) with the env var its edits set."""
    devices = [{"name": name, "containerEdits": {"env": [f"VISIBLE_DEVICE={env}"]}} for name, env in edits.items()]
    return json.dumps({"cdiVersion": "0.6.0", "kind": "example.com/gpu", "devices": devices})


@pytest.mark.parametrize(
    ("edits", "holds"),
    [
        ({"u1-gpu-0": "gpu-0", "u1-gpu-1": "gpu-1"}, True),
        # The edits set up the next device of the pool, which another claim may hold.
        ({"u1-gpu-0": "gpu-1", "u1-gpu-1": "gpu-2"}, False),
        # Edits naming no device of the pool (by name or a unique attribute): nothing to judge.
        ({"u1-gpu-0": "all", "u1-gpu-1": "all"}, None),
        # Named by a string attribute value only that device has (its uuid).
        ({"u1-gpu-0": "uuid-0", "u1-gpu-1": "uuid-2"}, False),
    ],
)
def test_cdi_edits_must_name_the_answered_device_and_only_the_claims_devices(
    edits: dict[str, str], holds: bool | None
) -> None:
    model, claim = _model()
    model.prepared_ok(claim, answered_devices(RIGHT))
    identifiers = {f"gpu-{i}": frozenset({f"gpu-{i}", f"uuid-{i}"}) for i in range(3)}
    pool = PoolView(3, 1, 1, POOL.devices, identifiers=identifiers)
    checks = inv.Checks()
    inv.check_state(model, Observation({"u1.json": _edited_spec(edits)}, {}, {NODE: pool}), 0.0, checks)
    assert (inv.CDI_EDITS in checks.exercised) == (holds is not None), checks
    assert (inv.CDI_EDITS in _broken(checks)) == (holds is False), checks.violations


def _write(version: str, at: float, *entries: str) -> StatusWrite:
    return StatusWrite(version, at, entries)


def test_a_status_write_after_the_unprepare_breaks_and_the_writes_before_it_do_not() -> None:
    model, claim = _model()
    model.prepared_ok(claim, answered_devices(RIGHT))
    model.unprepared_ok(claim, at=10.0, writes=1)
    prepare_write = _write("5", 1.0, "node-a/gpu-0", "node-a/gpu-1")
    checks = inv.Checks()
    inv.check_status_writes(model, {"u1": (prepare_write,)}, checks)
    assert checks.violations == [] and inv.STATUS_WRITE_AFTER_UNPREPARE in checks.exercised
    rewrite = _write("9", 13.0, "node-a/gpu-0", "node-a/gpu-1")
    checks = inv.Checks()
    inv.check_status_writes(model, {"u1": (prepare_write, rewrite)}, checks, seen_until=15.0)
    assert _broken(checks) == [inv.STATUS_WRITE_AFTER_UNPREPARE], checks.violations
    observed = checks.violations[0].observed
    assert "1 time(s) (watched for 5.0s)" in observed and "resourceVersion 9, 3.0s after the unprepare" in observed


def test_a_claim_prepared_again_or_never_marked_is_not_watched_for_status_writes() -> None:
    model, claim = _model()
    model.prepared_ok(claim, answered_devices(RIGHT))
    model.unprepared_ok(claim, at=10.0, writes=None)  # the watch never caught up: no verdict
    assert model.watched_for_writes() == []
    model.prepared_ok(claim, answered_devices(RIGHT))
    model.unprepared_ok(claim, at=20.0, writes=1)
    assert model.watched_for_writes() == [claim] and inv.status_watch_ends_at(model) == 20.0 + inv.STATUS_SETTLE_SECONDS
    model.prepared_ok(claim, answered_devices(RIGHT))
    assert model.watched_for_writes() == [] and inv.status_watch_ends_at(model) is None
    checks = inv.Checks()
    inv.check_status_writes(
        model, {"u1": (_write("1", 1.0, "node-a/gpu-0"), _write("2", 25.0, "node-a/gpu-0"))}, checks
    )
    assert checks.violations == [] and not checks.exercised


@pytest.mark.parametrize(
    ("during", "problem"),
    [
        ({"d-reg.sock"}, "the new instance registered under no socket name of its own"),
        ({"d-new-reg.sock"}, "the old instance's sockets ['d-reg.sock'] were gone while it still ran"),
    ],
)
def test_a_rolling_update_whose_instances_share_a_socket_breaks_the_obligation(during: set[str], problem: str) -> None:
    model, _ = _model()
    checks = inv.Checks()
    inv.check_rollout(model, Rollout(frozenset({"d-reg.sock"}), frozenset(during)), checks)
    assert _broken(checks) == [inv.ROLLOUT_SOCKETS] and problem in checks.violations[0].observed, checks.violations
    checks = inv.Checks()
    inv.check_rollout(model, Rollout(frozenset({"d-reg.sock"}), frozenset({"d-reg.sock", "d-new-reg.sock"})), checks)
    assert checks.violations == [] and inv.ROLLOUT_SOCKETS in checks.exercised


def test_the_status_write_window_runs_from_the_prepare_and_a_little_past_the_unprepare() -> None:
    model, claim = _model()
    model.prepared_ok(claim, answered_devices(RIGHT), at=10.0)
    model.unprepared_ok(claim, at=11.0, writes=1)
    assert inv.status_watch_ends_at(model) == 10.0 + inv.STATUS_WRITE_WINDOW_SECONDS
    model.prepared_ok(claim, answered_devices(RIGHT), at=20.0)
    model.unprepared_ok(claim, at=40.0, writes=2)
    assert inv.status_watch_ends_at(model) == 40.0 + inv.UNPREPARE_WRITE_GRACE_SECONDS
    model.deleted(claim)
    assert inv.status_watch_ends_at(model) is None, "a deleted claim cannot be written: nothing to wait for"


def test_declared_status_entries_are_due_a_while_after_the_prepare_one_per_allocated_device() -> None:
    model, claim = _model()
    model.status_devices = True
    model.prepared_ok(claim, answered_devices(RIGHT), at=10.0)
    one = [{"driver": DRIVER, "pool": NODE, "device": "gpu-0"}]
    both = [*one, {"driver": DRIVER, "pool": NODE, "device": "gpu-1"}]
    due = 10.0 + inv.STATUS_WRITTEN_SECONDS
    assert inv.status_written_at(model, _seen(statuses={"u1": []})) == due
    assert inv.status_written_at(model, _seen(statuses={"u1": both})) is None
    assert _state(model, _seen(statuses={"u1": []}), now=due - 1) == []  # not due yet: looked at again
    assert _state(model, _seen(statuses={"u1": both}), now=11.0) == []
    assert _state(model, _seen(statuses={"u1": []}), now=due) == [inv.STATUS_WRITTEN]
    assert _state(model, _seen(statuses={"u1": one}), now=due) == [inv.STATUS_PER_DEVICE]
    model.status_devices = False  # the profile does not declare it: nothing is asked for
    assert _state(model, _seen(statuses={"u1": []}), now=due) == []
    assert inv.status_written_at(model, _seen(statuses={"u1": []})) is None


def test_registration_slice_nodes_and_a_watched_republish_break_their_obligations() -> None:
    model, _ = _model()
    checks = inv.Checks()
    inv.check_registration(model, DRIVER, checks)
    inv.check_slice_nodes(model, {}, checks)
    inv.check_republish(model, Republished("taint on gpu-0", (), 1), checks)
    assert checks.violations == [] and len(checks.exercised) == 3
    inv.check_registration(model, "x.example.com", checks)
    inv.check_slice_nodes(model, {"s-1": "node-a.example.com"}, checks)
    inv.check_republish(
        model, Republished("taint on gpu-0", ("after DELETED of slice s-0: pool node-a gone",), 2), checks
    )
    assert _broken(checks) == [inv.REGISTRATION_NAME, inv.SLICES_ON_NODES, inv.POOL_COMPLETE_DURING_REPUBLISH]
    assert "s-1 -> node-a.example.com" in checks.violations[1].observed, checks.violations


# --- claims this node does not own, and the health stream -------------------------------------------------------------

REFUSED = PrepareOutcome({"u9": ClaimAnswer(error="claim ns/x not found")})
NO_WORK = NodeLocalWork(cdi_specs=(), status_writes=(), audited=True)


def _not_owned(kind: str, outcome: PrepareOutcome, work: NodeLocalWork = NO_WORK, **options: bool) -> list[str]:
    checks = inv.Checks()
    inv.check_not_for_this_node(_model()[0], kind, "x", outcome, work, checks, **options)
    return _broken(checks)


@pytest.mark.parametrize("kind", [UNKNOWN_CLAIM, DELETED_CLAIM, OTHER_NODES_CLAIM])
def test_a_claim_not_for_this_node_refused_without_work_holds_every_obligation(kind: str) -> None:
    assert _not_owned(kind, REFUSED) == []
    assert _not_owned(kind, PrepareOutcome(error="UNAVAILABLE: no")) == []
    assert _not_owned(kind, PrepareOutcome({})) == []


def test_an_unknown_claim_answered_prepared_even_without_devices_breaks_its_obligation() -> None:
    assert _not_owned(UNKNOWN_CLAIM, PrepareOutcome({"u9": ClaimAnswer()})) == [inv.UNKNOWN_NOT_PREPARED]
    assert _not_owned(DELETED_CLAIM, PrepareOutcome({"u9": ClaimAnswer()})) == [inv.UNKNOWN_NOT_PREPARED]


def test_another_nodes_claim_may_be_answered_without_devices_but_not_with_them() -> None:
    assert _not_owned(OTHER_NODES_CLAIM, PrepareOutcome({"u9": ClaimAnswer()})) == []
    theirs = PrepareOutcome({"u9": ClaimAnswer(devices=[{"poolName": "node-b", "deviceName": "gpu-0"}])})
    assert _not_owned(OTHER_NODES_CLAIM, theirs) == [inv.OTHER_NODE_NO_DEVICE]


def test_a_spec_or_a_status_write_for_a_claim_not_for_this_node_breaks_its_obligation() -> None:
    spec = NodeLocalWork(cdi_specs=("gpu.x-u9.json",), status_writes=(), audited=True)
    assert _not_owned(UNKNOWN_CLAIM, REFUSED, spec) == [inv.NOT_FOR_NODE_NO_CDI]
    # A deleted claim prepared once: what its unprepare left is that unprepare's to judge.
    assert _not_owned(DELETED_CLAIM, REFUSED, spec, specs_judged=False) == []
    refused_write = NodeLocalWork(cdi_specs=None, status_writes=("patch -> 403 (audit log, driver)",), audited=True)
    assert _not_owned(OTHER_NODES_CLAIM, REFUSED, refused_write) == [inv.OTHER_NODE_NO_STATUS_WRITE]


def _health(reading: HealthReading) -> list[str]:
    model = _model()[0]
    inv.remember_pools(model, Observation({}, {}, {NODE: POOL}))
    checks = inv.Checks()
    inv.check_health(model, reading, checks)
    return _broken(checks)


V1, V1ALPHA1 = "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"
PUBLISHED = frozenset((NODE, device) for device in POOL.devices)


def test_health_streams_of_every_advertised_version_naming_published_devices_hold() -> None:
    assert _health(HealthReading((V1, V1ALPHA1), {V1: PUBLISHED, V1ALPHA1: PUBLISHED})) == []
    # No report within the window is not judged; nothing advertised, nothing to answer.
    assert _health(HealthReading((V1,), {V1: None})) == []
    assert _health(HealthReading(())) == []


def test_an_advertised_version_that_fails_or_a_report_under_another_pool_breaks_its_obligation() -> None:
    unserved = HealthReading((V1, V1ALPHA1), {V1: PUBLISHED}, {V1ALPHA1: "UNIMPLEMENTED: unknown service"})
    assert _health(unserved) == [inv.HEALTH_VERSIONS_ANSWER]
    wrong_pool = frozenset((DRIVER, device) for device in POOL.devices)
    assert _health(HealthReading((V1,), {V1: wrong_pool})) == [inv.HEALTH_PUBLISHED]
    assert "v1alpha1.DRAResourceHealth: UNIMPLEMENTED" in unserved.describe()


def test_a_sigterm_stop_that_leaves_a_socket_it_served_breaks_the_obligation() -> None:
    model, _ = _model()
    served = ("/k/plugins_registry/gpu.x-reg.sock", "/k/plugins/gpu.x/dra.sock")
    checks = inv.Checks()
    inv.check_sockets_after_stop(model, SocketsAfterStop(served, (), "exit status 0"), checks)
    assert checks.violations == [] and inv.SIGTERM_SOCKETS in checks.exercised
    checks = inv.Checks()
    left = SocketsAfterStop(served, served[:1], "exit status 0")
    inv.check_sockets_after_stop(model, left, checks)
    assert _broken(checks) == [inv.SIGTERM_SOCKETS], checks.violations
    assert f"still there: {[served[0]]}" in checks.violations[0].observed, checks.violations


def test_a_restart_is_judged_on_its_sockets_after_sigterm_and_on_its_slices_where_the_pool_is_unchanged() -> None:
    model, _ = _model()
    served = ("/k/plugins_registry/gpu.x-reg.sock",)
    checks = inv.Checks()
    inv.check_restart(model, "SIGKILL", Restarted(), checks)
    assert checks.exercised == set(), "nothing read: nothing judged"
    inv.check_restart(model, "SIGTERM", Restarted(SocketsAfterStop(served, (), "exit status 0"), ()), checks)
    assert checks.violations == [] and checks.exercised == {inv.SIGTERM_SOCKETS, inv.SLICES_UNTOUCHED}
    rewritten = Restarted(None, ("s-1 rewritten (resourceVersion 5 -> 9)",), 2.0)
    inv.check_restart(model, "SIGKILL", rewritten, checks)
    assert _broken(checks) == [inv.SLICES_UNTOUCHED], checks.violations
    assert "restart by SIGKILL of 2.0s" in checks.violations[0].observed
    assert "s-1 rewritten (resourceVersion 5 -> 9)" in checks.violations[0].observed


def _stream(*entries: tuple[str, str, str]) -> HealthSeen:
    return HealthSeen({(NODE, device): (health, message) for device, health, message in entries}, 1, 0.1)


def test_a_failed_device_must_be_reported_unhealthy_with_a_message_and_no_other_one() -> None:
    model, _ = _model()
    model.made_unhealthy((NODE, "gpu-0"))
    settled = inv.health_settled(model)
    right = _stream(("gpu-0", "UNHEALTHY", "ECC"), ("gpu-1", "HEALTHY", ""))
    assert settled(right.devices) and not settled(_stream(("gpu-0", "HEALTHY", "")).devices)
    checks = inv.Checks()
    inv.check_hooked_health(model, right, checks)
    assert not checks.violations and {inv.HOOKED_UNHEALTHY, inv.NOT_FAILED_NOT_UNHEALTHY} <= checks.exercised
    for seen, broken in [
        (_stream(("gpu-0", "HEALTHY", "ok")), inv.HOOKED_UNHEALTHY),
        (_stream(("gpu-0", "UNHEALTHY", " ")), inv.UNHEALTHY_MESSAGE),
        (_stream(("gpu-0", "UNHEALTHY", "x"), ("gpu-1", "UNHEALTHY", "x")), inv.NOT_FAILED_NOT_UNHEALTHY),
        (HealthSeen(error="UNIMPLEMENTED: no"), inv.HOOKED_UNHEALTHY),
    ]:
        checks = inv.Checks()
        inv.check_hooked_health(model, seen, checks)
        assert _broken(checks) == [broken], seen


def test_a_device_failed_before_a_restart_is_not_judged_until_a_hook_sets_it_again() -> None:
    model, _ = _model()
    model.made_unhealthy((NODE, "gpu-0"))
    model.restarted()
    checks = inv.Checks()
    inv.check_hooked_health(model, _stream(("gpu-0", "UNHEALTHY", "x"), ("gpu-1", "HEALTHY", "")), checks)
    assert not checks.violations
    model.made_healthy((NODE, "gpu-0"))
    inv.check_hooked_health(model, _stream(("gpu-0", "UNHEALTHY", "x")), checks)
    assert _broken(checks) == [inv.NOT_FAILED_NOT_UNHEALTHY]


def test_the_config_applying_to_a_request_shows_in_the_cdi_edits_and_status_data_of_its_devices() -> None:
    shape = ClaimShape((RequestShape(1, class_config=0), RequestShape(1)), (ClaimConfig(1, ("req-0",)),))
    effects = (ConfigEffect(("SHARING", "A"), {"sharing": "A"}), ConfigEffect(("SHARING", "B"), {"sharing": "B"}))
    model = Model(NODE, DRIVER, capacity=3, config_effects=effects)
    claim = model.add(ClaimRef("ns", "u1", "claim-1"), shape, ALLOCATED)
    model.prepared_ok(claim, answered_devices(RIGHT))

    def seen(sharing: str, data: dict[str, str] | None = None) -> Observation:
        devices = [
            {"name": "u1-gpu-0", "containerEdits": {"env": [f"SHARING={sharing}"]}},
            {"name": "u1-gpu-1", "containerEdits": {"env": []}},
        ]
        spec = json.dumps({"kind": "example.com/gpu", "devices": devices})
        entries = [{"driver": DRIVER, "pool": NODE, "device": "gpu-0", **({"data": data} if data else {})}]
        return Observation({"u1.json": spec}, {"u1": entries}, {NODE: POOL})

    for observed, broken in [
        (seen("B"), []),
        (seen("B", {"sharing": "B"}), []),
        (seen("A"), [inv.CONFIG_APPLIED]),
        (seen("B", {"sharing": "A"}), [inv.CONFIG_APPLIED]),
    ]:
        checks = inv.Checks()
        inv._check_config_effects(model, observed, checks)
        assert _broken(checks) == broken, observed
        assert inv.CONFIG_APPLIED in checks.exercised


def test_a_device_of_a_prepared_claim_reported_before_must_stay_in_the_reports() -> None:
    model, claim = _model()
    model.pools[NODE] = PoolSeen(3, POOL.devices)
    model.prepared_ok(claim, answered_devices(RIGHT))
    every = frozenset((NODE, d) for d in POOL.devices)
    without = every - {(NODE, "gpu-0")}
    checks = inv.Checks()
    inv.check_health(model, HealthReading(("v1",), {"v1": without}), checks)
    assert not checks.violations and inv.HEALTH_KEPT not in checks.exercised  # nothing reported before
    model.health_reported |= every
    model.restarted()
    inv.check_health(model, HealthReading(("v1",), {"v1": without}), checks)
    assert _broken(checks) == [inv.HEALTH_KEPT]
