"""Driver status and readiness layers: what the driver reports in status.devices, and whether the pod starts.

For every scenario with a scheduled pod, the test plays the kubelet of the node: it calls NodePrepareResources
(within the scenario's deadline), checks the outcome and the claim's status.devices, starts the containers (kwok
then marks the pod Ready), and finally unprepares, after which this driver's entries must be gone.

status.devices is optional in the API: a driver whose profile declares it must write one entry per expected
device, with a Ready condition and networkData where the device has it; any driver's entries, declared or not,
must be its own and for allocated devices.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from dra_conformance.driver.profile import Capability, DriverProfile
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API
from dra_conformance.kube.claims import device_condition, device_statuses
from dra_conformance.kube.pods import pod_ready
from dra_conformance.kubelet.client import KUBELET_CALL_TIMEOUT, ClaimAnswer
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.scenarios.catalog import Scenario
from dra_conformance.scenarios.runner import ScenarioRun


def _ready(run: ScenarioRun, pod: str) -> bool:
    return pod_ready(run.read_pod(pod))


def _status_devices(run: ScenarioRun, claim: dict[str, Any]) -> list[dict[str, Any]]:
    return device_statuses(run.tracker.get(RESOURCE_API, "ResourceClaim", claim["metadata"]["name"], run.namespace))


def _prepare(
    run: ScenarioRun, kubelet: KubeletRole, claims: dict[str, dict[str, Any]]
) -> dict[str, tuple[str, ClaimAnswer | None]]:
    """Prepare every claim of a pod; per claim: (outcome, answer) with outcome ok / error / deadline-exceeded."""
    deadline = run.scenario.prepare_deadline or KUBELET_CALL_TIMEOUT
    refs = {use: run.ref(claim) for use, claim in claims.items()}
    try:
        result = kubelet.prepare(run.endpoint, list(refs.values()), timeout=deadline)
    except grpc.RpcError as error:
        if error.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
            raise
        return {use: ("deadline-exceeded", None) for use in refs}
    return {
        use: ("error" if result.claims[ref.uid].error else "ok", result.claims[ref.uid]) for use, ref in refs.items()
    }


def _check_status_entries(
    run: ScenarioRun, use: str, claim: dict[str, Any], expected: dict[str, Any], *, declared: bool
) -> None:
    entries = _status_devices(run, claim)
    where = f"claim {use} ({claim['metadata']['name']})"
    if declared and "statusDevices" in expected:
        assert len(entries) == expected["statusDevices"], f"{where}: status.devices {entries}"
    allocated = {(r["pool"], r["device"]) for r in claim["status"]["allocation"]["devices"]["results"]}
    for entry in entries:
        assert entry["driver"] == run.target.driver, f"{where}: entry of another driver: {entry}"
        assert (entry["pool"], entry["device"]) in allocated, f"{where}: entry for an unallocated device: {entry}"
        ready = device_condition(entry, "Ready")
        assert ready is not None and ready["status"] == "True", (
            f"{where}: Ready condition of {entry['device']}: {entry}"
        )
        if declared and expected.get("networkData"):
            network = entry.get("networkData") or {}
            assert network.get("interfaceName") and network.get("hardwareAddress"), f"{where}: networkData {network}"
            assert network.get("ips") and all("/" in ip for ip in network["ips"]), (
                f"{where}: ips must be CIDRs: {network}"
            )


@pytest.mark.scenarios(needs_prepare=True)
@pytest.mark.capability("statusDevices")
def test_driver_status_and_readiness_match_the_scenario(
    scenario: Scenario,
    scenario_run: Callable[[Scenario], ScenarioRun],
    kubelet: KubeletRole,
    driver_profile: DriverProfile,
) -> None:
    declared = driver_profile.declares(Capability.STATUS_DEVICES)
    run = scenario_run(scenario)
    scheduled = [pod for pod in run.pods if run.outcomes[pod].scheduled]
    assert scheduled, f"no pod was scheduled: {[o.scheduled_condition for o in run.outcomes.values()]}"
    for pod in scheduled:
        expected = run.expected(pod)
        assert not _ready(run, pod), f"pod {pod} Ready before the kubelet prepared its claims"
        claims = run.pod_claims(pod)
        outcomes = _prepare(run, kubelet, claims)
        for use, (outcome, answer) in outcomes.items():
            want = expected.get("claims", {}).get(use, {})
            assert outcome == want.get("prepare", "ok"), f"pod {pod} claim {use}: prepare {outcome}: {answer}"
            if want.get("error"):
                assert answer is not None and want["error"] in answer.error, f"pod {pod} claim {use}: error {answer}"
        if scenario.recover:
            assert run.target.control is not None, f"scenario {scenario.id} recovers from a fault it cannot switch"
            run.target.control.set_faults([])
            outcomes = _prepare(run, kubelet, claims)
            failed = {use: answer for use, (outcome, answer) in outcomes.items() if outcome != "ok"}
            assert not failed, f"pod {pod}: prepare after the fault was switched off: {failed}"
        for use, claim in claims.items():
            _check_status_entries(run, use, claim, expected.get("claims", {}).get(use, {}), declared=declared)

        if all(outcome == "ok" for outcome, _ in outcomes.values()):
            kubelet.start_containers(run.namespace, run.pods[pod])
            waits.until(
                functools.partial(_ready, run, pod), bool, timeout=run.timeouts.pod_ready, what=f"pod {pod} Ready"
            )
        assert _ready(run, pod) == expected.get("ready", True), f"pod {pod}: Ready={_ready(run, pod)}"

    for pod in scheduled:
        claims = run.pod_claims(pod)
        answers = kubelet.unprepare(run.endpoint, [run.ref(c) for c in claims.values()]).claims
        assert not any(a.error for a in answers.values()), f"pod {pod}: unprepare {answers}"
        for use, claim in claims.items():
            left = [e for e in _status_devices(run, claim) if e["driver"] == run.target.driver]
            assert not left, f"pod {pod} claim {use}: status.devices left after unprepare: {left}"
