"""Stopping and starting a driver installed as DaemonSet pods on a real node of the local cluster.

A DaemonSet replaces a deleted pod at once, so "stopped until the check starts it again" is the node leaving the
DaemonSet: the install pins the driver's pods to the real nodes (`pinToRealNodes`) and, in the same required node
selector term, to nodes without HELD_OFF_LABEL. Labelling a node makes the DaemonSet controller delete its pod there
and create none; removing the label brings a new pod, which starts the driver as a node's reboot or a drain's end
does. The kill itself is a SIGKILL of the pod's processes on this machine (the node's processes are ours), sent once
the label is set, so the driver gets no chance to clean up, as with a supervised process's kill.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from dra_conformance.errors import BackendError
from dra_conformance.kube import waits

HELD_OFF_LABEL = "dra-conformance.io/driver-held-off"
# What a SIGKILLed container's exit status reads.
KILLED = 128 + signal.SIGKILL


def held_off_expression() -> dict[str, Any]:
    """The node selector requirement that keeps the driver's pods off a held-off node."""
    return {"key": HELD_OFF_LABEL, "operator": "DoesNotExist"}


def driver_pods(core: client.CoreV1Api, daemonsets: tuple[str, ...], node: str) -> list[client.V1Pod]:
    """The pods of the installed `daemonsets` (`namespace/name`) on `node`, by owner."""
    found = []
    for entry in daemonsets:
        namespace, _, name = entry.partition("/")
        pods = core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={node}").items
        found += [
            p for p in pods if any(o.kind == "DaemonSet" and o.name == name for o in p.metadata.owner_references or [])
        ]
    return found


def _processes_of_pod(uid: str) -> list[int]:
    """Processes of this machine in the cgroups of pod `uid` (the kubelet names them `pod<uid>`)."""
    marker = f"/pod{uid}"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if marker in (entry / "cgroup").read_text():
                    found.append(int(entry.name))
    return found


def _label(core: client.CoreV1Api, node: str, value: str | None) -> None:
    core.patch_node(node, {"metadata": {"labels": {HELD_OFF_LABEL: value}}})


def stop(
    api_client: client.ApiClient,
    daemonsets: tuple[str, ...],
    node: str,
    timeout: float,
    sig: signal.Signals = signal.SIGKILL,
) -> int:
    """Hold the driver's DaemonSets off `node` and wait until its pod is gone; its exit status.

    SIGKILL: the pod's processes are killed at once. SIGTERM: the DaemonSet controller deletes the pod, and the
    kubelet stops it as it stops any pod (SIGTERM, then SIGKILL after its grace period, which `timeout` is on top
    of).
    """
    core = client.CoreV1Api(api_client)
    pods = driver_pods(core, daemonsets, node)
    if not pods:
        raise BackendError(f"no pod of the driver's DaemonSets {list(daemonsets)} runs on {node} to stop")
    _label(core, node, "true")
    if sig == signal.SIGKILL:
        for pod in pods:
            for pid in _processes_of_pod(pod.metadata.uid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    exits: list[int] = []

    def remaining() -> list[str]:
        left = driver_pods(core, daemonsets, node)
        exits.extend(
            s.state.terminated.exit_code
            for p in left
            for s in p.status.container_statuses or []
            if s.state and s.state.terminated
        )
        return [p.metadata.name for p in left]

    grace = max((p.spec.termination_grace_period_seconds or 0) for p in pods)
    waits.until(
        remaining,
        lambda left: not left,
        timeout=timeout + (grace if sig != signal.SIGKILL else 0),
        what=f"the driver's pods on {node} deleted by their DaemonSets once the node was held off ({HELD_OFF_LABEL})",
        describe=lambda left: f"still there: {left}",
    )
    return exits[-1] if exits else KILLED if sig == signal.SIGKILL else 128 + sig


def start(api_client: client.ApiClient, node: str, ready: Callable[[], None]) -> None:
    """Let the driver's DaemonSets onto `node` again; `ready` waits for the new pod's registration and pool."""
    _label(client.CoreV1Api(api_client), node, None)
    ready()


def held_off(api_client: client.ApiClient, node: str) -> bool:
    """Whether `node` is held off (its driver stopped by `stop` and not started since)."""
    labels = client.CoreV1Api(api_client).read_node(node).metadata.labels or {}
    return HELD_OFF_LABEL in labels
