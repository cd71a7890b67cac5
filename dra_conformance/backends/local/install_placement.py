"""Where a shipped driver's DaemonSet pods may run: the real node's taint, tolerations, and why a node has no pod.

The local cluster's real node carries REAL_NODE_TAINT, which keeps every pod but the kubelet-mode checks' off it. No
ordinary chart tolerates it, so `install.transform.tolerateRealNodeTaint` adds REAL_NODE_TOLERATION to its pod
templates. When the driver still does not come up, `daemonsets_on_node` says why in one line per DaemonSet of the
install: its desired, current and ready counts and, with no pod of it on the node, the node's taints its pod template
does not tolerate and the node selection it does not meet, as the DaemonSet controller judges them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from kubernetes import client

from dra_conformance.kube.pods import describe_pod
from dra_conformance.model.cluster import REAL_NODE_TAINT

# What tolerateRealNodeTaint adds: any value of the real node's taint, with its effect.
REAL_NODE_TOLERATION = {"key": REAL_NODE_TAINT["key"], "operator": "Exists", "effect": REAL_NODE_TAINT["effect"]}
# The profile key that adds it, which a line about the real node's taint names.
TOLERATE_KEY = "install.transform.tolerateRealNodeTaint"
# Taints the node lifecycle sets and lifts (not-ready, unreachable, pressure, unschedulable), all under this prefix:
# passing, unlike a taint such as the real node's.
LIFECYCLE_TAINT_PREFIX = "node.kubernetes.io/"
# Effects that keep a DaemonSet's pod off a node (PreferNoSchedule does not).
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
# What the DaemonSet controller adds to each of its pods (its `AddOrUpdateDaemonPodTolerations`).
DAEMONSET_TOLERATIONS = tuple(
    {"key": f"{LIFECYCLE_TAINT_PREFIX}{key}", "operator": "Exists", "effect": effect}
    for key, effect in (
        ("not-ready", "NoExecute"),
        ("unreachable", "NoExecute"),
        ("disk-pressure", "NoSchedule"),
        ("memory-pressure", "NoSchedule"),
        ("pid-pressure", "NoSchedule"),
        ("unschedulable", "NoSchedule"),
    )
)
# ... and to those in the host's network.
HOST_NETWORK_TOLERATION = {
    "key": f"{LIFECYCLE_TAINT_PREFIX}network-unavailable",
    "operator": "Exists",
    "effect": "NoSchedule",
}


def tolerates(tolerations: Sequence[dict[str, Any]], taint: dict[str, Any]) -> bool:
    """Whether one of `tolerations` tolerates `taint` (the API's `Toleration.ToleratesTaint`)."""
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("key") and toleration["key"] != taint.get("key"):
            continue
        operator = toleration.get("operator") or "Equal"
        if operator == "Exists" or (operator == "Equal" and toleration.get("value", "") == taint.get("value", "")):
            return True
    return False


def describe_taint(taint: dict[str, Any]) -> str:
    """`key=value:Effect`, as kubectl shows a taint."""
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint['key']}{value}:{taint['effect']}"


