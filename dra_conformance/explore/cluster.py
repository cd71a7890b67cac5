"""The `World` of a real cluster: the driver under test on a leased set-aside node, where the suite plays the kubelet.

Claims are allocated by the real scheduler for pods pinned to the node (tolerating its set-aside taint, held where
the node has a real kubelet); the suite calls the driver's kubelet-plugin sockets as the kubelet would
(`KubeletRole`); the backend kills and starts the driver's process (`Disruption`); the CDI dir is the directory the
local backend gave the driver on that node.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import DynamicApiError
from urllib3.exceptions import HTTPError

from dra_conformance.driver.disruption import Disruption
from dra_conformance.driver.plugin_sockets import served_sockets
from dra_conformance.driver.pool import PoolState, node_pools
from dra_conformance.driver.profile import ConfigEffect, OpaqueConfigAPI
from dra_conformance.driver.reference import FakeDriverControl
from dra_conformance.driver.slice_hygiene import pool_content, pool_views, settled, writes_between
from dra_conformance.errors import ConformanceError, WaitTimeout
from dra_conformance.explore.cdi import read_spec_files
from dra_conformance.explore.model import ClaimShape, allocated_devices
from dra_conformance.explore.world import (
    OTHER_NODES_CLAIM,
    PREPARE,
    SIGKILL,
    SIGTERM,
    CreatedClaim,
    DriverDidNotComeBack,
    HarnessProblem,
    HealthReading,
    HealthSeen,
    NodeLocalWork,
    Observation,
    PoolView,
    PrepareOutcome,
    Republished,
    Restarted,
    Rollout,
    SocketsAfterStop,
    StatusWrite,
    UnprepareOutcome,
)
from dra_conformance.kube import waits
from dra_conformance.kube.audit_log import status_writes
from dra_conformance.kube.builders import RESOURCE_API, Builder
from dra_conformance.kube.claims import device_statuses
from dra_conformance.kube.nodes import node_uids
from dra_conformance.kube.pods import describe_pod
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.client import HEALTH_SERVICES, ClaimRef, DriverClient
from dra_conformance.kubelet.latency import LatencyLog
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.model.cluster import DriverTermination
from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.processes import dying_with_this_process
from dra_conformance.timeouts import Timeouts

# A namespace must carry this label before a claim in it may ask for admin access (resource.k8s.io/v1).
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
# A pool observed mid-republish is looked at again for this long before it is judged incomplete (a restart waits for
# a complete pool already; this covers a republish the driver starts on its own).
POOL_SETTLE_SECONDS = 10.0
# What the cluster or the API may answer that ends the exploration as the suite's problem.
HARNESS_ERRORS = (ApiException, DynamicApiError, WaitTimeout, ConformanceError)
# Calls in flight at once start together: each waits at most this long for the others' threads to be ready.
CONCURRENT_START_SECONDS = 10.0
# The reference driver's republish (its fault switches): an informational taint (effect None, which no scheduling
# minds) on one device, set and cleared by turns; each change publishes the pool again.
REPUBLISH_FAULT = "informational-taint"
# The watch of the explorer's claims is opened again after this long (the API server ends watches on its own too).
WATCH_SECONDS = 60
# After a call returned, the watch has this long to deliver the claim's current resourceVersion (milliseconds on a
# healthy API server); past it the writes after that call are not judged.
WATCH_CATCH_UP_SECONDS = 5.0
# A watch that broke is opened again after this pause (an API server restarting, a network hiccup).
WATCH_RETRY_SECONDS = 1.0
# How often the registration directory is looked at while a rolling update's new instance starts.
ROLLOUT_POLL_SECONDS = 0.1
# Characters of a new instance's UID: its socket names carry it, and a unix socket's path takes 107 bytes at most (a
# pod's 36-character UID overflows the local backend's paths, which are already short temp directories).
INSTANCE_UID_CHARS = 8
# The lines of the new instance's log quoted where it did not start.
LOG_TAIL_LINES = 10
# How long the explorer reads each health stream for its first report: a driver sends one as the stream opens (the
# kubelet's health_check_timeout, 30 s, is how long it may wait for the next one; the named checks wait for that).
# A stream that sent none within it is not judged, so a correct driver costs one round trip per advertised version.
HEALTH_WINDOW_SECONDS = 5.0
# After a health hook, the driver reports the device's new health within the kubelet's window (it re-sends at least
# that often), and a little more for the stream's start: the named check's deadline (suites/protocol/test_health.py).
HOOKED_HEALTH_DEADLINE = 35.0
# The name of a claim the API server does not have: this prefix and the first characters of its (random) UID.
UNKNOWN_CLAIM_PREFIX = "explore-unknown-"
UNKNOWN_NAME_CHARS = 8
# How long the driver has run since the explorer last started it before a SIGTERM stop is judged on its sockets: a
# driver installs its SIGTERM handler once it has started (the upstream test driver, SIGTERMed 0.1 s after it
# registered, died of the signal before its handler was installed), and the kubelet does not stop a pod the moment
# it registered. The same as the named check's (suites/slices/test_downtime.py STARTED_FOR).
STARTED_FOR_SECONDS = 3.0
# The kubelet's defaultWipingDelay (k8s.io/kubernetes v1.37.2 pkg/kubelet/cm/dra/manager.go:75): a restart that took
# longer is not judged on its slices, which a real node's kubelet may have deleted itself.
WIPING_DELAY_SECONDS = 30.0

# The command line of a second instance of the driver under test on the node, named by an instance UID (as a pod's).
SecondInstance = Callable[[str, Path], list[str]]
# The profile's health hook for one device of the node: ((pool, device), healthy) -> why it did not run (None: it did).
HealthHook = Callable[[tuple[str, str], bool], str | None]


class StatusWatch:
    """Every write that set status.devices entries of `driver` in the claims of `namespace`, from a watch.

    Per claim (by UID), every resourceVersion the watch delivered, in order, and for each how many such writes
    there had been until then: `mark` finds a call's place among the writes from the claim's version when the call
    returned, with no comparison of resourceVersions (which are opaque).
    """

    def __init__(self, api_client: client.ApiClient, namespace: str, driver: str) -> None:
        """Watch `namespace` from now (`start`)."""
        self._api = client.CustomObjectsApi(api_client)
        self._namespace, self._driver = namespace, driver
        self._changed = threading.Condition()
        self._versions: dict[str, list[tuple[str, int]]] = {}
        self._entries: dict[str, str] = {}
        self._writes: dict[str, list[StatusWrite]] = {}
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self._thread = threading.Thread(target=self._run, name="explore-status-watch", daemon=True)
        # The last error the watch met (it opens again after WATCH_RETRY_SECONDS).
        self.error: str | None = None

    def start(self) -> StatusWatch:
        """Start watching in the background."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching."""
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()

    def mark(self, uid: str, version: str | None) -> int | None:
        """The claim's writes up to `version` (None: it is gone, all of them); None where the watch never got there."""
        with self._changed:
            if version is None:
                return len(self._writes.get(uid, []))
            delivered = self._changed.wait_for(
                lambda: any(v == version for v, _ in self._versions.get(uid, [])), timeout=WATCH_CATCH_UP_SECONDS
            )
            if not delivered:
                return None
            return next(count for v, count in self._versions[uid] if v == version)

    def writes(self, uid: str) -> tuple[StatusWrite, ...]:
        """The claim's writes of the driver's entries so far, in order."""
        with self._changed:
            return tuple(self._writes.get(uid, []))

    def _record(self, item: dict[str, Any]) -> None:
        uid, version = item["metadata"]["uid"], item["metadata"]["resourceVersion"]
        ours = [e for e in device_statuses(item) if e.get("driver") == self._driver]
        text = json.dumps(ours, sort_keys=True)
        with self._changed:
            writes = self._writes.setdefault(uid, [])
            if ours and text != self._entries.get(uid, "[]"):
                entries = tuple(f"{e.get('pool')}/{e.get('device')}" for e in ours)
                writes.append(StatusWrite(version, time.monotonic(), entries))
            self._entries[uid] = text
            self._versions.setdefault(uid, []).append((version, len(writes)))
            self._changed.notify_all()

    def _run(self) -> None:
        group, version = RESOURCE_API.split("/")
        resource_version: str | None = None
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    listed = self._api.list_namespaced_custom_object(group, version, self._namespace, "resourceclaims")
                    for item in listed["items"]:
                        self._record(item)
                    resource_version = listed["metadata"]["resourceVersion"]
                self._watch = watch.Watch()
                for event in self._watch.stream(
                    self._api.list_namespaced_custom_object,
                    group,
                    version,
                    self._namespace,
                    "resourceclaims",
                    resource_version=resource_version,
                    timeout_seconds=WATCH_SECONDS,
                ):
                    if self._stop.is_set():
                        break
                    item = event["object"]
                    if event["type"] == "ERROR":
                        resource_version = None  # too old (410): list again
                        break
                    resource_version = item["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._record(item)
            except ApiException as error:
                self.error = str(error)[:200]
                resource_version = None if error.status == 410 else resource_version
                self._stop.wait(WATCH_RETRY_SECONDS)
            except (OSError, HTTPError, ValueError) as error:  # a broken connection: the watch opens again
                self.error = f"{type(error).__name__}: {str(error)[:200]}"
                self._stop.wait(WATCH_RETRY_SECONDS)


class ClusterWorld:
    """The driver under test on the node `disruption` leased, explored through the API and its sockets."""

    def __init__(
        self,
        disruption: Disruption,
        driver: str,
        tracker: ResourceTracker,
        build: Builder,
        api_client: client.ApiClient,
        device_class: str,
        open_client: Callable[[DriverEndpoint], DriverClient],
        latencies: LatencyLog,
        timeouts: Timeouts,
        *,
        admin_access: bool,
        republish: bool = False,
        other: tuple[str, str] | None = None,
        rolling_update: bool = False,
        second_instance: SecondInstance | None = None,
        status_devices: bool = False,
        declared_attributes: Mapping[str, str] | None = None,
        health_stream: bool = False,
        health_hook: HealthHook | None = None,
        opaque_config: OpaqueConfigAPI | None = None,
        audit: tuple[Path, str] | None = None,
    ) -> None:
        """Explore `driver` on the disruption node, its claims asking for `device_class`.

        `republish`: the profile declares the reference driver's fault switches, through which the explorer makes
        the driver publish its pool again (REPUBLISH_FAULT). `other`: another driver on the node and its DeviceClass,
        for claims that mix two drivers (None: none runs there). `rolling_update`: the profile declares
        rollingUpdate; `second_instance`: the command line of a new instance (for an instance UID and a state
        directory of its own), where this machine can start one beside the driver (None: it cannot).
        `status_devices`: the profile declares statusDevices. `declared_attributes`: the attributes (name -> type)
        the profile declares the driver's devices carry. `health_stream`: the profile declares healthStream;
        `health_hook`: its health hooks, where they run on this machine (None: none). `opaque_config`: the driver's
        opaque config API, whose samples claims and their DeviceClasses carry.
        `audit`: the API server's audit log and the driver's user name, where this machine reads the log (the
        driver's refused status writes show nowhere else).
        """
        self.disruption = disruption
        self._driver = driver
        self.tracker = tracker
        self.build = build
        self.api_client = api_client
        self.device_class = device_class
        self.timeouts = timeouts
        self._open_client = open_client
        self._client: DriverClient | None = None
        # The kubelet's role, with one client per driver process (a new one after each restart).
        self.kubelet = KubeletRole(self._reach, latencies, api_client)
        self._admin = admin_access
        self._claims: dict[str, dict[str, Any]] = {}
        self._pods: dict[str, dict[str, Any]] = {}
        self._down = False
        self._republish = republish
        self._rolling_update = rolling_update
        self._second_instance = second_instance
        self._status_devices = status_devices
        self._declared_attributes = dict(declared_attributes or {})
        self._health_stream = health_stream
        self._health_hook = health_hook
        # Devices the health hook made unhealthy and not healthy again: `reset` undoes them between examples.
        self._failed: set[tuple[str, str]] = set()
        self._audit = audit
        self._opaque_config = opaque_config
        # The DeviceClass carrying each config sample, by sample index (created once the first claim asks for it).
        self._config_classes: dict[int, str] = {}
        # The claim (and its pod) the scheduler allocated to another node in this example, once one was asked for.
        self._elsewhere: tuple[dict[str, Any], dict[str, Any], CreatedClaim] | None = None
        # Nodes the driver's slices named that exist (read once each: the explorer never deletes a node).
        self._nodes: set[str] = set()
        self._other = other
        self._other_capacity = (
            sum(len(pool.devices) for pool in node_pools(api_client, other[0], disruption.node).values())
            if other
            else 0
        )
        # When the explorer last started the driver (monotonic clock; None: before the exploration).
        self._started_at: float | None = None
        # The device REPUBLISH_FAULT is set on, while it is.
        self._republished: str | None = None
        # The driver republished since its process started: what it publishes may no longer be what a fresh start
        # publishes (a broken driver's rescan changes its devices), which the next example must not inherit.
        self._pool_changed = False
        if admin_access:
            client.CoreV1Api(api_client).patch_namespace(
                build.namespace, {"metadata": {"labels": {ADMIN_ACCESS_LABEL: "true"}}}
            )
        pools = node_pools(api_client, driver, disruption.node)
        self._capacity = sum(len(pool.devices) for pool in pools.values())
        if self._capacity == 0:
            raise HarnessProblem(f"{driver} publishes no device on {disruption.node}")
        self._first_device = min(device for pool in pools.values() for device in pool.devices)
        self._shared = sorted(
            name
            for pool in pools.values()
            for name, spec in pool.device_specs.items()
            if spec.get("allowMultipleAllocations")
        )
        # Nodes other than this one where the driver publishes devices: a claim the scheduler allocates there.
        self._other_nodes = _other_nodes(api_client, driver, disruption.node)
        # Started last: nothing above may fail and leave it running.
        self._status_watch = StatusWatch(api_client, build.namespace, driver).start()

    # --- what the node is -----------------------------------------------------------------------------------------

    @property
    def node(self) -> str:
        """The leased node."""
        return self.disruption.node

    @property
    def driver(self) -> str:
        """The driver under test."""
        return self._driver

    @property
    def endpoint(self) -> DriverEndpoint:
        """The driver's sockets on the node."""
        return self.disruption.endpoint

    def capacity(self) -> int:
        """Devices the driver publishes on the node (when the exploration started)."""
        return self._capacity

    def other_driver(self) -> str:
        """The other driver on the node ("" where none runs)."""
        return self._other[0] if self._other else ""

    def other_capacity(self) -> int:
        """Devices the other driver publishes on the node (when the exploration started)."""
        return self._other_capacity

    def admin_access(self) -> bool:
        """Whether the profile declares adminAccess."""
        return self._admin

    def restarts(self) -> tuple[str, ...]:
        """SIGKILL (every backend that runs the driver's processes), and SIGTERM where the backend offers it."""
        return (SIGKILL, SIGTERM) if self._terminate() is not None else (SIGKILL,)

    def can_wipe(self) -> bool:
        """Where this machine reads the driver's CDI dir (the local backend)."""
        return self.endpoint.cdi_dir is not None

    def can_republish(self) -> bool:
        """Where the profile declares a way (the reference driver's fault switches)."""
        return self._republish

    def can_roll(self) -> bool:
        """Where the profile declares rollingUpdate and this machine can start a second instance beside the driver."""
        return self._rolling_update and self._second_instance is not None

    def status_devices(self) -> bool:
        """Whether the profile declares statusDevices."""
        return self._status_devices

    def declared_attributes(self) -> dict[str, str]:
        """The attributes the profile declares the driver's devices carry, with their types."""
        return dict(self._declared_attributes)

    def health_stream(self) -> bool:
        """Whether the profile declares healthStream."""
        return self._health_stream

    def can_allocate_elsewhere(self) -> bool:
        """Where the driver published devices on another node when the exploration started."""
        return bool(self._other_nodes)

    def config_effects(self) -> tuple[ConfigEffect, ...]:
        """The declared effects of the profile's opaque config samples."""
        api = self._opaque_config
        return tuple(sample.effect for sample in api.samples) if api is not None else ()

    def can_set_health(self) -> bool:
        """Where the profile declares healthStream and health hooks that run on this machine."""
        return self._health_stream and self._health_hook is not None

    def not_explored(self) -> dict[str, str]:
        """What this node, the profile or the backend rule out, and what the explorer does not do yet."""
        skipped = {
            "restart kubelet": f"{self.node} has no kubelet: the suite plays it",
            "shared devices": (
                f"shapes with shared devices are not drawn yet ({self.driver} shares {self._shared[:3]})"
                if self._shared
                else f"no device {self.driver} publishes on {self.node} allows multiple allocations"
            ),
        }
        if not self._other_capacity:
            skipped["claims mixing two drivers"] = f"no other driver publishes devices on {self.node}"
        if not self._admin:
            skipped["admin access"] = "the profile declares no adminAccess"
        if self._terminate() is None:
            skipped[f"restart driver ({SIGTERM})"] = "the backend cannot send SIGTERM to the driver"
            skipped[f"sockets after a {SIGTERM} stop"] = "the backend cannot send SIGTERM to the driver"
        elif self.endpoint.node_kubelet_root is not None and not self.endpoint.bound:
            skipped[f"sockets after a {SIGTERM} stop"] = (
                f"the sockets on {self.node} reach this machine through a node agent's relay, whose sockets are not "
                "the driver's"
            )
        if not self.can_wipe():
            skipped["wipe CDI dir"] = "this machine does not read the driver's CDI dir"
            skipped["reboot"] = "this machine does not read the driver's CDI dir"
        if not self._rolling_update:
            skipped["rolling update"] = "the profile declares no rollingUpdate"
        elif self._second_instance is None:
            skipped["rolling update"] = (
                f"this machine starts no second instance of {self.driver} beside the one on {self.node} (the local "
                "backend's private instances of the reference driver; a DaemonSet's rolling update on a real node is "
                "suites/kubelet/test_rolling_update.py)"
            )
        if not self._health_stream:
            skipped["read the health stream"] = "the profile declares no healthStream"
        if not self.can_set_health():
            skipped["make a device unhealthy"] = (
                "the profile declares no health hooks (health.makeUnhealthy) with healthStream, or they cannot run here"
            )
        if not self._other_nodes:
            skipped[f"prepare a claim not for this node ({OTHER_NODES_CLAIM})"] = (
                f"{self.driver} publishes devices on no node but {self.node}"
            )
        elif self._audit is None:
            skipped[f"refused status writes to a {OTHER_NODES_CLAIM}"] = (
                "this machine does not read the API server's audit log: only the writes it accepted are seen"
            )
        if not self._republish:
            skipped["republish"] = "the profile declares no way to make the driver republish (referenceFaults)"
        return skipped

    # --- operations -------------------------------------------------------------------------------------------------

    def create_claim(self, shape: ClaimShape) -> CreatedClaim:
        """A claim of `shape` and a pod using it, pinned to the node; returns once the scheduler bound the pod."""
        try:
            other_class = self._other[1] if self._other else None
            spec = shape.spec(
                self.device_class, other_class, config_classes=self._classes_with_config(), opaque=self._opaque()
            )
            # Opaque parameters are sent compact, as client-go does (see ResourceTracker.create).
            claim = self.tracker.create(self.build.claim_from_spec(spec), compact=bool(self._opaque_config))
            name = claim["metadata"]["name"]
            pod = self.build.pod(claim=name, node=self.node, tolerations=(self.disruption.toleration,))
            pod = self.tracker.create(self.build.held(pod))
            self._claims[claim["metadata"]["uid"]] = claim
            self._pods[claim["metadata"]["uid"]] = pod
            core = client.CoreV1Api(self.api_client)
            waits.until(
                lambda: core.read_namespaced_pod(pod["metadata"]["name"], self.build.namespace),
                lambda p: bool(p.spec.node_name),
                timeout=self.timeouts.pod_scheduled,
                what=f"pod {pod['metadata']['name']} (claim {shape.label()}) bound to {self.node}",
                describe=describe_pod,
            )
            allocated = self.tracker.get(RESOURCE_API, "ResourceClaim", name, self.build.namespace)
        except HARNESS_ERRORS as error:
            raise HarnessProblem(f"allocate a claim of shape {shape.label()} on {self.node}: {error}") from None
        results = allocated_devices(allocated["status"]["allocation"]["devices"]["results"], self.driver)
        if len(results) != shape.devices():
            raise HarnessProblem(
                f"claim {name} of shape {shape.label()} was allocated {len(results)} devices of {self.driver}"
            )
        return CreatedClaim(ClaimRef.of(allocated), results)

    def _opaque(self) -> list[dict[str, Any]]:
        """The `opaque` entry of each config sample: this driver's, with the sample's parameters."""
        samples = self._opaque_config.samples if self._opaque_config is not None else ()
        return [{"driver": self.driver, "parameters": dict(sample.parameters)} for sample in samples]

    def _classes_with_config(self) -> list[str]:
        """A DeviceClass of the driver per config sample, carrying it (created once, kept for the exploration)."""
        for index, opaque in enumerate(self._opaque()):
            if index not in self._config_classes:
                manifest = self.build.device_class()
                manifest["spec"]["config"] = [{"opaque": opaque}]
                self._config_classes[index] = str(self.tracker.create(manifest, compact=True)["metadata"]["name"])
        return [self._config_classes[index] for index in sorted(self._config_classes)]

    def prepare(self, claims: Sequence[ClaimRef]) -> PrepareOutcome:
        """NodePrepareResources for `claims` in one call, as the kubelet makes it."""
        outcome = self.kubelet.prepare_outcome(self.endpoint, list(claims))
        if outcome.error is not None:
            return PrepareOutcome(error=_rpc_error(outcome.error))
        return PrepareOutcome(dict(outcome.result.claims) if outcome.result else {})

    def unprepare(self, claims: Sequence[ClaimRef]) -> UnprepareOutcome:
        """NodeUnprepareResources for `claims` in one call."""
        try:
            result = self.kubelet.unprepare(self.endpoint, list(claims))
        except grpc.RpcError as error:
            return UnprepareOutcome(error=_rpc_error(error))
        return UnprepareOutcome({uid: answer.error for uid, answer in result.claims.items()})

    def concurrently(self, calls: Sequence[tuple[str, Sequence[ClaimRef]]]) -> list[PrepareOutcome | UnprepareOutcome]:
        """Each call on a thread of its own over the one connection, released together, as the kubelet's pod workers."""
        self._reach(self.endpoint)  # opened once, before the threads share it
        start = threading.Barrier(len(calls))

        def call(kind: str, claims: Sequence[ClaimRef]) -> PrepareOutcome | UnprepareOutcome:
            start.wait(timeout=CONCURRENT_START_SECONDS)
            return self.prepare(claims) if kind == PREPARE else self.unprepare(claims)

        try:
            with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="explore-call") as threads:
                futures = [threads.submit(call, kind, claims) for kind, claims in calls]
                return [future.result() for future in futures]
        except threading.BrokenBarrierError:
            raise HarnessProblem(f"start {len(calls)} calls at once on {self.node}") from None

    def republish(self) -> Republished:
        """Set REPUBLISH_FAULT on the first device, or clear it where it is set: the driver publishes its pool again.

        The node's slices are listed before and after (the reference driver publishes before its fault switch
        answers), and every watch event between the two is replayed, as a consumer watching the pool saw it.
        """
        device, self._republished = (None, None) if self._republished else (self._first_device, self._first_device)
        self._pool_changed = True
        changed = f"{REPUBLISH_FAULT} on {device}" if device else f"{REPUBLISH_FAULT} cleared"
        try:
            control = FakeDriverControl(self.endpoint)
            # The other faults stay: those a health hook set through the same switches fail their devices still.
            faults = [fault for fault in control.faults() if fault.get("mode") != REPUBLISH_FAULT]
            faults += [{"mode": REPUBLISH_FAULT, "device": device}] if device else []
            before = self._node_slices()
            control.restore(faults)
            after = self._node_slices()
            gaps, events = self._watched_gaps(before, after)
        except HARNESS_ERRORS as error:
            raise HarnessProblem(f"make the driver on {self.node} republish: {error}") from None
        return Republished(changed, gaps, events)

    def _node_slices(self) -> dict[str, Any]:
        """The driver's slices bound to the node, as one LIST (its resourceVersion is where a watch starts)."""
        group, version = RESOURCE_API.split("/")
        listed: dict[str, Any] = client.CustomObjectsApi(self.api_client).list_cluster_custom_object(
            group,
            version,
            "resourceslices",
            field_selector=f"spec.driver={self.driver},spec.nodeName={self.node}",
            _request_timeout=WATCH_SECONDS,
        )
        return listed

    def _watched_gaps(self, before: dict[str, Any], after: dict[str, Any]) -> tuple[tuple[str, ...], int]:
        """The states between two LISTs of the node's slices in which a pool there before was gone or incomplete.

        The watch starts at the first LIST's resourceVersion and ends once the slices are as the second LIST has
        them (each name at the same resourceVersion), or after POOL_SETTLE_SECONDS.
        """
        state = {item["metadata"]["name"]: item for item in before["items"]}
        pools = {item["spec"]["pool"]["name"] for item in state.values()}
        target = {item["metadata"]["name"]: item["metadata"]["resourceVersion"] for item in after["items"]}

        def versions() -> dict[str, str]:
            return {name: item["metadata"]["resourceVersion"] for name, item in state.items()}

        gaps: list[str] = []
        events = 0
        if versions() == target:
            return (), events
        group, version = RESOURCE_API.split("/")
        stream = watch.Watch()
        try:
            for event in stream.stream(
                client.CustomObjectsApi(self.api_client).list_cluster_custom_object,
                group,
                version,
                "resourceslices",
                field_selector=f"spec.driver={self.driver},spec.nodeName={self.node}",
                resource_version=before["metadata"]["resourceVersion"],
                timeout_seconds=int(POOL_SETTLE_SECONDS),
            ):
                kind, item = event["type"], event["object"]
                if kind not in ("ADDED", "MODIFIED", "DELETED"):
                    break  # an ERROR (the version is too old): judged as far as seen
                events += 1
                name = item["metadata"]["name"]
                if kind == "DELETED":
                    state.pop(name, None)
                else:
                    state[name] = item
                gaps += [f"after {kind} of slice {name}: {gap}" for gap in _pool_gaps(state.values(), pools)]
                if versions() == target:
                    break
        finally:
            stream.stop()
        return tuple(gaps), events

    def restart(self, how: str) -> Restarted:
        """Stop the driver with `how`, start it again; DriverDidNotComeBack where it has no complete pool in time.

        After SIGTERM, the sockets the driver served (`served_sockets`, listed before the signal) that are still
        there once its process exited, where this machine reads them. The node's slices are listed before the stop
        and once the pool settled after the start: where they say the same (`pool_content`), the writes between.
        """
        # The live sockets before a SIGTERM (None: not judged), and the process's exit status.
        served: list[Path] | None = None
        code: int | None = None
        try:
            before = self._node_slices()["items"]
            if how == SIGTERM:
                terminate = self._terminate()
                if terminate is None:
                    raise HarnessProblem(f"the backend cannot SIGTERM the driver on {self.node}")
                self._running_a_while()
                live, why = served_sockets(self.endpoint, self.driver)
                served = None if why else live
                began = time.monotonic()
                code = terminate(self.node)
                self.disruption.killed = True
            else:
                began = time.monotonic()
                self.disruption.kill()
        except HARNESS_ERRORS as error:
            raise HarnessProblem(f"stop the driver on {self.node} ({how}): {error}") from None
        self._forget_client()
        self._down, self._republished = True, None  # the fault switches die with the process
        left = tuple(str(path) for path in served or () if path.exists())
        try:
            self.disruption.start()
        except HARNESS_ERRORS as error:
            raise DriverDidNotComeBack(str(error)) from None
        finally:
            self._started_at = time.monotonic()
        took = self._started_at - began
        self._down = self._pool_changed = False
        sockets = None if served is None else SocketsAfterStop(tuple(str(path) for path in served), left, _ended(code))
        return Restarted(sockets, self._slice_writes(before, took), took)

    def _slice_writes(self, before: list[dict[str, Any]], took: float) -> tuple[str, ...] | None:
        """The writes of the node's slices since `before`, once settled, where they say what they said (else None)."""
        if took >= WIPING_DELAY_SECONDS:
            return None
        try:
            after = waits.until(
                lambda: self._node_slices()["items"],
                lambda items: settled(pool_views(items)),
                timeout=POOL_SETTLE_SECONDS,
                what=f"the slices of {self.driver} on {self.node} settled after the restart",
                describe=lambda items: [view.describe() for view in pool_views(items).values()],
            )
        except WaitTimeout:
            return None  # the pool's completeness is judged by the next observation
        except HARNESS_ERRORS as error:
            raise HarnessProblem(f"list the slices of {self.driver} on {self.node}: {error}") from None
        if pool_content(after) != pool_content(before):
            return None
        return tuple(writes_between(before, after))

    def wipe_cdi(self) -> int:
        """Remove every file of the driver's CDI dir, the directory kept."""
        directory = self.endpoint.cdi_dir
        if directory is None or not directory.is_dir():
            return 0
        removed = 0
        for path in sorted(directory.iterdir()):
            if path.is_file() or path.is_symlink():
                path.unlink(missing_ok=True)
                removed += 1
        return removed

    def roll(self) -> Rollout:
        """A new instance (an instance UID of its own) beside the driver, as a DaemonSet with maxSurge 1 starts it.

        Once it registered (a new socket, or one bound again, in the registration directory), both instances'
        sockets are read; then the new one is stopped (SIGTERM) and the driver restarted, which leaves one instance
        with the node's state as a rollout's end does. The new instance keeps its state in a directory of its own,
        so that it cannot change what the running one prepared.
        """
        if self._second_instance is None:
            raise HarnessProblem(f"a rolling update of {self.driver} on {self.node}: no way to start a second instance")
        registry = self.endpoint.registrar_dir
        old = _sockets(registry)
        with tempfile.TemporaryDirectory(prefix="explore-roll-") as scratch:
            log = Path(scratch) / "driver.log"
            argv = self._second_instance(uuid.uuid4().hex[:INSTANCE_UID_CHARS], Path(scratch) / "state")
            with log.open("ab") as output:
                process = subprocess.Popen(
                    dying_with_this_process(argv), stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT
                )
            try:
                during = self._registered_beside(process, registry, old, log)
            finally:
                _stop(process, self.timeouts.process_stop)
        taken_over = frozenset(name for name, inode in during.items() if name in old and old[name] != inode)
        rollout = Rollout(frozenset(old), frozenset(during), taken_over)
        self.restart(SIGTERM if self._terminate() is not None else SIGKILL)
        return rollout

    def _registered_beside(
        self, process: subprocess.Popen[bytes], registry: Path, old: dict[str, int], log: Path
    ) -> dict[str, int]:
        """The registration sockets once the new instance added or bound one (after driver_ready: as they are)."""
        deadline = time.monotonic() + self.timeouts.driver_ready
        while True:
            now = _sockets(registry)
            if process.poll() is not None:
                tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
                raise HarnessProblem(
                    f"the new instance of a rolling update on {self.node} exited with code {process.returncode}: {tail}"
                )
            if now != old or time.monotonic() >= deadline:
                return now
            time.sleep(ROLLOUT_POLL_SECONDS)

    def unknown_claim(self, uid: str) -> ClaimRef:
        """A claim of the explorer's namespace, named after `uid`, that was never created."""
        return ClaimRef(self.build.namespace, uid, f"{UNKNOWN_CLAIM_PREFIX}{uid[:UNKNOWN_NAME_CHARS]}")

    def prepare_not_owned(self, claim: ClaimRef) -> PrepareOutcome:
        """NodePrepareResources for `claim` alone; forgotten by the kubelet's role where the driver refused it.

        A kubelet unprepares only what it prepared: a refused claim not of this node leaves nothing to undo, and
        unpreparing it at the end of the example would judge the driver's unprepare of a claim it never had.
        """
        outcome = self.prepare([claim])
        answer = outcome.claims.get(claim.uid)
        if outcome.error is not None or answer is None or answer.error:
            self.kubelet.prepared.pop((self.endpoint, claim.uid), None)
        return outcome

    def claim_on_another_node(self) -> CreatedClaim:
        """One device of the driver on a node the scheduler picks: not this one, which its set-aside taint keeps out.

        Allocated once per example (its pod bound there, held where the node has a real kubelet), deleted by `reset`.
        """
        if self._elsewhere is not None:
            return self._elsewhere[2]
        try:
            claim = self.tracker.create(self.build.claim(self.device_class))
            name = claim["metadata"]["name"]
            pod = self.tracker.create(self.build.held(self.build.pod(claim=name)))
            self._elsewhere = (claim, pod, CreatedClaim(ClaimRef.of(claim), ()))
            core = client.CoreV1Api(self.api_client)
            bound = waits.until(
                lambda: core.read_namespaced_pod(pod["metadata"]["name"], self.build.namespace),
                lambda p: bool(p.spec.node_name),
                timeout=self.timeouts.pod_scheduled,
                what=f"pod {pod['metadata']['name']} (claim {name}) bound to a node other than {self.node}",
                describe=describe_pod,
            )
            allocated = self.tracker.get(RESOURCE_API, "ResourceClaim", name, self.build.namespace)
        except HARNESS_ERRORS as error:
            raise HarnessProblem(f"allocate a claim on a node other than {self.node}: {error}") from None
        if bound.spec.node_name == self.node:
            raise HarnessProblem(f"claim {name} was allocated on {self.node}, whose taint its pod does not tolerate")
        results = allocated_devices(allocated["status"]["allocation"]["devices"]["results"], self.driver)
        self._elsewhere = (claim, pod, CreatedClaim(ClaimRef.of(allocated), results))
        return self._elsewhere[2]

    def node_local_work(self, claim: ClaimRef) -> NodeLocalWork:
        """CDI specs naming the claim's UID, its entries the driver wrote, and the driver's writes in the audit log."""
        cdi = None
        if self.endpoint.cdi_dir is not None:
            files = read_spec_files(self.endpoint.cdi_dir)
            cdi = tuple(name for name, text in sorted(files.items()) if claim.uid in name or claim.uid in text)
        seen = self._status_watch.writes(claim.uid)
        writes = [f"entries {list(w.entries)} (resourceVersion {w.version})" for w in seen]
        audited = self._audit is not None and self._audit[0].is_file()
        if self._audit is not None and audited:
            path, user = self._audit
            try:
                attempts = status_writes(path, claim.namespace, claim.name, user)
            except OSError as error:
                raise HarnessProblem(f"read the audit log {path}: {error}") from None
            writes += [f"{attempt} (audit log, {user})" for attempt in attempts]
        return NodeLocalWork(cdi, tuple(writes), audited)

    def read_health(self) -> HealthReading:
        """GetInfo's DRAResourceHealth versions, each stream read until its first report or HEALTH_WINDOW_SECONDS."""
        plugin = self._reach(self.endpoint)
        try:
            advertised = tuple(
                service for service in plugin.get_info().supported_versions if service in HEALTH_SERVICES.values()
            )
        except grpc.RpcError:
            advertised = ()  # the registration's own obligations judge a GetInfo that fails
        reports: dict[str, frozenset[tuple[str, str]] | None] = {}
        errors: dict[str, str] = {}
        for service in advertised:
            try:
                first = plugin.health_reports(1, timeout=HEALTH_WINDOW_SECONDS, service=service)
            except grpc.RpcError as error:
                if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    reports[service] = None  # open, but no report yet: not judged
                else:
                    errors[service] = _rpc_error(error)
                continue
            reports[service] = frozenset(first[0][1]) if first else None
        return HealthReading(advertised, reports, errors, HEALTH_WINDOW_SECONDS)

    def set_health(self, device: tuple[str, str], healthy: bool) -> str | None:
        """Run the profile's health hook for `device`; remembered until `reset` where it made the device unhealthy."""
        if self._health_hook is None:
            raise HarnessProblem(f"no health hook of {self.driver} runs on this machine")
        problem = self._health_hook(device, healthy)
        if healthy:
            self._failed.discard(device)
        else:
            self._failed.add(device)
        return problem

    def watch_health(self, settled: Callable[[dict[tuple[str, str], tuple[str, str]]], bool]) -> HealthSeen:
        """The stream the kubelet picks, its reports merged, until `settled` accepts them or HOOKED_HEALTH_DEADLINE."""
        merged: dict[tuple[str, str], tuple[str, str]] = {}

        def merge(report: dict[tuple[str, str], tuple[str, str]]) -> bool:
            merged.update(report)
            return settled(merged)

        started = time.monotonic()
        try:
            reports = self._reach(self.endpoint).watch_health(merge, timeout=HOOKED_HEALTH_DEADLINE)
        except grpc.RpcError as error:
            return HealthSeen(dict(merged), 0, time.monotonic() - started, _rpc_error(error))
        return HealthSeen(dict(merged), len(reports), time.monotonic() - started)

    def _heal(self) -> None:
        """Make the devices the hook failed healthy again, and wait until the stream reports none of them UNHEALTHY.

        Between examples, so that the next one starts with every device sound; what the driver reports here is not
        judged (the example that failed them judged it).
        """
        failed, self._failed = sorted(self._failed), set()
        if not failed or self._health_hook is None:
            return
        for device in failed:
            self._health_hook(device, True)
        with contextlib.suppress(grpc.RpcError):
            self._reach(self.endpoint).watch_health(
                lambda report: all(report.get(device, ("",))[0] != "UNHEALTHY" for device in failed),
                timeout=HOOKED_HEALTH_DEADLINE,
            )

    def status_mark(self, claim: ClaimRef) -> int | None:
        """The claim's writes up to its resourceVersion now (read once the call returned), from the watch."""
        try:
            item = client.CustomObjectsApi(self.api_client).get_namespaced_custom_object(
                *RESOURCE_API.split("/"), claim.namespace, "resourceclaims", claim.name
            )
        except ApiException as error:
            if error.status == 404:
                return self._status_watch.mark(claim.uid, None)
            raise HarnessProblem(f"read claim {claim.name}: {error}") from None
        if item["metadata"]["uid"] != claim.uid:
            return self._status_watch.mark(claim.uid, None)
        return self._status_watch.mark(claim.uid, item["metadata"]["resourceVersion"])

    def status_writes(self, claim: ClaimRef) -> tuple[StatusWrite, ...]:
        """The writes of the driver's entries the watch saw in the claim."""
        return self._status_watch.writes(claim.uid)

    def delete_claim(self, claim: ClaimRef, force: bool) -> None:
        """Delete the claim's pod (at once where `force`, else with its grace period), then the claim."""
        try:
            pod = self._pods.pop(claim.uid, None)
            if pod is not None:
                self.tracker.delete(pod, grace_seconds=0 if force else None)
            self.tracker.delete(self._claims.pop(claim.uid))
        except HARNESS_ERRORS as error:
            raise HarnessProblem(f"delete claim {claim.name} and its pod: {error}") from None

    def observe(self) -> Observation:
        """The CDI spec files, the explorer's claims' status.devices, and the driver's pools on the node."""
        try:
            listed = client.CustomObjectsApi(self.api_client).list_namespaced_custom_object(
                *RESOURCE_API.split("/"), self.build.namespace, "resourceclaims"
            )
            statuses = {
                item["metadata"]["uid"]: device_statuses(item)
                for item in listed["items"]
                if item["metadata"]["uid"] in self._claims
            }
            pools = self._settled_pools()
        except HARNESS_ERRORS as error:
            raise HarnessProblem(f"observe {self.node}: {error}") from None
        cdi = read_spec_files(self.endpoint.cdi_dir) if self.endpoint.cdi_dir is not None else None
        return Observation(cdi, statuses, pools)

    def registered_name(self) -> str:
        """GetInfo's PluginInfo.name from the driver's registration socket (its running process)."""
        try:
            return str(self._reach(self.endpoint).get_info().name)
        except grpc.RpcError as error:
            return f"(GetInfo failed: {_rpc_error(error)})"

    def unbound_slices(self) -> dict[str, str]:
        """The driver's slices (every node's) whose spec.nodeName is no node of the cluster: one LIST, a GET per node.

        Only the nodes the slices name are read (never the cluster's node list), each once while it exists.
        """
        group, version = RESOURCE_API.split("/")
        try:
            listed = client.CustomObjectsApi(self.api_client).list_cluster_custom_object(
                group, version, "resourceslices", field_selector=f"spec.driver={self.driver}"
            )
            bound = {item["metadata"]["name"]: item["spec"].get("nodeName") for item in listed["items"]}
            named = {node for node in bound.values() if node}
            self._nodes |= set(node_uids(client.CoreV1Api(self.api_client), named - self._nodes))
        except HARNESS_ERRORS as error:
            raise HarnessProblem(f"list the ResourceSlices of {self.driver}: {error}") from None
        return {name: node for name, node in sorted(bound.items()) if node and node not in self._nodes}

    def reset(self, prepared: Sequence[ClaimRef]) -> None:
        """Unprepare what is still prepared (errors ignored: the steps judged the driver), delete claims and pods.

        Where the example made the driver republish, the driver is then started again, so that the next example
        meets the pool a fresh start publishes, as this one did: a sequence Hypothesis replays (its shrunk one)
        must not depend on the examples before it.
        """
        if self._down:
            self._start_again()
        self._heal()
        for claim in prepared:
            self.kubelet.prepared.setdefault((self.endpoint, claim.uid), claim)
        self.kubelet.unprepare_leftovers()
        if self._pool_changed:
            try:
                self.restart(SIGKILL)  # the fault switches (REPUBLISH_FAULT) go with the process
            except DriverDidNotComeBack as error:
                raise HarnessProblem(f"start the driver on {self.node} again between examples: {error}") from None
        pods, claims = list(self._pods.values()), list(self._claims.values())
        if self._elsewhere is not None:
            claims.append(self._elsewhere[0])
            pods.append(self._elsewhere[1])
        self._pods, self._claims, self._elsewhere = {}, {}, None
        try:
            for obj in [*pods, *claims]:
                self.tracker.delete(obj, wait=False)
            for obj in [*pods, *claims]:
                self.tracker.delete(obj)
        except HARNESS_ERRORS as error:
            raise HarnessProblem(f"delete the explorer's claims and pods: {error}") from None

    def close(self) -> list[str]:
        """After the exploration: what could not be unprepared (the claims and pods go with the test's tracker)."""
        self._status_watch.stop()
        failures = self.kubelet.unprepare_leftovers()
        self._forget_client()
        return failures

    # --- helpers ------------------------------------------------------------------------------------------------------

    def _reach(self, endpoint: DriverEndpoint) -> DriverClient:
        if self._client is None:
            self._client = self._open_client(endpoint)
        return self._client

    def _forget_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _terminate(self) -> Callable[[str], int] | None:
        """The backend's graceful stop of the driver (`DriverTermination.terminate_driver`), where it has one."""
        processes = self.disruption.processes
        return processes.terminate_driver if isinstance(processes, DriverTermination) else None

    def _start_again(self) -> None:
        try:
            self.disruption.kill()
        except HARNESS_ERRORS:
            pass  # it is not running: start it
        try:
            self.disruption.start()
        except HARNESS_ERRORS as error:
            raise HarnessProblem(f"start the driver on {self.node} again after it did not come back: {error}") from None
        self._down = self._pool_changed = False
        self._started_at = time.monotonic()

    def _running_a_while(self) -> None:
        """Return once the driver has run STARTED_FOR_SECONDS since the explorer last started it."""
        if self._started_at is not None:
            time.sleep(max(0.0, self._started_at + STARTED_FOR_SECONDS - time.monotonic()))

    def _pools(self) -> dict[str, PoolView]:
        return {name: _view(pool) for name, pool in node_pools(self.api_client, self.driver, self.node).items()}

    def _settled_pools(self) -> dict[str, PoolView]:
        try:
            return waits.until(
                self._pools,
                lambda pools: all(pool.complete for pool in pools.values()),
                timeout=POOL_SETTLE_SECONDS,
                what=f"the pools of {self.driver} on {self.node} complete",
                describe=str,
            )
        except WaitTimeout:
            return self._pools()


