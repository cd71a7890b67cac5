"""A DaemonSet rollout of the driver watched on one node: its registration sockets, its old pod and its pool.

Since kubelet 1.33 two instances of one DRA driver may be registered at once, each through a socket of its own,
and the kubelet uses the newest; a DaemonSet with `maxSurge: 1` then starts the new pod beside the old one and
deletes the old one once the new one is Ready. The checks that roll a driver (a restart, a release that cannot
start, an upgrade and its rollback) set that strategy for the rollout and sample the node meanwhile.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.driver.pool import node_pools
from dra_conformance.driver.profile import Capability
from dra_conformance.driver.real_node import RealNodeTarget
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import UsageError, WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import TEST_POD_GRACE_SECONDS, Manifest
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.client import DriverClient
from dra_conformance.kubelet.driver_pod import daemonset_of, find_driver_pod
from dra_conformance.model.cluster import ClusterInfo
from dra_wire.kubelet_api import KubeletAPI

# The old and the new instance overlap for about a second on a fast node: samples must come faster than that.
SAMPLE_INTERVAL = 0.1
SURGE_STRATEGY = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
# A new pod beside the old one on every node at once: a release that never becomes available holds a `maxSurge: 1`
# rollout on the first node it picked, which need not be the node a check watches.
SURGE_EVERYWHERE_STRATEGY = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "100%", "maxUnavailable": 0}}
# The image is on the node already: a new pod starts in seconds, and the DaemonSet controller deletes the old one
# once the new one is Ready; a loaded two-core machine needs more than a minute for the whole rollout.
ROLLOUT_DEADLINE = 180.0
# A release that cannot start: the command a container gets when the profile says nothing else (`install.cannotStart`).
MISSING_PROGRAM = "/dra-conformance-missing-release/driver"
# Waiting reasons of a container that could not be started or keeps failing to.
CREATE_FAILURES = frozenset({"RunContainerError", "CreateContainerError", "StartError", "CrashLoopBackOff"})
# The labels the DaemonSet controller gives each pod for the template revision it was made from.
REVISION_LABELS = frozenset({"controller-revision-hash", "pod-template-generation"})


@dataclass(frozen=True)
class Sample:
    """What the node showed at one moment of the rollout."""

    at: float
    sockets: frozenset[str]
    # Each socket's inode: a socket re-created under the same name is another listener (a new instance took it).
    inodes: frozenset[tuple[str, int]]
    old_pod: str  # "running", "deleting" or "gone"
    pool: str  # PoolState.describe() of each pool, or "no pool"
    pool_complete: bool


@dataclass
class RolloutSampler:
    """Samples the registration directory, the old driver pod and the pool until stopped (a thread of its own)."""

    registry: Path
    core: client.CoreV1Api
    api_client: client.ApiClient
    driver: str
    node: str
    old_pod: client.V1Pod
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _old_pod_state(self) -> str:
        try:
            pod = self.core.read_namespaced_pod(self.old_pod.metadata.name, self.old_pod.metadata.namespace)
        except ApiException as error:
            if error.status == 404:
                return "gone"
            raise
        if pod.metadata.uid != self.old_pod.metadata.uid:
            return "gone"
        return "deleting" if pod.metadata.deletion_timestamp is not None else "running"

    def sample(self) -> Sample:
        """One sample now."""
        inodes = (
            frozenset((p.name, p.stat().st_ino) for p in self.registry.iterdir() if p.is_socket())
            if self.registry.is_dir()
            else frozenset()
        )
        pools = node_pools(self.api_client, self.driver, self.node)
        return Sample(
            time.monotonic(),
            frozenset(name for name, _ in inodes),
            inodes,
            self._old_pod_state(),
            "; ".join(pool.describe() for pool in pools.values()) or "no pool",
            bool(pools) and all(pool.complete for pool in pools.values()),
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self.sample())
            except (ApiException, OSError) as error:  # one missed sample; the next one looks again
                self.errors.append(str(error)[:200])
            self._stop.wait(SAMPLE_INTERVAL)

    def start(self) -> RolloutSampler:
        """Start sampling in the background."""
        self._thread = threading.Thread(target=self._run, name="rollout-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[Sample]:
        """Stop and return the samples, oldest first."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return list(self.samples)


