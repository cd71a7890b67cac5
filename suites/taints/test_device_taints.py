"""Device taints: None informs, NoSchedule keeps new allocations away, NoExecute evicts; a rollout takes them in order.

Every check taints only devices of its own `taint_target`, through DeviceTaintRules (GA in resource.k8s.io/v1 on
1.37), and waits for the eviction controller's condition on the rule before it judges what did not happen: that
condition, for the rule's current generation, is the evidence the controller has seen the change.
"""

from __future__ import annotations

import functools
import json
import secrets
import time
from collections.abc import Sequence
from typing import Any

import allure
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.driver.pool import PoolState, node_pools
from dra_conformance.driver.profile import DriverProfile
from dra_conformance.driver.taint_target import TaintTarget
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API, Manifest
from dra_conformance.kube.device_taints import (
    EVICTED_REASON,
    DeviceSelection,
    Effect,
    RolloutLog,
    allocated_devices,
    claim_toleration,
    observed_condition,
    taint_rule,
)
from dra_conformance.kube.pods import describe_pod, scheduled_condition
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import allocate
from dra_conformance.report.records import RunRecords
from dra_conformance.timeouts import Timeouts

# A NoExecute toleration long enough to tell from an immediate eviction on a busy machine, short enough for CI.
TOLERATION_SECONDS = 6
# The API server sets a taint's timeAdded in whole seconds, so eviction may come up to 1 s before
# creation + tolerationSeconds as measured here.
TIME_ADDED_RESOLUTION = 1.0
# Eviction is measured by polling the pod; this bounds the error of each figure.
EVICTION_POLL = 0.2
RECORD_KIND = "device-taints"


def _taint_key() -> str:
    return f"dra-conformance.io/taint-{secrets.token_hex(3)}"


class TaintCheck:
    """One test's pods, claims and rules on its taint target."""

    def __init__(
        self, target: TaintTarget, tracker: ResourceTracker, api_client: client.ApiClient, timeouts: Timeouts
    ) -> None:
        """Work on `target` through `tracker`."""
        self.target, self.tracker, self.timeouts = target, tracker, timeouts
        self.core = client.CoreV1Api(api_client)
        self.namespace = target.build.namespace
        self.device_class = str(tracker.create(target.build.device_class())["metadata"]["name"])

    def pod(self, tolerations: Sequence[Manifest] = ()) -> tuple[str, str]:
        """A pod with a claim of its own (tolerating `tolerations`) on the target node; (pod, claim) names.

        It returns once the scheduler has allocated the claim and bound the pod: from then on the claim is
        reserved for the pod, which is all eviction looks at (on fake nodes nothing prepares the claim).
        """
        allocated = allocate(
            self.tracker,
            self.target.build,
            self.core.api_client,
            self.device_class,
            timeout=self.timeouts.pod_scheduled,
            node=self.target.node,
            tolerations=self.target.tolerations,
            device_tolerations=tuple(tolerations),
        )
        return allocated.pod["metadata"]["name"], allocated.claim["metadata"]["name"]

    def unbound_pod(self) -> str:
        """A pod with a claim of its own pinned to the target node, not waited for (it may stay unschedulable)."""
        build = self.target.build
        claim = self.tracker.create(build.claim(self.device_class))["metadata"]["name"]
        pod = build.pod(claim=claim, node=self.target.node, tolerations=self.target.tolerations)
        return str(self.tracker.create(pod)["metadata"]["name"])

    def claim(self, name: str) -> Manifest:
        """The claim as the API returns it."""
        return self.tracker.get(RESOURCE_API, "ResourceClaim", name, self.namespace)

    def device_of(self, claim: str) -> DeviceSelection:
        """The one device allocated to `claim`."""
        devices = allocated_devices(self.claim(claim))
        assert len(devices) == 1, f"claim {claim} has {len(devices)} allocated devices, expected 1: {devices}"
        return devices[0]

    def rule(self, selection: DeviceSelection, key: str, effect: Effect) -> str:
        """Create a DeviceTaintRule; its name."""
        manifest = taint_rule(self.target.build.cluster_name("taint"), selection, key, effect)
        return str(self.tracker.create(manifest)["metadata"]["name"])

    def set_effect(self, rule: str, effect: Effect) -> None:
        """Change the rule's effect (a new generation)."""
        self.tracker.resource(RESOURCE_API, "DeviceTaintRule").patch(
            name=rule, body={"spec": {"taint": {"effect": str(effect)}}}, content_type="application/merge-patch+json"
        )

    def observed(self, rule: str) -> Manifest:
        """The rule's condition once the eviction controller has processed its current generation."""
        read = functools.partial(self.tracker.get, RESOURCE_API, "DeviceTaintRule", rule)
        found = waits.until(
            read,
            lambda current: observed_condition(current) is not None,
            timeout=self.timeouts.taint_observed,
            what=f"EvictionInProgress condition of DeviceTaintRule {rule} for its current generation",
            describe=lambda current: json.dumps(current.get("status")),
        )
        return observed_condition(found) or {}

    def untouched(self, pod: str) -> client.V1Pod:
        """The pod, asserted to be neither deleted nor marked for deletion."""
        current = self.core.read_namespaced_pod(pod, self.namespace)
        assert current.metadata.deletion_timestamp is None, f"pod {pod} is being deleted: {describe_pod(current)}"
        return current

    def evicted_after(self, pod: str, since: float, timeout: float) -> tuple[float, str]:
        """Seconds from `since` (monotonic) until the pod is marked for deletion or gone, and what was seen."""
        seen: dict[str, Any] = {}

        def state() -> str:
            try:
                current = self.core.read_namespaced_pod(pod, self.namespace)
            except ApiException as error:
                if error.status == 404:
                    return "gone"
                raise
            reasons = [c.reason for c in current.status.conditions or [] if c.type == "DisruptionTarget"]
            seen["disruption"] = reasons or seen.get("disruption")
            assert not reasons or EVICTED_REASON in reasons, f"pod {pod} disrupted by something else: {reasons}"
            return "deleting" if current.metadata.deletion_timestamp is not None else "present"

        waits.until(
            state,
            lambda s: s != "present",
            timeout=timeout,
            what=f"pod {pod} evicted",
            max_interval=EVICTION_POLL,
        )
        return time.monotonic() - since, f"DisruptionTarget reasons seen: {seen.get('disruption')}"


