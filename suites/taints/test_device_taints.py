"""Device taints: None informs, NoSchedule keeps new allocations away, NoExecute evicts; a rollout takes them in order.

Every check taints only devices of its own `taint_target`, through DeviceTaintRules (GA in resource.k8s.io/v1 on
1.37), and waits for the eviction controller's condition on the rule before it judges what did not happen: that
condition, for the rule's current generation, is the evidence the controller has seen the change. What the scheduler
and the eviction controller do is the cluster's contract; getting the pods their devices before any taint, the
reference driver's slice taint and the check's own rollout order are the suite's preconditions. The obligations are
in `dra_conformance/model/registry/taints.yaml`.
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
from dra_conformance.errors import WaitTimeout
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
from dra_conformance.model.findings import Obligations
from dra_conformance.model.records import RunRecords
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
    """One test's pods, claims and rules on its taint target, and the obligations it checks on them."""

    def __init__(
        self,
        target: TaintTarget,
        tracker: ResourceTracker,
        api_client: client.ApiClient,
        timeouts: Timeouts,
        obligations: Obligations,
    ) -> None:
        """Work on `target` through `tracker`."""
        self.target, self.tracker, self.timeouts, self.obligations = target, tracker, timeouts, obligations
        self.core = client.CoreV1Api(api_client)
        self.namespace = target.build.namespace
        self.device_class = str(tracker.create(target.build.device_class())["metadata"]["name"])

    def pod(
        self, tolerations: Sequence[Manifest] = (), *, obligation: str = "taints.pod-allocated-before-taint"
    ) -> tuple[str, str]:
        """A pod with a claim of its own (tolerating `tolerations`) on the target node; (pod, claim) names.

        It returns once the scheduler has allocated the claim and bound the pod: from then on the claim is
        reserved for the pod, which is all eviction looks at (on fake nodes nothing prepares the claim). If the pod
        is not bound in time, `obligation` does not hold.
        """
        try:
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
        except WaitTimeout as error:
            self.obligations.fail(obligation, str(error), f"node {self.target.node}")
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

    def devices_of(self, claim: str) -> list[DeviceSelection]:
        """The devices allocated to `claim` now."""
        return allocated_devices(self.claim(claim))

    def device_of(self, claim: str) -> DeviceSelection:
        """The one device allocated to `claim` (it asks for one)."""
        devices = self.devices_of(claim)
        self.obligations.check(
            "taints.claim-gets-one-device", len(devices) == 1, f"{len(devices)} devices: {devices}", f"claim {claim}"
        )
        return devices[0]

    def keeps(self, claim: str, device: DeviceSelection, obligation: str) -> None:
        """`obligation`: `claim` still holds `device`, and nothing else."""
        devices = self.devices_of(claim)
        self.obligations.check(obligation, devices == [device], f"holds {devices}, had {device}", f"claim {claim}")

    def whole_pool(self, device: DeviceSelection) -> DeviceSelection:
        """The pool of `device`, once it is known to hold every device of the driver on the target node."""
        pools = node_pools(self.core.api_client, device.driver, self.target.node)
        self.obligations.check(
            "taints.tainted-pool-is-the-nodes-only-pool",
            set(pools) == {device.pool},
            [p.describe() for p in pools.values()],
            f"pool {device.pool} on {self.target.node}",
        )
        return DeviceSelection(device.driver, device.pool)

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
        try:
            found = waits.until(
                read,
                lambda current: observed_condition(current) is not None,
                timeout=self.timeouts.taint_observed,
                what=f"EvictionInProgress condition of DeviceTaintRule {rule} for its current generation",
                describe=lambda current: json.dumps(current.get("status")),
            )
        except WaitTimeout as error:
            self.obligations.fail("taints.rule-condition-for-its-generation", str(error), f"rule {rule}")
        condition = observed_condition(found)
        self.obligations.check("taints.rule-condition-for-its-generation", condition is not None, found, f"rule {rule}")
        return condition or {}

    def untouched(self, pod: str, obligation: str) -> None:
        """`obligation`: the pod is neither deleted nor marked for deletion."""
        try:
            current = self.core.read_namespaced_pod(pod, self.namespace)
        except ApiException as error:
            if error.status != 404:
                raise
            self.obligations.fail(obligation, "gone", f"pod {pod}")
        deleting = current.metadata.deletion_timestamp is not None
        observed = f"being deleted: {describe_pod(current)}" if deleting else "not deleted"
        self.obligations.check(obligation, not deleting, observed, f"pod {pod}")

    def evicted_after(self, pod: str, since: float, timeout: float, obligation: str) -> tuple[float, str]:
        """Seconds from `since` (monotonic) until the pod is marked for deletion or gone, and what was seen.

        `obligation`: the pod is evicted within `timeout`. Any DisruptionTarget reason other than the device-taint
        eviction controller's means something else disrupted the pod, which voids the check.
        """
        reasons: set[str] = set()

        def state() -> str:
            try:
                current = self.core.read_namespaced_pod(pod, self.namespace)
            except ApiException as error:
                if error.status == 404:
                    return "gone"
                raise
            reasons.update(c.reason for c in current.status.conditions or [] if c.type == "DisruptionTarget")
            return "deleting" if current.metadata.deletion_timestamp is not None else "present"

        try:
            waits.until(
                state,
                lambda s: s != "present",
                timeout=timeout,
                what=f"pod {pod} evicted",
                max_interval=EVICTION_POLL,
            )
            evicted: str | None = None
        except WaitTimeout as error:
            evicted = str(error)
        seconds = time.monotonic() - since
        seen = f"DisruptionTarget reasons seen: {sorted(reasons) or None}"
        others = reasons - {EVICTED_REASON}
        self.obligations.check("taints.pod-disrupted-only-by-device-taints", not others, seen, f"pod {pod}")
        self.obligations.check(obligation, evicted is None, evicted, f"pod {pod}")
        return seconds, seen