def timeline(samples: list[Sample], start: float) -> list[str]:
    """The distinct successive states (sockets, old pod, pool) with the second each began."""
    lines, last = [], None
    for sample in samples:
        state = (sorted(sample.sockets), sample.old_pod, sample.pool)
        if state != last:
            lines.append(f"+{sample.at - start:.1f}s sockets={state[0]} old pod {state[1]}, {state[2]}")
            last = state
    return lines


def taken_over(first: Sample, old_sockets: set[str], samples: list[Sample]) -> list[str]:
    """The old instance's socket names re-created (another inode) during the rollout, with when and the old pod's state.

    Only the new instance creates sockets during a rollout (the old one has been listening since before it), so a
    name of the old instance's that comes back as another socket is the new instance's, whether the old pod still
    runs or is being deleted.
    """
    before = {name: inode for name, inode in first.inodes if name in old_sockets}
    return [
        f"{name} (inode {before[name]} -> {inode}) at +{sample.at - first.at:.1f}s, old pod {sample.old_pod}"
        for sample in samples
        for name, inode in sample.inodes
        if name in before and inode != before[name]
    ]


def rollout_done(apps: client.AppsV1Api, namespace: str, name: str) -> tuple[bool, str]:
    """Whether the DaemonSet's rollout is over (every pod updated and available), and its status in one line."""
    status = apps.read_namespaced_daemon_set(name, namespace)
    s, generation = status.status, status.metadata.generation
    done = (
        (s.observed_generation or 0) >= generation
        and (s.updated_number_scheduled or 0) == s.desired_number_scheduled
        and (s.number_available or 0) == s.desired_number_scheduled
        and not s.number_unavailable
    )
    summary = (
        f"observedGeneration {s.observed_generation}/{generation}, updated {s.updated_number_scheduled}, "
        f"available {s.number_available} of {s.desired_number_scheduled}"
    )
    return done, summary


def restore_patch(api_client: client.ApiClient, daemonset: client.V1DaemonSet) -> dict[str, object]:
    """A merge patch that puts the DaemonSet's update strategy back as it is now (null removes what it lacked)."""
    strategy = api_client.sanitize_for_serialization(daemonset.spec.update_strategy) or {}
    rolling = strategy.get("rollingUpdate") or {}
    limits = {"maxSurge": rolling.get("maxSurge"), "maxUnavailable": rolling.get("maxUnavailable")}
    rolls = strategy.get("type", "RollingUpdate") == "RollingUpdate"
    restored = {"type": strategy.get("type", "RollingUpdate"), "rollingUpdate": limits if rolls else None}
    return {"spec": {"updateStrategy": restored}}


def driver_sockets(api: KubeletAPI, registry: Path, names: frozenset[str], driver: str) -> set[str]:
    """The sockets among `names` in `registry` whose GetInfo names `driver`."""
    found = set()
    for name in names:
        try:
            with DriverClient(api, registry / name) as driver_client:
                if driver_client.get_info().name == driver:
                    found.add(name)
        except grpc.RpcError:  # another plugin's socket, or one going away: not the driver's
            continue
    return found


def template_of(api_client: client.ApiClient, daemonset: client.V1DaemonSet) -> dict[str, Any]:
    """The DaemonSet's pod template as the API serves it (JSON field names)."""
    template: dict[str, Any] = api_client.sanitize_for_serialization(daemonset.spec.template)
    return template


def switch_patch(template: dict[str, Any], strategy: dict[str, Any] = SURGE_STRATEGY) -> list[dict[str, Any]]:
    """A JSON patch rolling a DaemonSet to `template` with a surge strategy (the new pod beside the old one)."""
    return [
        {"op": "replace", "path": "/spec/template", "value": template},
        {"op": "replace", "path": "/spec/updateStrategy", "value": strategy},
    ]