@pytest.fixture
def taints(
    taint_target: TaintTarget, tracker: ResourceTracker, api_client: client.ApiClient, timeouts: Timeouts
) -> TaintCheck:
    """The test's pods, claims and rules on its taint target."""
    return TaintCheck(taint_target, tracker, api_client, timeouts)


def _record(request: pytest.FixtureRequest, run_records: RunRecords, figures: dict[str, Any]) -> None:
    text = json.dumps(figures, indent=2)
    allure.attach(text, "device taint figures", allure.attachment_type.JSON)
    request.node.user_properties.append(("device-taints", text))
    run_records.add(RECORD_KIND, {"check": request.node.nodeid, **figures})


def test_effect_none_leaves_running_pods_alone_and_reports_what_no_execute_would_do(taints: TaintCheck) -> None:
    pod, claim = taints.pod()
    device = taints.device_of(claim)
    rule = taints.rule(device, _taint_key(), Effect.NONE)
    condition = taints.observed(rule)
    allure.attach(json.dumps(condition, indent=2), "EvictionInProgress condition", allure.attachment_type.JSON)
    assert condition.get("status") == "False", f"effect None must not put an eviction in progress: {condition}"
    assert condition.get("message"), f"the condition says nothing about what NoExecute would evict: {condition}"
    taints.untouched(pod)
    assert taints.device_of(claim) == device, f"claim {claim} lost device {device} under an effect-None taint"


def test_a_slice_taint_with_effect_none_keeps_the_device_allocatable_and_its_pod_running(
    taints: TaintCheck, driver_profile: DriverProfile
) -> None:
    control = taints.target.control
    if control is None:
        pytest.skip(
            f"not applicable: the suite cannot make {driver_profile.driver} publish a taint in its own slices "
            "(the reference driver does through a fault)"
        )
    running, claim = taints.pod()
    device = taints.device_of(claim)
    control.set_faults([{"mode": "informational-taint"}])  # every device of the pool; undone when the driver stops

    def pool() -> PoolState | None:
        return node_pools(taints.core.api_client, device.driver, taints.target.node).get(device.pool)

    published = waits.until(
        pool,
        lambda p: p is not None and all("None" in p.taint_effects.get(d, ()) for d in p.devices),
        timeout=taints.timeouts.driver_ready,
        what=f"every device of pool {device.pool} tainted with effect None in the driver's slice",
        describe=lambda p: p.taint_effects if p is not None else "no pool",
    )
    _, other = taints.pod()  # no toleration: effect None must not keep it off the tainted devices
    assert taints.device_of(other).device != device.device, f"two claims hold {device}"
    taints.untouched(running)
    assert taints.device_of(claim) == device, f"claim {claim} lost its device under a slice taint None: {published}"