@pytest.fixture
def taints(
    taint_target: TaintTarget,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    timeouts: Timeouts,
    obligations: Obligations,
) -> TaintCheck:
    """The test's pods, claims and rules on its taint target."""
    return TaintCheck(taint_target, tracker, api_client, timeouts, obligations)


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
    where = f"rule {rule}"
    taints.obligations.check(
        "taints.none-condition-not-in-progress", condition.get("status") == "False", condition, where
    )
    taints.obligations.check(
        "taints.none-condition-says-what-no-execute-would-do", bool(condition.get("message")), condition, where
    )
    taints.untouched(pod, "taints.none-keeps-pods-and-devices")
    taints.keeps(claim, device, "taints.none-keeps-pods-and-devices")


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

    def pool() -> PoolState | None:
        return node_pools(taints.core.api_client, device.driver, taints.target.node).get(device.pool)

    def tainted_none(state: PoolState | None) -> bool:
        return state is not None and all("None" in state.taint_effects.get(d, ()) for d in state.devices)

    undo = control.set_faults([{"mode": "informational-taint"}])  # every device of the pool
    try:
        try:
            published = waits.until(
                pool,
                tainted_none,
                timeout=taints.timeouts.driver_ready,
                what=f"every device of pool {device.pool} tainted with effect None in the driver's slice",
                describe=lambda p: p.taint_effects if p is not None else "no pool",
            )
        except WaitTimeout as error:
            taints.obligations.fail("taints.reference-slice-taint-published", str(error), f"pool {device.pool}")
        taints.obligations.check(
            "taints.reference-slice-taint-published", tainted_none(published), published, f"pool {device.pool}"
        )
        # No toleration: effect None must not keep it off the tainted devices.
        _, other = taints.pod(obligation="taints.none-tainted-device-allocatable")
        taken = taints.device_of(other)
        taints.obligations.check(
            "taints.device-allocated-once",
            taken != device,
            f"claims {claim} and {other} both hold {device}",
            str(device),
        )
        taints.untouched(running, "taints.none-keeps-pods-and-devices")
        taints.keeps(claim, device, "taints.none-keeps-pods-and-devices")
    finally:
        undo()  # the driver the run installed serves other checks after this one


def test_no_schedule_keeps_new_allocations_off_tainted_devices_and_running_pods_in_place(
    taints: TaintCheck,
) -> None:
    running, claim = taints.pod()
    held = taints.device_of(claim)
    pool = taints.whole_pool(held)
    key = _taint_key()
    rule = taints.rule(pool, key, Effect.NO_SCHEDULE)
    taints.observed(rule)
    blocked = taints.unbound_pod()
    read = functools.partial(taints.core.read_namespaced_pod, blocked, taints.namespace)

    def refused(pod: client.V1Pod) -> bool:
        condition = scheduled_condition(pod)
        return condition is not None and condition.status == "False"

    try:
        state = waits.until(
            read,
            lambda p: p.spec.node_name is not None or refused(p),
            timeout=taints.timeouts.pod_scheduled,
            what=f"scheduling decision on pod {blocked} while every device of pool {pool.pool} is tainted NoSchedule",
            describe=describe_pod,
        )
    except WaitTimeout:
        state = read()
    taints.obligations.check(
        "taints.no-schedule-blocks-new-allocations",
        state.spec.node_name is None and refused(state),
        describe_pod(state),
        f"pod {blocked}",
    )
    _, tolerating = taints.pod(
        (claim_toleration(key, Effect.NO_SCHEDULE),), obligation="taints.tolerated-taint-allocatable"
    )
    got = taints.device_of(tolerating)
    taints.obligations.check(
        "taints.tolerated-taint-allocatable", got.pool == pool.pool, f"allocated {got}", f"claim {tolerating}"
    )
    taints.untouched(running, "taints.no-schedule-keeps-running-pods")
    taints.keeps(claim, held, "taints.no-schedule-keeps-running-pods")