def _other_nodes(api_client: client.ApiClient, driver: str, node: str) -> tuple[str, ...]:
    """The nodes other than `node` to which slices of `driver` with devices are bound (one LIST of its slices)."""
    group, version = RESOURCE_API.split("/")
    listed = client.CustomObjectsApi(api_client).list_cluster_custom_object(
        group, version, "resourceslices", field_selector=f"spec.driver={driver}"
    )
    return tuple(
        sorted(
            {
                str(item["spec"]["nodeName"])
                for item in listed["items"]
                if item["spec"].get("nodeName") not in (None, node) and item["spec"].get("devices")
            }
        )
    )


def _ended(code: int | None) -> str:
    """How a stopped process ended, from its exit status (negative: the signal that killed it)."""
    if code is not None and code < 0:
        return f"killed by signal {-code}: no handler of its own ran"
    return f"exit status {code}"


def _sockets(directory: Path) -> dict[str, int]:
    """The sockets in `directory` (file name: inode), which a socket bound again under the same name changes."""
    found = {}
    for path in directory.iterdir() if directory.is_dir() else ():
        try:
            if path.is_socket() and not path.name.startswith("."):
                found[path.name] = path.stat().st_ino
        except OSError:  # gone since it was listed
            continue
    return found


def _stop(process: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, then SIGKILL once it outlived `timeout`."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _pool_gaps(slices: Iterable[dict[str, Any]], pools: set[str]) -> list[str]:
    """'pool p gone', 'pool p generation 3: 1 of 2 slices' for each of `pools` not complete among `slices`."""
    by_pool: dict[str, list[dict[str, Any]]] = {}
    for item in slices:
        by_pool.setdefault(item["spec"]["pool"]["name"], []).append(item["spec"]["pool"])
    gaps = []
    for name in sorted(pools):
        seen = by_pool.get(name)
        if not seen:
            gaps.append(f"pool {name} gone")
            continue
        generation = max(int(pool["generation"]) for pool in seen)
        current = [pool for pool in seen if int(pool["generation"]) == generation]
        expected = int(current[0]["resourceSliceCount"])
        if len(current) != expected:
            gaps.append(f"pool {name} generation {generation}: {len(current)} of {expected} slices")
    return gaps


def _view(pool: PoolState) -> PoolView:
    """What the explorer compares of a pool: its devices, their attributes' types and version values, its content."""
    attributes = {name: dict(spec.get("attributes") or {}) for name, spec in pool.device_specs.items()}
    return PoolView(
        pool.generation,
        pool.slices,
        pool.expected_slices,
        pool.devices,
        attributes={
            name: {attribute: next(iter(value), "?") for attribute, value in values.items()}
            for name, values in attributes.items()
        },
        versions={
            name: {attribute: str(value["version"]) for attribute, value in values.items() if "version" in value}
            for name, values in attributes.items()
        },
        content=json.dumps(pool.device_specs, sort_keys=True),
        identifiers=_identifiers(attributes),
    )


def _identifiers(attributes: dict[str, dict[str, Any]]) -> dict[str, frozenset[str]]:
    """Per device, what names it alone: its name and the string attribute values no other device has."""
    strings = {
        name: {str(value["string"]) for value in values.values() if isinstance(value, dict) and "string" in value}
        for name, values in attributes.items()
    }
    counts = Counter(value for values in strings.values() for value in values)
    return {name: frozenset({name} | {v for v in values if counts[v] == 1}) for name, values in strings.items()}


def _rpc_error(error: grpc.RpcError) -> str:
    code = getattr(error, "code", None)
    details = getattr(error, "details", None)
    name = code().name if callable(code) else "?"
    return f"{name}: {details() if callable(details) else error}"