def test_no_schedule_keeps_new_allocations_off_tainted_devices_and_running_pods_in_place(
    taints: TaintCheck,
) -> None:
    running, claim = taints.pod()
    pool = taints.device_of(claim)
    key = _taint_key()
    rule = taints.rule(DeviceSelection(pool.driver, pool.pool), key, Effect.NO_SCHEDULE)
    taints.observed(rule)
    blocked = taints.unbound_pod()
    state = waits.until(
        functools.partial(taints.core.read_namespaced_pod, blocked, taints.namespace),
        lambda p: scheduled_condition(p) is not None and scheduled_condition(p).status == "False",
        timeout=taints.timeouts.pod_scheduled,
        what=f"pod {blocked} found unschedulable while every device of pool {pool.pool} is tainted NoSchedule",
        describe=describe_pod,
    )
    assert state.spec.node_name is None, f"pod {blocked} was bound despite the taint: {describe_pod(state)}"
    _, tolerating = taints.pod((claim_toleration(key, Effect.NO_SCHEDULE),))
    assert taints.device_of(tolerating).pool == pool.pool, "a tolerating claim is allocated from the tainted pool"
    taints.untouched(running)
    assert taints.device_of(claim) == pool, f"claim {claim} lost its device under a NoSchedule taint"


def test_no_execute_evicts_pods_that_do_not_tolerate_and_keeps_those_that_do(
    taints: TaintCheck, request: pytest.FixtureRequest, run_records: RunRecords
) -> None:
    key = _taint_key()
    doomed, doomed_claim = taints.pod()
    kept, _ = taints.pod((claim_toleration(key, Effect.NO_EXECUTE),))
    pool = taints.device_of(doomed_claim)
    start = time.monotonic()
    rule = taints.rule(DeviceSelection(pool.driver, pool.pool), key, Effect.NO_EXECUTE)
    seconds, seen = taints.evicted_after(doomed, start, taints.timeouts.eviction)
    condition = taints.observed(rule)
    taints.untouched(kept)
    _record(request, run_records, {"eviction_seconds": round(seconds, 3), "seen": seen, "condition": condition})
    assert condition.get("reason") != "NotStarted", f"rule {rule} reports no eviction after one: {condition}"


def test_toleration_seconds_hold_eviction_back_until_they_have_passed(
    taints: TaintCheck, request: pytest.FixtureRequest, run_records: RunRecords
) -> None:
    key = _taint_key()
    pod, claim = taints.pod((claim_toleration(key, Effect.NO_EXECUTE, TOLERATION_SECONDS),))
    device = taints.device_of(claim)
    start = time.monotonic()
    taints.rule(device, key, Effect.NO_EXECUTE)
    seconds, seen = taints.evicted_after(pod, start, TOLERATION_SECONDS + taints.timeouts.eviction)
    figures = {"toleration_seconds": TOLERATION_SECONDS, "eviction_seconds": round(seconds, 3), "seen": seen}
    _record(request, run_records, figures)
    earliest = TOLERATION_SECONDS - TIME_ADDED_RESOLUTION
    assert seconds >= earliest, (
        f"pod {pod} tolerating the taint for {TOLERATION_SECONDS} s was evicted after {seconds:.2f} s "
        f"(earliest allowed {earliest:.1f} s)"
    )


def test_a_rollout_reaches_no_execute_only_after_none_and_then_no_schedule(
    taints: TaintCheck, request: pytest.FixtureRequest, run_records: RunRecords
) -> None:
    pod, claim = taints.pod()
    device = taints.device_of(claim)
    key = _taint_key()
    start = time.monotonic()
    rule = taints.rule(device, key, Effect.NONE)
    log = RolloutLog(rule)
    condition = taints.observed(rule)
    taints.untouched(pod)
    log.record(Effect.NONE, start, f"controller reported: {condition.get('message')}; pod {pod} untouched")
    at = time.monotonic()
    taints.set_effect(rule, Effect.NO_SCHEDULE)
    taints.observed(rule)
    taints.untouched(pod)
    log.record(Effect.NO_SCHEDULE, at, f"controller observed the new generation; pod {pod} still running")
    at = time.monotonic()
    taints.set_effect(rule, Effect.NO_EXECUTE)
    seconds, seen = taints.evicted_after(pod, at, taints.timeouts.eviction)
    log.record(Effect.NO_EXECUTE, at, f"pod {pod} evicted after {seconds:.2f} s ({seen})")
    _record(request, run_records, {"rollout": log.to_json()})
    assert not log.skipped_steps(), f"rollout of {rule} skipped steps: {log.skipped_steps()}"
