"""A container that restarts keeps its claim as prepared; a prepare that fails part way leaves nothing behind.

Both run on a node a real kubelet serves. The kubelet-side interposer sees every NodePrepareResources the kubelet
makes and the driver's answer; the node's CDI specs are read before and after. A container restart creates no new
sandbox, so the kubelet prepares nothing again; where a kubelet does ask again, the driver must answer as before
and do no node-local work twice. A prepare that fails is retried by the kubelet, never unprepared, so a driver
that fails part way must remove what it already did; the reference driver's status-write-failure fault makes it
fail after its CDI spec is written, and the retry then succeeds once the fault is cleared.
"""

from __future__ import annotations

import functools

import pytest
from kubernetes import client

from dra_conformance.driver.real_node import (
    PRINT_ENV_AND_WAIT,
    CdiSpecFiles,
    RealNodeTarget,
    await_ready,
    claimed_pod,
)
from dra_conformance.driver.reference import FakeDriverControl
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import Builder
from dra_conformance.kube.pods import describe_pod
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.interposer import KubeletInterposer
from dra_conformance.kubelet.layers import FAILED_PREPARE_REASON, failed_prepare_messages
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

# The container prints its environment, holds the device two seconds and exits non-zero, so the kubelet restarts
# it (restartPolicy Always) after its first back-off of 10 s; a new container in the same sandbox.
EXITS_SOON = ("sh", "-c", "env; sleep 2; exit 1")
# The first restart comes after the kubelet's initial 10 s back-off; 60 s more covers a busy machine.
RESTART_DEADLINE = 70.0


# The real node is one per machine and every kubelet-mode check leases it in turn: on one xdist worker they take
# turns without a lease wait that grows with the checks before it (the lease deadline timed out at 15 checks).
pytestmark = pytest.mark.xdist_group("real-node")


def _claimed_pod(
    tracker: ResourceTracker, build: Builder, node: RealNodeTarget, command: tuple[str, ...]
) -> tuple[str, str]:
    """A pod on `node` with a claim of its own running `command`: (pod name, claim UID)."""
    pod, claim = claimed_pod(tracker, build, node, command)
    return str(pod["metadata"]["name"]), str(claim["metadata"]["uid"])


def _spec_reader(node: RealNodeTarget) -> CdiSpecFiles:
    if node.cdi_specs is None:
        pytest.skip(f"not applicable: the CDI specs of {node.name} cannot be read from this machine")
    return node.cdi_specs


def _claim_specs(specs: CdiSpecFiles, claim_uid: str) -> dict[str, str]:
    """The node's CDI spec files that name the claim (specs are per claim; the UID is in their names or content)."""
    return {path: text for path, text in specs.read().items() if claim_uid in path or claim_uid in text}


def _restarted(core: client.CoreV1Api, namespace: str, pod: str) -> client.V1Pod | None:
    current = core.read_namespaced_pod(pod, namespace)
    statuses = current.status.container_statuses or []
    return current if statuses and statuses[0].restart_count >= 1 else None


def test_a_restarted_container_keeps_its_claim_prepared_without_another_prepare(
    interposer: KubeletInterposer,
    real_node: RealNodeTarget,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    obligations: Obligations,
) -> None:
    specs = _spec_reader(real_node)
    pod, claim = _claimed_pod(tracker, build, real_node, EXITS_SOON)
    core = client.CoreV1Api(api_client)
    where = f"pod {pod} (claim {claim}) on {real_node.name}"
    # The prepares that prepared the claim count; a refusal the kubelet retried (a device another claim still
    # held on the node, say) is no prepare, and its retry is not a second one.
    first = waits.until(
        lambda: interposer.successful_prepare_answers(claim),
        bool,
        timeout=RESTART_DEADLINE,
        what=f"the kubelet's successful NodePrepareResources of claim {claim} through the interposer",
        describe=lambda _: f"answers so far: {interposer.prepare_answers(claim)}",
    )
    specs_before = _claim_specs(specs, claim)
    waits.until(
        functools.partial(_restarted, core, namespace, pod),
        lambda found: found is not None,
        timeout=RESTART_DEADLINE,
        what=f"container of pod {pod} restarted (restartCount >= 1)",
        describe=lambda _: describe_pod(core.read_namespaced_pod(pod, namespace)),
    )
    answers = interposer.successful_prepare_answers(claim)
    refused = len(interposer.prepare_answers(claim)) - len(answers)
    obligations.check(
        "kubelet.container-restart-does-not-re-prepare",
        len(answers) == len(first),
        f"{len(answers)} successful NodePrepareResources of the claim in all, {len(first)} before the container "
        f"restarted ({refused} refused and retried by the kubelet, not counted)",
        where,
    )
    obligations.check(
        "kubelet.repeated-prepare-after-restart-answers-identically",
        len(set(answers)) == 1,
        f"the driver's answers to the kubelet's prepares of the claim differ: {answers}",
        where,
    )
    specs_after = _claim_specs(specs, claim)
    obligations.check(
        "kubelet.container-restart-leaves-node-local-state-as-it-was",
        specs_after == specs_before,
        f"CDI specs of the claim before the restart {sorted(specs_before)}, after {sorted(specs_after)}"
        + ("" if set(specs_after) != set(specs_before) else " (same files, changed content)"),
        where,
    )


def test_a_prepare_that_fails_part_way_leaves_no_cdi_spec_and_the_retry_succeeds(
    real_node: RealNodeTarget,
    driver_under_test: DriverUnderTest,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    timeouts: Timeouts,
    obligations: Obligations,
) -> None:
    if not driver_under_test.profile.fault_switches or real_node.endpoint is None:
        pytest.skip(
            "not applicable: a prepare that fails after its node-local work needs the reference driver's "
            f"status-write-failure fault on {real_node.name}; {driver_under_test.name} has no such switch"
        )
    specs = _spec_reader(real_node)
    control = FakeDriverControl(real_node.endpoint)
    undo = control.set_faults([*control.faults(), {"mode": "status-write-failure"}])
    try:
        pod, claim = _claimed_pod(tracker, build, real_node, PRINT_ENV_AND_WAIT)
        core = client.CoreV1Api(api_client)
        where = f"pod {pod} (claim {claim}) on {real_node.name}"
        try:
            messages = waits.until(
                functools.partial(failed_prepare_messages, core, namespace, pod),
                bool,
                timeout=timeouts.pod_running,
                what=f"{FAILED_PREPARE_REASON} event for pod {pod}",
            )
        except WaitTimeout as error:
            obligations.fail("kubelet.failed-prepare-fault-reached-the-driver", str(error), where)
        obligations.check(
            "kubelet.failed-prepare-fault-reached-the-driver",
            any("status" in message for message in messages),
            f"{FAILED_PREPARE_REASON} events: {messages}",
            where,
        )
        left = _claim_specs(specs, claim)
        obligations.check(
            "kubelet.failed-prepare-leaves-no-node-local-state",
            not left,
            f"after the failed prepare the node holds CDI specs of the claim: {sorted(left)}",
            where,
        )
    finally:
        undo()
    try:
        await_ready(api_client, namespace, pod, timeouts.pod_running, f"pod {pod} Ready once the fault was cleared")
    except WaitTimeout as error:
        obligations.fail("kubelet.pod-starts-once-prepare-succeeds", str(error), where)
