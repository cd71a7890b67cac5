"""The kubelet-side interposer: slow, failing and hanging prepares for any driver under a real kubelet.

The interposer registers with the node's kubelet under the driver's name and forwards every call to the driver's
socket; a check switches what it does to NodePrepareResources. What the suite then observes is the kubelet's and
the pod's reaction, through the API: readiness held back by the delay, the `FailedPrepareDynamicResources` event and
a waiting pod that starts once the fault is cleared, and a hung call ended by the kubelet's own deadline.

These are the kubelet's obligations (`dra_conformance/model/registry/kubelet.yaml`, from pkg/kubelet); the
interposer is ours, so a fault that did not reach the call is a harness error.
"""

from __future__ import annotations

import functools

import pytest
from kubernetes import client

from dra_conformance.driver.real_node import RealNodeTarget, await_ready, running_pod
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import Builder
from dra_conformance.kube.pods import describe_pod, pod_ready
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.interposer import InterposedFault, KubeletInterposer
from dra_conformance.kubelet.layers import FAILED_PREPARE_REASON, failed_prepare_messages
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

# The delay a slow prepare gets: long enough to tell from the usual 1-3 s start, short enough for CI.
SLOW_PREPARE_SECONDS = 5.0
# The kubelet gives NodePrepareResources a deadline of its own (pkg/kubelet/cm/dra); a hung call ends there and is
# retried. 150 s covers it, the retry after a 10 s sync, and a busy machine.
KUBELET_DEADLINE_BOUND = 150.0


# The real node is one per machine and every kubelet-mode check leases it in turn: on one xdist worker they take
# turns without a lease wait that grows with the checks before it (the lease deadline timed out at 15 checks).
pytestmark = pytest.mark.xdist_group("real-node")


def _ready_once_prepared(
    obligations: Obligations, api_client: client.ApiClient, namespace: str, pod: str, timeout: float, after: str
) -> client.V1Pod:
    """The pod once Ready within `timeout`; not Ready by then breaks kubelet.pod-starts-once-prepare-succeeds."""
    try:
        return await_ready(api_client, namespace, pod, timeout, f"pod {pod} Ready {after}")
    except WaitTimeout as error:
        obligations.fail("kubelet.pod-starts-once-prepare-succeeds", str(error), f"pod {pod} {after}")


def _failed_prepare_events(
    obligations: Obligations, core: client.CoreV1Api, namespace: str, pod: str, timeout: float
) -> list[str]:
    """The messages of the pod's FailedPrepareDynamicResources events, once there is one within `timeout`."""
    try:
        messages: list[str] = waits.until(
            functools.partial(failed_prepare_messages, core, namespace, pod),
            bool,
            timeout=timeout,
            what=f"{FAILED_PREPARE_REASON} event for pod {pod}",
        )
    except WaitTimeout as error:
        obligations.fail("kubelet.failed-prepare-reported-in-event", str(error), f"pod {pod}")
    return messages


def test_a_slow_prepare_holds_readiness_back_by_the_injected_delay(
    interposer: KubeletInterposer,
    real_node: RealNodeTarget,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    timeouts: Timeouts,
    obligations: Obligations,
) -> None:
    interposer.set_faults([InterposedFault("NodePrepareResources", "delay", delay=SLOW_PREPARE_SECONDS)])
    created = running_pod(tracker, api_client, build, real_node, timeouts, wait=False)
    name = created.metadata.name
    pod = _ready_once_prepared(
        obligations, api_client, namespace, name, timeouts.pod_running + SLOW_PREPARE_SECONDS, "after a slow prepare"
    )
    delayed = [call for call in interposer.calls if call[0] == "NodePrepareResources" and call[2].startswith("delayed")]
    obligations.check("kubelet.interposer-delayed-prepare", bool(delayed), f"calls: {interposer.calls}", f"pod {name}")
    ready = next(c for c in pod.status.conditions if c.type == "Ready")
    # API timestamps have whole seconds: the pod cannot be Ready sooner than the delay, minus that rounding.
    took = (ready.last_transition_time - pod.metadata.creation_timestamp).total_seconds()
    obligations.check(
        "kubelet.readiness-waits-for-prepare",
        took >= SLOW_PREPARE_SECONDS - 1,
        f"Ready {took:.0f}s after creation, before the {SLOW_PREPARE_SECONDS:g}s delay was over",
        f"pod {name}",
    )


def test_a_failed_prepare_gives_the_event_and_a_waiting_pod_that_starts_once_cleared(
    interposer: KubeletInterposer,
    real_node: RealNodeTarget,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    timeouts: Timeouts,
    obligations: Obligations,
) -> None:
    interposer.set_faults([InterposedFault("NodePrepareResources", "error", message="injected prepare failure")])
    pod = running_pod(tracker, api_client, build, real_node, timeouts, wait=False).metadata.name
    core = client.CoreV1Api(api_client)
    messages = _failed_prepare_events(obligations, core, namespace, pod, timeouts.pod_running)
    obligations.check(
        "kubelet.failed-prepare-reported-in-event",
        any("injected prepare failure" in m for m in messages),
        f"no {FAILED_PREPARE_REASON} event carries the plugin's error 'injected prepare failure': {messages}",
        f"pod {pod}",
    )
    current = core.read_namespaced_pod(pod, namespace)
    obligations.check(
        "kubelet.pod-not-ready-while-prepare-fails", not pod_ready(current), describe_pod(current), f"pod {pod}"
    )
    interposer.set_faults([])
    _ready_once_prepared(obligations, api_client, namespace, pod, timeouts.pod_running, "after the fault was cleared")


@pytest.mark.timeout(2 * KUBELET_DEADLINE_BOUND + 60)
def test_a_hung_prepare_is_ended_by_the_kubelets_deadline_and_retried(
    interposer: KubeletInterposer,
    real_node: RealNodeTarget,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    timeouts: Timeouts,
    obligations: Obligations,
) -> None:
    interposer.set_faults([InterposedFault("NodePrepareResources", "hang")])
    pod = running_pod(tracker, api_client, build, real_node, timeouts, wait=False).metadata.name
    core = client.CoreV1Api(api_client)
    try:
        messages: list[str] = waits.until(
            functools.partial(failed_prepare_messages, core, namespace, pod),
            bool,
            timeout=KUBELET_DEADLINE_BOUND,
            what=f"{FAILED_PREPARE_REASON} event for the hung prepare of pod {pod}",
        )
    except WaitTimeout as error:
        obligations.fail("kubelet.hung-prepare-ended-by-deadline", str(error), f"pod {pod}")
    obligations.check(
        "kubelet.hung-prepare-ended-by-deadline",
        any("DeadlineExceeded" in m or "deadline" in m.lower() for m in messages),
        f"no {FAILED_PREPARE_REASON} event names a deadline: {messages}",
        f"pod {pod}",
    )
    interposer.set_faults([])
    _ready_once_prepared(obligations, api_client, namespace, pod, KUBELET_DEADLINE_BOUND, "after the hang was cleared")
