"""Reading a pod's conditions: is it Ready, what did the scheduler decide, and one line saying both for messages."""

from __future__ import annotations

from typing import Any

from kubernetes import client

# Waiting reasons that mean the container will not start as given (the kubelet keeps retrying, with backoff).
START_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CrashLoopBackOff")


def _condition(pod: client.V1Pod, condition_type: str) -> Any:
    return next((c for c in (pod.status.conditions or []) if c.type == condition_type), None)


def pod_ready(pod: client.V1Pod) -> bool:
    """Whether the pod has the condition Ready=True."""
    ready = _condition(pod, "Ready")
    return ready is not None and ready.status == "True"


def scheduled_condition(pod: client.V1Pod) -> Any:
    """The pod's PodScheduled condition, or None before the scheduler has looked at it."""
    return _condition(pod, "PodScheduled")


def scheduling_state(pod: client.V1Pod) -> str:
    """The PodScheduled condition as `status/reason: message`, e.g. `False/Unschedulable: 0/2 nodes are ...`."""
    scheduled = scheduled_condition(pod)
    if scheduled is None:
        return "no PodScheduled condition"
    return f"{scheduled.status}/{scheduled.reason}: {scheduled.message}"


def container_waits(pod: client.V1Pod) -> list[str]:
    """`reason: message` of every container of the pod that is waiting with a reason."""
    statuses = pod.status.container_statuses or []
    waiting = [s.state.waiting for s in statuses if s.state is not None and s.state.waiting is not None]
    return [f"{w.reason}: {w.message}" for w in waiting if w.reason]


def start_failure(pod: client.V1Pod) -> str | None:
    """Why a container of the pod will not start as given (an image it cannot pull, a crash loop), else None."""
    return next((w for w in container_waits(pod) if w.split(":", 1)[0] in START_FAILURES), None)


def describe_pod(pod: client.V1Pod) -> str:
    """One line on where a pod is and why (for wait and assertion messages)."""
    waits = container_waits(pod)
    return (
        f"pod {pod.metadata.name}: phase={pod.status.phase} node={pod.spec.node_name} scheduled={scheduling_state(pod)}"
        + (f" waiting={waits}" if waits else "")
    )