def test_no_execute_evicts_pods_that_do_not_tolerate_and_keeps_those_that_do(
    taints: TaintCheck, request: pytest.FixtureRequest, run_records: RunRecords
) -> None:
    key = _taint_key()
    doomed, doomed_claim = taints.pod()
    kept, _ = taints.pod((claim_toleration(key, Effect.NO_EXECUTE),))
    pool = taints.whole_pool(taints.device_of(doomed_claim))
    start = time.monotonic()
    rule = taints.rule(pool, key, Effect.NO_EXECUTE)
    seconds, seen = taints.evicted_after(
        doomed, start, taints.timeouts.eviction, "taints.no-execute-evicts-intolerant-pods"
    )
    condition = taints.observed(rule)
    taints.untouched(kept, "taints.no-execute-spares-tolerating-pods")
    _record(request, run_records, {"eviction_seconds": round(seconds, 3), "seen": seen, "condition": condition})
    taints.obligations.check(
        "taints.rule-reports-the-eviction", condition.get("reason") != "NotStarted", condition, f"rule {rule}"
    )


@pytest.mark.waits_out(TOLERATION_SECONDS, "the pod's NoExecute toleration")
def test_toleration_seconds_hold_eviction_back_until_they_have_passed(
    taints: TaintCheck, request: pytest.FixtureRequest, run_records: RunRecords
) -> None:
    key = _taint_key()
    pod, claim = taints.pod((claim_toleration(key, Effect.NO_EXECUTE, TOLERATION_SECONDS),))
    device = taints.device_of(claim)
    start = time.monotonic()
    taints.rule(device, key, Effect.NO_EXECUTE)
    seconds, seen = taints.evicted_after(
        pod, start, TOLERATION_SECONDS + taints.timeouts.eviction, "taints.toleration-seconds-delay-eviction"
    )
    figures = {"toleration_seconds": TOLERATION_SECONDS, "eviction_seconds": round(seconds, 3), "seen": seen}
    _record(request, run_records, figures)
    earliest = TOLERATION_SECONDS - TIME_ADDED_RESOLUTION
    taints.obligations.check(
        "taints.toleration-seconds-delay-eviction",
        seconds >= earliest,
        f"evicted after {seconds:.2f} s, tolerating for {TOLERATION_SECONDS} s (earliest allowed: {earliest:.1f} s)",
        f"pod {pod}",
    )


def test_a_rule_rolled_out_none_then_no_schedule_then_no_execute_evicts_only_at_no_execute(
    taints: TaintCheck, request: pytest.FixtureRequest, run_records: RunRecords
) -> None:
    pod, claim = taints.pod()
    device = taints.device_of(claim)
    key = _taint_key()
    start = time.monotonic()
    rule = taints.rule(device, key, Effect.NONE)
    log = RolloutLog(rule)
    condition = taints.observed(rule)
    taints.untouched(pod, "taints.none-keeps-pods-and-devices")
    log.record(Effect.NONE, start, f"controller reported: {condition.get('message')}; pod {pod} untouched")
    at = time.monotonic()
    taints.set_effect(rule, Effect.NO_SCHEDULE)
    taints.observed(rule)
    taints.untouched(pod, "taints.no-schedule-keeps-running-pods")
    log.record(Effect.NO_SCHEDULE, at, f"controller observed the new generation; pod {pod} still running")
    at = time.monotonic()
    taints.set_effect(rule, Effect.NO_EXECUTE)
    seconds, seen = taints.evicted_after(pod, at, taints.timeouts.eviction, "taints.no-execute-evicts-intolerant-pods")
    log.record(Effect.NO_EXECUTE, at, f"pod {pod} evicted after {seconds:.2f} s ({seen})")
    _record(request, run_records, {"rollout": log.to_json()})
    taints.obligations.check("taints.rollout-in-order", not log.skipped_steps(), log.to_json(), f"rule {rule}")
