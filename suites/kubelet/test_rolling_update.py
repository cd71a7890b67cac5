"""A seamless rolling update of the driver's DaemonSet while pods with claims keep starting (capability rollingUpdate).

Since kubelet 1.33 two instances of one DRA driver may be registered at once, each through a socket of its own,
and the kubelet uses the newest; a DaemonSet with `maxSurge: 1` then starts the new pod beside the old one and
deletes the old one once the new one is Ready. The check rolls the driver's DaemonSet that way (it sets the update
strategy for the rollout, prints it, and puts the original back), starts pods with claims one after another until
the rollout is over, and samples the node's registration sockets, the old pod and the driver's pool meanwhile.
Pods that ran before the rollout are deleted afterwards, so the new instance unprepares what the old one prepared.
"""

from __future__ import annotations

import datetime
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import allure
import grpc
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.driver.pool import node_pools
from dra_conformance.driver.profile import Capability
from dra_conformance.driver.real_node import RealNodeTarget, await_ready, claimed_pod
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import Builder
from dra_conformance.kube.pods import describe_pod
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.client import DriverClient
from dra_conformance.kubelet.driver_pod import daemonset_of, find_driver_pod
from dra_conformance.kubelet.layers import failed_prepare_messages
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts
from dra_wire.kubelet_api import KubeletAPI

pytestmark = pytest.mark.xdist_group("real-node")

# The image is on the node already: the new pod starts in seconds, and the DaemonSet controller deletes the old one
# once the new one is Ready; a loaded two-core machine needs more than a minute for the whole rollout.
ROLLOUT_DEADLINE = 180.0
# The old and the new instance overlap for about a second on a fast node: samples must come faster than that.
SAMPLE_INTERVAL = 0.1
# Pods with claims that run before the rollout, for the new instance to unprepare; each holds one device.
PODS_BEFORE = 2
# The annotation that changes the pod template, as `kubectl rollout restart` changes its own.
RESTARTED_AT = "dra-conformance.io/restartedAt"
# The pods before the rollout are deleted with a grace period: the API server then keeps them until their kubelet
# finished them, which includes unpreparing their claims (without one it removes them at once).
GRACEFUL_DELETE = 1
SURGE_STRATEGY = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


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


def _timeline(samples: list[Sample], start: float) -> list[str]:
    """The distinct successive states (sockets, old pod, pool) with the second each began."""
    lines, last = [], None
    for sample in samples:
        state = (sorted(sample.sockets), sample.old_pod, sample.pool)
        if state != last:
            lines.append(f"+{sample.at - start:.1f}s sockets={state[0]} old pod {state[1]}, {state[2]}")
            last = state
    return lines


def _taken_over(first: Sample, old_sockets: set[str], samples: list[Sample]) -> list[str]:
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


def _rollout_done(apps: client.AppsV1Api, namespace: str, name: str) -> tuple[bool, str]:
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


def _restore_patch(api_client: client.ApiClient, daemonset: client.V1DaemonSet) -> dict[str, object]:
    """A merge patch that puts the DaemonSet's update strategy back as it is now (null removes what it lacked)."""
    strategy = api_client.sanitize_for_serialization(daemonset.spec.update_strategy) or {}
    rolling = strategy.get("rollingUpdate") or {}
    limits = {"maxSurge": rolling.get("maxSurge"), "maxUnavailable": rolling.get("maxUnavailable")}
    rolls = strategy.get("type", "RollingUpdate") == "RollingUpdate"
    restored = {"type": strategy.get("type", "RollingUpdate"), "rollingUpdate": limits if rolls else None}
    return {"spec": {"updateStrategy": restored}}


def _driver_sockets(api: KubeletAPI, registry: Path, names: frozenset[str], driver: str) -> set[str]:
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