def untolerated_taints(pod: dict[str, Any], taints: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The taints of a node that keep a DaemonSet's pod of template `pod` (an API-form pod spec) off it."""
    tolerations = [*(pod.get("tolerations") or []), *DAEMONSET_TOLERATIONS]
    tolerations += [HOST_NETWORK_TOLERATION] if pod.get("hostNetwork") else []
    return [t for t in taints if t.get("effect") in BLOCKING_EFFECTS and not tolerates(tolerations, t)]


def _holds(requirement: dict[str, Any], value: str | None) -> bool:
    """Whether a node selector requirement holds for the node's `value` of its key (None: no such label)."""
    operator, values = requirement.get("operator"), requirement.get("values") or []
    if operator in ("Gt", "Lt"):
        with contextlib.suppress(TypeError, ValueError, IndexError):
            return int(str(value)) > int(values[0]) if operator == "Gt" else int(str(value)) < int(values[0])
        return False
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    return (value is not None) == (operator == "Exists")


def _term_matches(term: dict[str, Any], labels: dict[str, str], name: str) -> bool:
    """Whether a node selector term (every requirement of it; none matches nothing) matches the node."""
    found = [_holds(r, labels.get(r.get("key", ""))) for r in term.get("matchExpressions") or []]
    found += [_holds(r, name if r.get("key") == "metadata.name" else None) for r in term.get("matchFields") or []]
    return bool(found) and all(found)


def kept_off(pod: dict[str, Any], node: dict[str, Any]) -> tuple[list[str], bool]:
    """Why `node` (an API-form Node) runs no pod of template `pod`, and whether a reason lasts.

    A reason lasts when it is a taint of no node lifecycle (the real node's is one): then no pod will ever come.
    """
    name, labels = node["metadata"]["name"], node["metadata"].get("labels") or {}
    reasons, lasting = [], False
    taints = untolerated_taints(pod, (node.get("spec") or {}).get("taints") or [])
    if taints:
        hint = f" ({TOLERATE_KEY})" if any(t["key"] == REAL_NODE_TAINT["key"] for t in taints) else ""
        shown = ", ".join(map(describe_taint, taints))
        reasons.append(f"node {name} has taint{'s' if len(taints) > 1 else ''} {shown}, not tolerated{hint}")
        lasting = any(not t["key"].startswith(LIFECYCLE_TAINT_PREFIX) for t in taints)
    unmet = [f"{key}={value}" for key, value in (pod.get("nodeSelector") or {}).items() if labels.get(key) != value]
    if unmet:
        reasons.append(f"node {name} lacks the nodeSelector's {', '.join(unmet)}")
    affinity = (pod.get("affinity") or {}).get("nodeAffinity") or {}
    terms = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    if terms and not any(_term_matches(term, labels, name) for term in terms):
        reasons.append(f"node {name} matches no required node affinity term")
    return reasons, lasting


def daemonsets_on_node(
    api_client: client.ApiClient, daemonsets: Sequence[tuple[str, str]], node: str
) -> tuple[list[str], bool]:
    """One line per DaemonSet (namespace, name): its counts and, with no pod of it on `node`, why not.

    `DaemonSet fake-dra/fake-dra: 0 desired, 0 current, 0 ready; node real-node-0 has taint
    dra-conformance.io/real-node=true:NoSchedule, not tolerated (install.transform.tolerateRealNodeTaint)`. Also
    returned: whether none of them can ever run a pod there (each kept off by a lasting reason).
    """
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    raw_node = api_client.sanitize_for_serialization(core.read_node(node))
    lines, blocked = [], bool(daemonsets)
    for namespace, name in daemonsets:
        try:
            daemonset = apps.read_namespaced_daemon_set(name, namespace)
        except client.ApiException as error:
            lines.append(f"DaemonSet {namespace}/{name}: not readable ({error.status} {error.reason})")
            blocked = False
            continue
        status = daemonset.status  # None until the DaemonSet controller first wrote it
        desired, current, ready = (
            (status.desired_number_scheduled, status.current_number_scheduled, status.number_ready)
            if status
            else (0, 0, 0)
        )
        counts = f"DaemonSet {namespace}/{name}: {desired} desired, {current} current, {ready} ready"
        pods = core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={node}").items
        uid = daemonset.metadata.uid
        owned = [pod for pod in pods if any(owner.uid == uid for owner in pod.metadata.owner_references or [])]
        if owned:
            lines.append(f"{counts}; its pod on {node}: {describe_pod(owned[-1])}")
            blocked = False
            continue
        reasons, lasting = kept_off(api_client.sanitize_for_serialization(daemonset.spec.template.spec), raw_node)
        blocked = blocked and lasting
        lines.append("; ".join([counts, *reasons]) if reasons else f"{counts}; no pod of it on {node}")
    return lines, blocked
