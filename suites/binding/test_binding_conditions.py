"""Binding conditions: a pod waits for its devices to be attached, and a failed attach makes the scheduler retry.

The scheduler's PreBind checks the conditions when it starts waiting and then every 5 seconds
(k8s.io/kubernetes v1.37.2 pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go:1726), so a pod is
bound at the first check after the driver set its conditions: each check here takes about that long. The
obligations are in `dra_conformance/model/registry/binding.yaml`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import allure
import pytest
from kubernetes import client

from dra_conformance.driver.binding import (
    BindingTarget,
    DeviceBinding,
    claim_changes,
    claim_status_writers,
    device_bindings,
    parse_time,
)
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API, ClaimUse, Manifest
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

# The scheduler's PreBind re-reads the claim this often while it waits for binding conditions (see above).
PREBIND_POLL = 5.0
# How long the reference driver's controller takes to attach: long enough that the pod is seen waiting before the
# condition is True, short enough to land before PreBind's second look.
ATTACH_DELAY = 2.0
# Reads of the claim and the pod while a check watches the binding progress: at most this far apart.
OBSERVE_INTERVAL = 0.5


@dataclass
class Progress:
    """What the check saw of one claim and its pod, read after read."""

    driver: str
    seen: list[str] = field(default_factory=list)
    # The pod was seen unbound while its claim was allocated and a binding condition was still pending.
    waiting: str = ""
    # The pod was seen bound while a binding condition was pending or a failure condition True.
    bound_early: str = ""
    # The first allocation seen, and whether an allocation was seen cleared after a failure condition.
    was_allocated: bool = False
    allocated: list[DeviceBinding] = field(default_factory=list)
    failed: str = ""
    cleared: str = ""

    def note(self, claim: Manifest, pod: Manifest | None) -> None:
        """Add one read of the claim (and the pod, where read) to what was seen."""
        node = (pod or {}).get("spec", {}).get("nodeName") or ""
        allocation = (claim.get("status") or {}).get("allocation")
        bindings = device_bindings(claim, self.driver)
        claim_state = f"claim allocated, {[_describe(b) for b in bindings]}" if allocation else "claim not allocated"
        state = claim_state if pod is None else f"pod node={node or '(unbound)'}; {claim_state}"
        if not self.seen or self.seen[-1] != state:
            self.seen.append(state)
        if allocation and not self.was_allocated:
            self.was_allocated, self.allocated = True, bindings
        if allocation and not node and any(b.pending for b in bindings) and not self.waiting:
            self.waiting = state
        if node and any(not b.ready for b in bindings) and not self.bound_early:
            self.bound_early = state
        if any(b.failed for b in bindings) and not self.failed:
            self.failed = state
        if self.failed and not allocation and not self.cleared:
            self.cleared = state


def _describe(binding: DeviceBinding) -> str:
    parts = [binding.device]
    parts += [f"{c}=True@{t}" for c, t in binding.true_since.items()]
    parts += [f"{c} pending" for c in binding.pending] + [f"{c} failed" for c in binding.failed]
    return " ".join(parts)


def _deploy(target: BindingTarget, tracker: ResourceTracker) -> tuple[Manifest, Manifest]:
    """A DeviceClass of the target's driver and a claim for one of its devices (all of them, for a leased node)."""
    device_class = tracker.create(target.builder.device_class())
    name = device_class["metadata"]["name"]
    if target.all_devices:
        spec = {
            "devices": {"requests": [{"name": "req", "exactly": {"deviceClassName": name, "allocationMode": "All"}}]}
        }
        claim = tracker.create(target.builder.claim_from_spec(spec))
    else:
        claim = tracker.create(target.builder.claim(name))
    return device_class, claim


def _start_pod(target: BindingTarget, tracker: ResourceTracker, claim: Manifest) -> Manifest:
    pod = target.builder.pod_with(
        [ClaimUse("devices", claim=claim["metadata"]["name"])], node=target.node, tolerations=target.tolerations
    )
    return tracker.create(pod)