def put_back_patch(api_client: client.ApiClient, daemonset: client.V1DaemonSet) -> list[dict[str, Any]]:
    """A JSON patch putting back the DaemonSet's pod template and update strategy as they are now."""
    strategy = api_client.sanitize_for_serialization(daemonset.spec.update_strategy)
    return [
        {"op": "replace", "path": "/spec/template", "value": template_of(api_client, daemonset)},
        {"op": "replace", "path": "/spec/updateStrategy", "value": strategy},
    ]


def cannot_start(template: dict[str, Any], args: tuple[str, ...], container: str | None) -> tuple[dict[str, Any], str]:
    """`template` changed into a release that cannot start, and the change in one line.

    `args` are appended to the driver container's arguments; with none, its command is replaced by one that does not
    exist. The container is `container`, else the template's first. A name the template lacks is a UsageError.
    """
    changed = copy.deepcopy(template)
    containers = changed["spec"]["containers"]
    chosen = next((c for c in containers if container is None or c["name"] == container), None)
    if chosen is None:
        names = [c["name"] for c in containers]
        raise UsageError(f"install.cannotStart.container: no container {container} in the driver's pod ({names})")
    if args:
        chosen["args"] = [*(chosen.get("args") or []), *args]
        return changed, f"container {chosen['name']}: arguments {list(args)} appended (install.cannotStart.args)"
    chosen["command"] = [MISSING_PROGRAM]
    chosen.pop("args", None)
    return changed, f"container {chosen['name']}: command {MISSING_PROGRAM}, which does not exist (a missing program)"


@dataclass(frozen=True)
class NewPod:
    """The pod a rollout started on the node beside the old one, as last read."""

    name: str
    ready: bool
    # Starts of the driver's containers that failed so far (restarts, or a container that could not be created).
    failed_starts: int
    state: str

    @classmethod
    def of(cls, pod: client.V1Pod) -> NewPod:
        """What `pod` shows."""
        statuses = pod.status.container_statuses or []
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        waiting = [s.state.waiting.reason for s in statuses if s.state and s.state.waiting and s.state.waiting.reason]
        terminated = [s for s in statuses if s.state and s.state.terminated]
        cannot_create = sum(1 for reason in waiting if reason in CREATE_FAILURES)
        failed = sum(s.restart_count or 0 for s in statuses) + len(terminated) + cannot_create
        state = ", ".join(waiting) or ("Ready" if ready else pod.status.phase or "?")
        return cls(pod.metadata.name, ready, failed, state)


def new_pod_on(core: client.CoreV1Api, old_pod: client.V1Pod, node: str) -> NewPod | None:
    """The pod of the old pod's DaemonSet on `node` that is not the old pod; None before the controller made it."""
    selector = ",".join(
        f"{key}={value}" for key, value in (old_pod.metadata.labels or {}).items() if key not in REVISION_LABELS
    )
    pods = core.list_namespaced_pod(
        old_pod.metadata.namespace, label_selector=selector, field_selector=f"spec.nodeName={node}"
    ).items
    others = [p for p in pods if p.metadata.uid != old_pod.metadata.uid and p.metadata.deletion_timestamp is None]
    return NewPod.of(others[0]) if others else None


# The annotation on the driver's DaemonSet that says which check rolls it: the checks that roll it may run at once in
# the node parts of an in-cluster run (one per node), and one must not save the template another one changed.
ROLLING_ANNOTATION = "dra-conformance.io/rolled-by"
# A mark older than this is a run that died while it rolled (its check's own deadlines are far shorter).
ROLLING_MARK_EXPIRES = 1800.0
# The longest a check waits for another one's hold: the upgrade check's four rollouts with the pods it starts in them.
HOLD_DEADLINE = 900.0


def _mark(daemonset: client.V1DaemonSet) -> tuple[str, float] | None:
    value = (daemonset.metadata.annotations or {}).get(ROLLING_ANNOTATION)
    if not value or " " not in value:
        return None
    holder, _, since = value.rpartition(" ")
    try:
        return holder, float(since)
    except ValueError:
        return None


