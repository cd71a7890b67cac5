"""Rollout order of device taint effects, and what the suite reads from rules and claims."""

from __future__ import annotations

from dra_conformance.kube.builders import Builder
from dra_conformance.kube.device_taints import (
    DeviceSelection,
    Effect,
    RolloutLog,
    allocated_devices,
    claim_toleration,
    observed_condition,
    rollout_violations,
    taint_rule,
)

NONE, NO_SCHEDULE, NO_EXECUTE = Effect.NONE, Effect.NO_SCHEDULE, Effect.NO_EXECUTE


def test_a_rollout_in_order_has_no_skipped_steps_and_going_back_is_allowed() -> None:
    assert rollout_violations([NONE, NO_SCHEDULE, NO_EXECUTE]) == []
    assert rollout_violations([NONE, NO_SCHEDULE, NONE, NO_SCHEDULE]) == []


def test_each_skipped_step_is_named() -> None:
    assert rollout_violations([NO_EXECUTE]) == ["NoExecute without None, NoSchedule before it"]
    assert rollout_violations([NONE, NO_EXECUTE]) == ["NoExecute without NoSchedule before it"]
    assert rollout_violations([NONE, NO_SCHEDULE, NONE, NO_EXECUTE]) == ["NoExecute without NoSchedule before it"]


def test_rollout_log_reports_its_steps_relative_to_the_first() -> None:
    log = RolloutLog("rule-1")
    log.record(NONE, 10.0, "condition reported")
    log.record(NO_EXECUTE, 12.5, "pod evicted")
    report = log.to_json()
    assert [s["after_seconds"] for s in report["steps"]] == [0.0, 2.5]
    assert report["skipped"] == ["NoExecute without NoSchedule before it"]


def test_only_a_condition_for_the_current_generation_counts_as_observed() -> None:
    condition = {"type": "EvictionInProgress", "status": "False", "observedGeneration": 1}
    assert observed_condition({"metadata": {"generation": 2}, "status": {"conditions": [condition]}}) is None
    assert observed_condition({"metadata": {"generation": 1}, "status": {"conditions": [condition]}}) == condition


def test_rule_and_claim_manifests_carry_selector_taint_and_tolerations() -> None:
    rule = taint_rule("r", DeviceSelection("d.example.com", "node-a", "gpu-0"), "k/x", NO_SCHEDULE)
    assert rule["spec"]["deviceSelector"] == {"driver": "d.example.com", "pool": "node-a", "device": "gpu-0"}
    assert rule["spec"]["taint"]["effect"] == "NoSchedule"
    pool_only = taint_rule("r", DeviceSelection("d.example.com", "node-a"), "k/x", NONE)
    assert "device" not in pool_only["spec"]["deviceSelector"]
    build = Builder(namespace="ns", driver="d.example.com")
    claim = build.claim("class-1", tolerations=(claim_toleration("k/x", NO_EXECUTE, 5),))
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] == [
        {"key": "k/x", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
    ]
    assert "tolerations" not in build.claim("class-1")["spec"]["devices"]["requests"][0]["exactly"]


def test_allocated_devices_read_the_allocation_results() -> None:
    result = {"request": "req", "driver": "d", "pool": "p", "device": "gpu-1"}
    claim = {"status": {"allocation": {"devices": {"results": [result]}}}}
    assert allocated_devices(claim) == [DeviceSelection("d", "p", "gpu-1")]
    assert allocated_devices({"status": {}}) == []