def _observer(tracker: ResourceTracker, progress: Progress, claim: Manifest, pod: Manifest) -> Callable[[], Any]:
    namespace = claim["metadata"]["namespace"]

    def observe() -> tuple[Manifest, Manifest]:
        current = tracker.get(RESOURCE_API, "ResourceClaim", claim["metadata"]["name"], namespace)
        read = tracker.get("v1", "Pod", pod["metadata"]["name"], namespace)
        progress.note(current, read)
        return current, read

    return observe


def _attach_evidence(name: str, observed: dict[str, Any]) -> None:
    """What the check saw, in the report also when it passes (the scheduler's outcome, quoted)."""
    allure.attach(json.dumps(observed, indent=2), name, allure.attachment_type.JSON)


def _scheduled_at(pod: Manifest) -> str:
    condition: dict[str, Any] = next(
        (c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled"), {}
    )
    return str(condition.get("lastTransitionTime") or "")


def _pending_events(api_client: client.ApiClient, pod: Manifest) -> list[str]:
    """The scheduler's BindingConditionsPending events of the pod, as `reason: message`."""
    meta = pod["metadata"]
    events = client.CoreV1Api(api_client).list_namespaced_event(
        meta["namespace"], field_selector=f"involvedObject.name={meta['name']},reason=BindingConditionsPending"
    )
    return [f"{event.reason}: {event.message}" for event in events.items]


@pytest.mark.capability("bindingConditions")
@pytest.mark.waits_out(PREBIND_POLL, "the scheduler's PreBind poll")
def test_pod_is_bound_only_after_every_binding_condition_is_true_as_written_by_the_named_identity(
    binding_target: Callable[..., BindingTarget],
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    cluster: ClusterInfo,
    obligations: Obligations,
    timeouts: Timeouts,
) -> None:
    target = binding_target(attach_delay=ATTACH_DELAY)
    _, claim = _deploy(target, tracker)
    pod = _start_pod(target, tracker, claim)
    progress = Progress(target.driver)
    where = f"claim {claim['metadata']['name']} on {target.node}"
    try:
        _, bound = waits.until(
            _observer(tracker, progress, claim, pod),
            lambda seen: bool(seen[1]["spec"].get("nodeName")),
            timeout=timeouts.pod_scheduled + PREBIND_POLL,
            what=f"pod {pod['metadata']['name']} bound ({target.driver} on {target.node})",
            describe=lambda _seen: progress.seen,
            max_interval=OBSERVE_INTERVAL,
        )
    except WaitTimeout as error:
        obligations.check("binding.claim-allocated", progress.was_allocated, progress.seen, where)
        obligations.fail("binding.pod-bound-only-after-conditions-true", str(error), where)
    obligations.check("binding.claim-allocated", progress.was_allocated, progress.seen, where)
    obligations.check(
        "binding.allocated-devices-carry-binding-conditions", bool(progress.allocated), progress.seen, where
    )
    final_claim = tracker.get(RESOURCE_API, "ResourceClaim", claim["metadata"]["name"], claim["metadata"]["namespace"])
    final = device_bindings(final_claim, target.driver)
    scheduled_at = _scheduled_at(bound)
    # Times of the API have whole seconds: the pod is bound no earlier than the second its last condition turned True.
    last_true = max((parse_time(t) for b in final for t in b.true_since.values()), default=math.inf)
    in_order = bool(scheduled_at) and parse_time(scheduled_at) >= last_true
    observed = {
        "seen": progress.seen,
        "waiting": progress.waiting or "(never seen waiting)",
        "scheduler events": _pending_events(api_client, bound),
        "bound": f"node {bound['spec']['nodeName']}, PodScheduled=True at {scheduled_at}",
    }
    _attach_evidence("binding progress", observed)
    obligations.check(
        "binding.pod-bound-only-after-conditions-true",
        not progress.bound_early and all(b.ready for b in final) and in_order,
        observed,
        where,
    )
    if target.control is not None:
        attachments = [a for a in target.control.attachments() if a["claim"] == claim["metadata"]["uid"]]
        early = [
            f"{b.device}: {c} True at {t}, attach finished at {a['finishedAt']:.3f}"
            for b in final
            for c, t in b.true_since.items()
            for a in attachments
            if a["device"] == b.device and parse_time(t) < math.floor(a["finishedAt"])
        ]
        attached = {a["device"] for a in attachments if a["outcome"] == "attached"}
        unattached = [b.device for b in final if b.device not in attached]
        obligations.check(
            "binding.conditions-true-only-after-attach",
            not early and not unattached,
            {"attachments": attachments, "conditions": [_describe(b) for b in final], "early": early},
            where,
        )
    if cluster.audit_log is not None:
        writers = claim_status_writers(cluster.audit_log, claim["metadata"]["namespace"], claim["metadata"]["name"])
        others = {user: writes for user, writes in writers.items() if user != target.writer}
        wrote = any(w.endswith(("-> 200", "-> 201")) for w in writers.get(target.writer, []))
        obligations.check(
            "binding.conditions-written-by-named-identity",
            wrote and not others,
            {"named": target.writer, "status writers besides the control plane": writers},
            f"{where}, audit log {cluster.audit_log}",
        )


def _watch_claim(
    api_client: client.ApiClient,
    claim: Manifest,
    progress: Progress,
    done: Callable[[Manifest], bool],
    *,
    timeout: float,
    what: str,
) -> Manifest:
    """Follow every change of the claim from its creation on, until `done` holds for it.

    A watch, not reads: the scheduler clears an allocation and allocates again within milliseconds.
    """
    meta = claim["metadata"]
    for current in claim_changes(api_client, meta["namespace"], meta["name"], meta["resourceVersion"], timeout):
        progress.note(current, None)
        if done(current):
            return current
    raise WaitTimeout(what, timeout, last_observed=progress.seen)


@pytest.mark.capability("bindingConditions")
@pytest.mark.waits_out(PREBIND_POLL, "the scheduler's PreBind poll")
def test_binding_failure_condition_makes_the_scheduler_clear_the_allocation_and_allocate_again(
    binding_target: Callable[..., BindingTarget],
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    obligations: Obligations,
    timeouts: Timeouts,
) -> None:
    target = binding_target(attach_delay=0)
    if target.control is None:
        pytest.skip(
            f"not applicable: needs the reference driver's attach-failure switch; nothing makes the attach of "
            f"{target.driver} fail on demand"
        )
    _, claim = _deploy(target, tracker)
    where = f"claim {claim['metadata']['name']} on {target.node}"
    undo = target.control.set_faults(
        [{"mode": "attach-failure", "claim": claim["metadata"]["uid"], "message": "fabric port down"}]
    )
    progress = Progress(target.driver)
    switched_off: list[bool] = []

    def cleared_then_allocated(current: Manifest) -> bool:
        if progress.cleared and not switched_off:
            undo()  # the next attach succeeds: the retry can finish
            switched_off.append(True)
        return bool(progress.cleared) and bool((current.get("status") or {}).get("allocation"))

    try:
        _start_pod(target, tracker, claim)
        again = _watch_claim(
            api_client,
            claim,
            progress,
            cleared_then_allocated,
            timeout=timeouts.pod_scheduled + 2 * PREBIND_POLL,
            what=f"allocation of {claim['metadata']['name']} cleared after its binding failure condition, then again",
        )
    except WaitTimeout as error:
        obligations.check("binding.claim-allocated", progress.was_allocated, progress.seen, where)
        obligations.check("binding.injected-failure-written", bool(progress.failed), progress.seen, where)
        obligations.fail("binding.failure-condition-clears-allocation", str(error), where)
    finally:
        target.control.restore([])
    obligations.check("binding.claim-allocated", progress.was_allocated, progress.seen, where)
    obligations.check("binding.injected-failure-written", bool(progress.failed), progress.seen, where)
    observed = {
        "failure": progress.failed,
        "cleared": progress.cleared,
        "allocated again": [_describe(b) for b in device_bindings(again, target.driver)],
        "seen": progress.seen,
    }
    _attach_evidence("binding failure and retry", observed)
    obligations.check("binding.failure-condition-clears-allocation", bool(progress.cleared), observed, where)
