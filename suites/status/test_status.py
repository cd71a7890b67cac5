"""Driver status and readiness layers: what the driver reports in status.devices, and whether the pod starts.

For every scenario with a scheduled pod, the test plays the kubelet of the node: it calls NodePrepareResources
(within the scenario's deadline), checks the outcome and the claim's status.devices, starts the containers (kwok
then marks the pod Ready), and finally unprepares, after which this driver's entries must be gone.

status.devices is optional in the API, and so is every field of an entry beyond driver, pool and device: a
driver that declares statusDevices (networkData) must write entries (networkData); a Ready condition, one entry
per device and entries removed after unprepare are what users want beyond that (defensive). The obligations are
in `dra_conformance/model/registry/status.yaml`.
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
from dra_conformance.model.findings import Obligations
from dra_conformance.scenarios.catalog import Scenario
from dra_conformance.scenarios.runner import ScenarioRun


def _ready(run: ScenarioRun, pod: str) -> bool:
    return pod_ready(run.read_pod(pod))


def _status_devices(run: ScenarioRun, claim: dict[str, Any]) -> list[dict[str, Any]]:
    return device_statuses(run.tracker.get(RESOURCE_API, "ResourceClaim", claim["metadata"]["name"], run.namespace))


def _prepare(
    run: ScenarioRun, kubelet: KubeletRole, claims: dict[str, dict[str, Any]]
) -> dict[str, tuple[str, ClaimAnswer | None]]:
    """Prepare every claim of a pod; per claim: (outcome, answer) with outcome ok / error / deadline-exceeded.

    The proto lets a driver report a failed claim in its answer or fail the whole call; both are an error here.
    """
    deadline = run.scenario.prepare_deadline or KUBELET_CALL_TIMEOUT
    refs = {use: run.ref(claim) for use, claim in claims.items()}
    try:
        result = kubelet.prepare(run.endpoint, list(refs.values()), timeout=deadline)
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            return {use: ("deadline-exceeded", None) for use in refs}
        # A whole-call error fails every claim of the call, as the kubelet reads it: the contract allows it.
        failed = ClaimAnswer(error=f"whole call: {error.code().name}: {error.details()}")
        return {use: ("error", failed) for use in refs}
    return {
        use: ("error" if result.claims[ref.uid].error else "ok", result.claims[ref.uid]) for use, ref in refs.items()
    }


def _check_status_entries(
    obligations: Obligations,
    run: ScenarioRun,
    use: str,
    claim: dict[str, Any],
    expected: dict[str, Any],
    profile: DriverProfile,
    *,
    prepared: bool,
) -> None:
    """What this driver wrote into the claim's status.devices, by the obligations of its declared capabilities.

    Entries only for allocated devices, `ips` in CIDR form, at most 8 conditions and 10 Ki of data are validated by
    the API server itself: the cluster's doing, not checked here.
    """
    where = f"claim {use} ({claim['metadata']['name']})"
    mine = [e for e in _status_devices(run, claim) if e["driver"] == run.target.driver]
    if profile.declares(Capability.STATUS_DEVICES):
        if prepared:  # a driver whose prepare failed has nothing to report as configured
            obligations.check("status.declared-status-written", bool(mine), mine, where)
        if "statusDevices" in expected:
            obligations.check(
                "status.entry-per-allocated-device",
                len(mine) == expected["statusDevices"],
                {"count": len(mine), "allocated": expected["statusDevices"], "entries": mine},
                where,
            )
    for entry in mine:
        ready = device_condition(entry, "Ready")
        obligations.check(
            "status.ready-condition-true",
            ready is not None and ready["status"] == "True",
            entry.get("conditions"),
            f"{where} device {entry['device']}",
        )
    if expected.get("networkData") and profile.declares(Capability.NETWORK_DATA):
        networked = [e for e in mine if e.get("networkData")]
        obligations.check("status.declared-network-data-written", bool(networked), mine, where)
        for entry in networked:
            network = entry["networkData"]
            obligations.check(
                "status.network-data-complete",
                bool(network.get("interfaceName") and network.get("hardwareAddress")),
                network,
                f"{where} device {entry['device']}",
            )


@pytest.mark.scenarios(needs_prepare=True)
@pytest.mark.capability("statusDevices")
def test_driver_status_and_readiness_match_the_scenario(
    scenario: Scenario,
    scenario_run: Callable[[Scenario], ScenarioRun],
    kubelet: KubeletRole,
    driver_profile: DriverProfile,
    obligations: Obligations,
) -> None:
    run = scenario_run(scenario)
    scheduled = [pod for pod in run.pods if run.outcomes[pod].scheduled]
    obligations.check(
        "status.scenario-pod-scheduled", bool(scheduled), [o.scheduled_condition for o in run.outcomes.values()]
    )
    for pod in scheduled:
        expected = run.expected(pod)
        obligations.check("status.pod-not-ready-before-prepare", not _ready(run, pod), run.read_pod(pod).status)
        claims = run.pod_claims(pod)
        outcomes = _prepare(run, kubelet, claims)
        for use, (outcome, answer) in outcomes.items():
            want = expected.get("claims", {}).get(use, {})
            where = f"pod {pod} claim {use}"
            obligations.check(
                "status.prepare-outcome-as-expected",
                outcome == want.get("prepare", "ok"),
                f"prepare {outcome} (expected {want.get('prepare', 'ok')}): {answer}",
                where,
            )
            if want.get("error"):
                obligations.check(
                    "status.injected-fault-reported",
                    answer is not None and want["error"] in answer.error,
                    answer,
                    where,
                )
        if scenario.recover:
            control = run.target.control
            if control is None:
                obligations.fail("status.recovery-precondition", f"driver {run.target.driver} has no fault switches")
            control.set_faults([])
            outcomes = _prepare(run, kubelet, claims)
            failed = {use: answer for use, (outcome, answer) in outcomes.items() if outcome != "ok"}
            obligations.check("status.prepare-succeeds-after-fault-cleared", not failed, failed, f"pod {pod}")
        for use, claim in claims.items():
            want = expected.get("claims", {}).get(use, {})
            prepared = outcomes[use][0] == "ok"
            _check_status_entries(obligations, run, use, claim, want, driver_profile, prepared=prepared)

        if run.target.hold is not None:
            # A node a real kubelet serves: the pod is held from that kubelet so that only this check prepares its
            # claims, and its readiness is the kubelet's, which suites/kubelet checks with pods it runs.
            continue
        if all(outcome == "ok" for outcome, _ in outcomes.values()):
            kubelet.start_containers(run.namespace, run.pods[pod])
            waits.until(
                functools.partial(_ready, run, pod), bool, timeout=run.timeouts.pod_ready, what=f"pod {pod} Ready"
            )
        obligations.check(
            "status.pod-ready-as-expected",
            _ready(run, pod) == expected.get("ready", True),
            f"Ready={_ready(run, pod)}, expected {expected.get('ready', True)}",
            f"pod {pod}",
        )

    for pod in scheduled:
        claims = run.pod_claims(pod)
        answers = kubelet.unprepare(run.endpoint, [run.ref(c) for c in claims.values()]).claims
        obligations.check(
            "status.unprepare-succeeds", not any(a.error for a in answers.values()), answers, f"pod {pod}"
        )
        for use, claim in claims.items():
            left = [e for e in _status_devices(run, claim) if e["driver"] == run.target.driver]
            obligations.check("status.entries-removed-after-unprepare", not left, left, f"pod {pod} claim {use}")