@pytest.mark.capability(Capability.ROLLING_UPDATE.value)
def test_a_rolling_update_with_max_surge_keeps_pods_starting_and_hands_claims_to_the_new_instance(
    real_node: RealNodeTarget,
    driver_under_test: DriverUnderTest,
    kubelet_api: KubeletAPI,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    timeouts: Timeouts,
    obligations: Obligations,
    cluster: ClusterInfo,
) -> None:
    profile = driver_under_test.profile
    if not profile.declares(Capability.ROLLING_UPDATE):
        pytest.skip(f"not applicable: {Capability.ROLLING_UPDATE} not declared")
    if real_node.endpoint is None:
        pytest.skip(
            f"not applicable: the registration sockets on {real_node.name} are not reachable from this machine "
            "(run the suite on the node)"
        )
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    kubelet_root = real_node.endpoint.root_on_node
    old_pod, found = find_driver_pod(
        core, real_node.name, kubelet_root, driver_under_test.name, cluster.driver_daemonsets
    )
    daemonset = daemonset_of(old_pod) if old_pod is not None else None
    if old_pod is None or daemonset is None:
        pytest.skip(f"not applicable: the driver on {real_node.name} is not a DaemonSet pod to roll ({found})")
    ds_namespace = old_pod.metadata.namespace
    registry = Path(real_node.endpoint.registrar_dir)
    where = f"node {real_node.name}, DaemonSet {ds_namespace}/{daemonset}, old pod {old_pod.metadata.name}"

    before = []
    for _ in range(PODS_BEFORE):
        pod, claim = claimed_pod(tracker, build, real_node)
        await_ready(
            api_client, namespace, pod["metadata"]["name"], timeouts.pod_running, "pod before the rollout Ready"
        )
        before.append((pod, claim))
    sampler = RolloutSampler(registry, core, api_client, driver_under_test.name, real_node.name, old_pod)
    first = sampler.sample()
    old_sockets = _driver_sockets(kubelet_api, registry, first.sockets, driver_under_test.name)
    obligations.check(
        "kubelet.rolling-update-starts-from-a-registered-instance",
        bool(old_sockets),
        f"no socket in {registry} answers GetInfo for {driver_under_test.name}: {sorted(first.sockets)}",
        where,
    )

    original = _restore_patch(api_client, apps.read_namespaced_daemon_set(daemonset, ds_namespace))
    restarted_at = datetime.datetime.now(datetime.UTC).isoformat()
    patch = {
        "spec": {
            "updateStrategy": SURGE_STRATEGY,
            "template": {"metadata": {"annotations": {RESTARTED_AT: restarted_at}}},
        }
    }
    started_pods: list[str] = []
    failures: list[str] = []
    stuck: WaitTimeout | None = None
    with allure.step(f"roll DaemonSet {ds_namespace}/{daemonset}: {patch}; afterwards {original}"):
        sampler.start()
        try:
            apps.patch_namespaced_daemon_set(daemonset, ds_namespace, patch)
            deadline = time.monotonic() + ROLLOUT_DEADLINE
            done, summary = False, ""
            while not done or sampler.samples[-1].old_pod != "gone":
                # The new instance listening on the old one's socket name: the rollout cannot end well (its
                # readiness never passes, or the old instance is cut off), and the samples already show why.
                if _taken_over(first, old_sockets, list(sampler.samples)):
                    break
                if time.monotonic() > deadline:
                    # Raised once the samples are judged: a rollout stuck on shared sockets is that obligation's.
                    stuck = WaitTimeout(
                        f"the rollout of DaemonSet {ds_namespace}/{daemonset} on {real_node.name}",
                        ROLLOUT_DEADLINE,
                        last_observed=f"{summary}; old pod {sampler.samples[-1].old_pod if sampler.samples else '?'}",
                    )
                    break
                pod, claim = claimed_pod(tracker, build, real_node)
                name = pod["metadata"]["name"]
                started_pods.append(name)
                try:
                    await_ready(api_client, namespace, name, timeouts.pod_running, f"pod {name} started in the rollout")
                except WaitTimeout as error:
                    failures.append(f"{name} did not run: {error}")
                failed_prepares = failed_prepare_messages(core, namespace, name)
                if failed_prepares:
                    failures.append(f"{name} had failed prepares: {failed_prepares}")
                try:
                    tracker.delete(pod)
                    tracker.delete(claim)
                except WaitTimeout as error:
                    # A pod the rollout left undeletable (the kubelet cannot unprepare its claim): raised once the
                    # samples are judged, which may already show why (the new instance on the old one's socket).
                    stuck = error
                    break
                done, summary = _rollout_done(apps, ds_namespace, daemonset)
        finally:
            samples = sampler.stop()
            apps.patch_namespaced_daemon_set(daemonset, ds_namespace, original)
    timeline = _timeline(samples, samples[0].at if samples else 0.0)
    overlap = [s for s in samples if old_sockets <= s.sockets and s.sockets - first.sockets]
    report = [
        f"pods with claims started during the rollout: {len(started_pods)}, failed: {len(failures)}",
        f"samples: {len(samples)} every {SAMPLE_INTERVAL} s; both instances registered in {len(overlap)} of them "
        f"(~{len(overlap) * SAMPLE_INTERVAL:.1f} s)",
        *timeline,
    ]
    allure.attach("\n".join(report), "rollout timeline", allure.attachment_type.TEXT)
    print("\n".join(report))  # shown with -rP

    taken_over = _taken_over(first, old_sockets, samples)
    obligations.check(
        "kubelet.rolling-update-instances-registered-side-by-side",
        not taken_over,
        f"the new instance re-created the old instance's socket {sorted(old_sockets)} under the same name: "
        f"{taken_over[:3]}; {timeline}",
        where,
    )
    removed_while_running = [s for s in samples if s.old_pod == "running" and not old_sockets <= s.sockets]
    obligations.check(
        "kubelet.rolling-update-leaves-other-instances-sockets",
        not removed_while_running,
        f"the old instance's sockets {sorted(old_sockets)} were gone while its pod ran (not being deleted): {timeline}",
        where,
    )
    obligations.check(
        "kubelet.rolling-update-instances-registered-side-by-side",
        bool(overlap),
        f"no sample showed the old sockets {sorted(old_sockets)} and a new socket at once: {timeline}",
        where,
    )
    if stuck is not None:
        raise stuck
    new_sockets = _driver_sockets(
        kubelet_api, registry, sampler.sample().sockets - first.sockets, driver_under_test.name
    )
    obligations.check(
        "kubelet.rolling-update-instances-registered-side-by-side",
        bool(new_sockets) and not new_sockets & old_sockets,
        f"after the rollout the driver answers on {sorted(new_sockets)}; before it on {sorted(old_sockets)}",
        where,
    )
    incomplete = [s for s in samples if not s.pool_complete]
    obligations.check(
        "kubelet.rolling-update-pool-stays-complete",
        not incomplete,
        f"{len(incomplete)} of {len(samples)} samples saw the pool incomplete, first: "
        f"{incomplete[0].pool if incomplete else ''}; {timeline}",
        where,
    )
    obligations.check(
        "kubelet.rolling-update-pods-start",
        not failures,
        f"{len(started_pods)} pods started during the rollout, {len(failures)} failed: {failures}",
        where,
    )

    specs_before = real_node.cdi_specs.read() if real_node.cdi_specs is not None else {}
    for pod, claim in before:
        uid = str(claim["metadata"]["uid"])
        named = {path for path, text in specs_before.items() if uid in path or uid in text}
        try:
            tracker.delete(pod, grace_seconds=GRACEFUL_DELETE)
        except WaitTimeout as error:
            current = core.read_namespaced_pod(pod["metadata"]["name"], namespace)
            obligations.fail(
                "kubelet.rolling-update-new-instance-unprepares-old-claims",
                f"{error}; {describe_pod(current)}",
                where,
            )
        left = named & set(real_node.cdi_specs.read()) if real_node.cdi_specs is not None else set()
        obligations.check(
            "kubelet.rolling-update-new-instance-unprepares-old-claims",
            not left,
            f"claim {uid} (prepared by the old instance): its pod is gone, its CDI specs {sorted(left)} are not",
            where,
        )
    waits.until(
        lambda: _rollout_done(apps, ds_namespace, daemonset),
        lambda outcome: outcome[0],
        timeout=timeouts.pod_running,
        what=f"DaemonSet {ds_namespace}/{daemonset} settled after the rollout",
        describe=lambda outcome: outcome[1],
    )