@contextmanager
def rolling(
    apps: client.AppsV1Api, namespace: str, name: str, holder: str, timeout: float = HOLD_DEADLINE
) -> Iterator[None]:
    """Hold the DaemonSet for one check's rollout: wait (up to `timeout`) while another check holds it.

    The mark is an annotation of the DaemonSet (not of its pod template, so it rolls nothing), set only on the
    resourceVersion read without one (a JSON patch `test`), and removed on the way out.
    """

    def take() -> bool:
        daemonset = apps.read_namespaced_daemon_set(name, namespace)
        mark = _mark(daemonset)
        if mark is not None and mark[0] != holder and time.time() - mark[1] < ROLLING_MARK_EXPIRES:
            return False
        path = "/metadata/annotations"
        patch: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": daemonset.metadata.resource_version}
        ]
        if daemonset.metadata.annotations is None:
            patch.append({"op": "add", "path": path, "value": {}})
        patch.append(
            {"op": "add", "path": f"{path}/{_escaped(ROLLING_ANNOTATION)}", "value": f"{holder} {time.time()}"}
        )
        try:
            apps.patch_namespaced_daemon_set(name, namespace, patch)
        except ApiException as error:
            if error.status in (409, 422):  # another check took it first, or the DaemonSet changed: read again
                return False
            raise
        return True

    waits.until(
        take, bool, timeout=timeout, what=f"DaemonSet {namespace}/{name} free to roll (annotation {ROLLING_ANNOTATION})"
    )
    try:
        yield
    finally:
        remove = [{"op": "remove", "path": f"/metadata/annotations/{_escaped(ROLLING_ANNOTATION)}"}]
        with contextlib.suppress(ApiException):  # gone already (the DaemonSet deleted): nothing to release
            apps.patch_namespaced_daemon_set(name, namespace, remove)


def _escaped(key: str) -> str:
    """`key` as one JSON pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True)
class RolloutTarget:
    """The driver's DaemonSet pod on the real node, and where its registration sockets are."""

    old_pod: client.V1Pod
    daemonset: str
    namespace: str
    registry: Path
    where: str


def rollout_target(
    real_node: RealNodeTarget, driver: DriverUnderTest, core: client.CoreV1Api, cluster: ClusterInfo
) -> RolloutTarget | str:
    """The driver's DaemonSet pod to roll on the real node, or why there is none to roll (not applicable)."""
    if not driver.profile.declares(Capability.ROLLING_UPDATE):
        return f"{Capability.ROLLING_UPDATE} not declared"
    if real_node.endpoint is None:
        return (
            f"the registration sockets on {real_node.name} are not reachable from this machine "
            "(run the suite on the node)"
        )
    old_pod, found = find_driver_pod(
        core, real_node.name, real_node.endpoint.root_on_node, driver.name, cluster.driver_daemonsets
    )
    daemonset = daemonset_of(old_pod) if old_pod is not None else None
    if old_pod is None or daemonset is None:
        return f"the driver on {real_node.name} is not a DaemonSet pod to roll ({found})"
    namespace = old_pod.metadata.namespace
    return RolloutTarget(
        old_pod,
        daemonset,
        namespace,
        Path(real_node.endpoint.registrar_dir),
        f"node {real_node.name}, DaemonSet {namespace}/{daemonset}, old pod {old_pod.metadata.name}",
    )


def claim_left_behind(
    real_node: RealNodeTarget, tracker: ResourceTracker, pod: Manifest, claim: Manifest
) -> str | None:
    """Delete `pod` gracefully; what its claim left on the node (the pod stuck, or its CDI specs), else None."""
    uid = str(claim["metadata"]["uid"])
    specs_before = real_node.cdi_specs.read() if real_node.cdi_specs is not None else {}
    named = {path for path, text in specs_before.items() if uid in path or uid in text}
    try:
        tracker.delete(pod, grace_seconds=TEST_POD_GRACE_SECONDS)
    except WaitTimeout as error:
        return f"pod {pod['metadata']['name']} of claim {uid} not gone: {error}"
    left = named & set(real_node.cdi_specs.read()) if real_node.cdi_specs is not None else set()
    return f"claim {uid}: its pod is gone, its CDI specs {sorted(left)} are not" if left else None
