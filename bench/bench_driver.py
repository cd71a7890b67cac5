#!/usr/bin/env python3
"""Benchmark: a driver's NodePrepareResources latency under 100 concurrent claims, and its pool publish time.

For each driver profile, on a private one-node local cluster (temporary state directory, stopped afterwards):

1. NodePrepareResources latency: the profile's device count is raised to --claims, a DeviceClass, --claims
   ResourceClaims and as many pods pinned to the node are created, and the real scheduler allocates and binds them.
   Then every claim is prepared the way the kubelet would call it: one NodePrepareResources call per claim, all
   in flight at once (a thread pool released by a barrier, over one shared gRPC connection to the driver's
   socket, as the kubelet keeps one per plugin). The latency is client side (`CallResult.latency`); p50 and p99
   use the nearest-rank method. Everything is unprepared afterwards.
   Next to it, the API floor: the API work a driver that reads its claim and writes status.devices before it
   answers does per prepare (GET the claim, then a server-side apply of one status.devices entry for its device),
   issued by this process for every claim at once over a warmed connection pool. No such driver can answer faster
   than its API calls return, so the floor says how much of a driver's latency is its own
   (ratio = driver / floor). The floor's entries, written under a field manager of their own, are removed before
   the driver prepares. Floor and prepares are measured --rounds times (default 3) on the same claims, interleaved
   (floor, prepares, unprepares, again), and the ratio reported is the median over the rounds of driver p99 / floor
   p99: one round's p99 of 100 calls swings by a factor of two with the machine's load, a median of rounds less.
2. Pool publish time: a second cluster runs the profile with --pool-devices devices. The figure runs from the
   driver process's start (its start time in /proc, clock-tick resolution) until a poll of `node_pools` first
   sees the node's pool complete at its highest generation (slices == resourceSliceCount) with --pool-devices
   devices. A thread polls every POOL_POLL_INTERVAL while `LocalBackend.start()` runs, from the moment the
   backend deploys the driver, so the figure is late by at most one interval plus one LIST.
   Measured rather than taken from the backend's `startup.drivers_ready`: that phase also covers installing the
   profile's RBAC, requesting the driver's token and the supervisor picking the process up, and it waits only for
   completeness, not for the device count. It is printed next to the measured figure for comparison; both include
   the driver's own start-up (its runtime's start, API client set-up, the first slice write).

    python bench/driver [--profiles P ...] [--claims 100] [--rounds 3] [--pool-devices 1000] [--json [PATH]]

A profile says where its driver's device count is set with the `{devices}` placeholder (in `run.args`, e.g.
`--num-devices={devices}`, or in `run.env`, e.g. `NUM_DEVICES: "{devices}"`); the benchmark's copy of the profile
sets `devices.perNode`, which the placeholder stands for. A profile without it fails with one line before any
cluster starts. A part that fails (the driver does not start, scheduling times out) prints its one-line error
and the tail of the driver's log, the other parts still run, and the exit code is 1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import bench_record
import grpc
import yaml
from bench_record import Figure, lower
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from dra_conformance import paths
from dra_conformance.backends.local import drivers
from dra_conformance.backends.local.backend import LocalBackend, LocalClusterConfig
from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.driver import confinement
from dra_conformance.driver.pool import node_pools
from dra_conformance.driver.profile import DriverProfile, load_profile
from dra_conformance.errors import ConformanceError
from dra_conformance.kube import audit_log, waits
from dra_conformance.kube.builders import RESOURCE_API, Builder
from dra_conformance.kube.client import client_from_kubeconfig
from dra_conformance.kube.namespaces import create_namespace
from dra_conformance.kubelet.client import ClaimRef, DriverClient
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.model.stats import percentile
from dra_conformance.timeouts import Timeouts
from dra_wire.kubelet_api import load

# The targets (issue): p99 of NodePrepareResources under 100 concurrent claims for the reference driver, and the
# time from a driver's process start to its complete 1,000-device pool.
TARGET_PREPARE_P99_MS = 20.0
TARGET_POOL_PUBLISH_S = 2.0
# Issue 24's target for the reference driver: its prepare p99 at most this many times the API floor's.
TARGET_P99_OVER_FLOOR = 1.3

# The profile placeholder that stands for devices.perNode: where a profile sets its driver's device count.
DEVICE_COUNT_PLACEHOLDER = "devices"

# Scheduling 100 pods with one claim each on one node: the scheduler allocates a few dozen per second on 2 cores,
# and a pod that loses a race for a device is retried with backoff (up to 10 s); three minutes is ample without
# hiding a stuck scheduler.
ALLOCATED_DEADLINE = 180.0
# Poll interval of the pool-completion observer: small against the 2 s target, one cheap LIST each.
POOL_POLL_INTERVAL = 0.025
# A gRPC connection to a local Unix socket is up in milliseconds; the deadline catches a driver that never answers.
CONNECT_DEADLINE = 5.0
# All calls start together once every thread is up; a thread pool of 100 starts in well under a second.
BARRIER_DEADLINE = 30.0
# How long the kubelet gives one NodePrepareResources call (defaultClientCallTimeout, k8s.io/kubernetes v1.37.2
# pkg/kubelet/cm/dra/plugin/dra_plugin.go:43): a prepare slower than this fails on a real node.
KUBELET_CALL_DEADLINE = 45.0
# client-go's default client rate limit (k8s.io/client-go v0.37.2 rest/config.go:48-49), which many drivers keep.
CLIENT_GO_DEFAULT_QPS, CLIENT_GO_DEFAULT_BURST = 5, 10
# A per-second request count that stays within this share of its median (or within one request) is "flat".
FLAT_RATE_TOLERANCE = 0.2
# Prepares whose p99 exceeds the API floor's by this factor waited for something besides the API server.
SLOW_AGAINST_FLOOR = 2.0
# Field manager of the API floor's status entries, so removing them leaves any other entry alone.
FLOOR_FIELD_MANAGER = "bench-driver-floor"
# The floor's condition type. Conditions are a list keyed by type: under a type of its own the floor's condition is
# wholly its own, so removing it never leaves half a condition behind, also beside an entry the driver kept after
# unprepare (which the contract allows), where a shared "Ready" would lose its required fields (422).
FLOOR_CONDITION = "BenchFloor"
# Lines of each driver log quoted when a part fails, and their maximum width.
LOG_TAIL_LINES = 10
LOG_LINE_WIDTH = 600
NAMESPACE = "bench-driver"


class BenchError(Exception):
    """One part of the benchmark could not measure; the message is one line."""


# --- the profile copies -------------------------------------------------------------------------------------------


def check_sizeable(profile_path: Path) -> None:
    """A one-line BenchError unless the profile sets its driver's device count through `{devices}`."""
    profile = load_profile(profile_path)
    if profile.run is None or not profile.run.process.uses(DEVICE_COUNT_PLACEHOLDER):
        raise BenchError(
            f"{profile_path}: cannot size its pool: no run.args or run.env uses {{{DEVICE_COUNT_PLACEHOLDER}}}; "
            f"write it where the driver's device count is set (e.g. --num-devices={{{DEVICE_COUNT_PLACEHOLDER}}}, "
            f'or NUM_DEVICES: "{{{DEVICE_COUNT_PLACEHOLDER}}}" under run.env)'
        )


def sized_copy(profile_path: Path, devices: int, directory: Path) -> Path:
    """Write a copy of the profile whose driver publishes `devices` devices per node; the original is untouched.

    `{devices}` in the profile's run stands for devices.perNode, so the copy sets only that. It lives elsewhere,
    so its RBAC paths (relative to the profile) are made absolute.
    """
    check_sizeable(profile_path)
    raw: dict[str, Any] = yaml.safe_load(profile_path.read_text())
    identity = raw["identity"]
    identity["rbac"] = [str((profile_path.parent / p).resolve()) for p in identity.get("rbac", [])]
    controller = identity.get("controller") or {}
    if "rbac" in controller:
        controller["rbac"] = [str((profile_path.parent / p).resolve()) for p in controller["rbac"]]
    raw["devices"]["perNode"] = devices
    raw["hostPaths"] = confinement.host_paths_of_copy(raw, profile_path.parent)
    directory.mkdir(parents=True, exist_ok=True)
    copy = directory / f"{profile_path.stem}-{devices}-devices.yaml"
    copy.write_text(yaml.safe_dump(raw, sort_keys=False))
    load_profile(copy)  # validated as the backend will load it
    return copy


# --- the cluster --------------------------------------------------------------------------------------------------


def log_tails(state_dir: Path) -> list[str]:
    """The last lines of every driver log in the cluster's logs/, for a failed part."""
    lines: list[str] = []
    for log in sorted((state_dir / "logs").glob(f"{drivers.process_name('*')}.log")):
        tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-LOG_TAIL_LINES:]
        lines.append(f"    --- last {len(tail)} lines of {log}:")
        lines.extend(f"    {line[:LOG_LINE_WIDTH]}{' [...]' if len(line) > LOG_LINE_WIDTH else ''}" for line in tail)
    return lines


def local_backend(profile: Path, state_dir: Path) -> LocalBackend:
    """A private one-node cluster running `profile`; it stops by itself if this process dies (owner_pid)."""
    return LocalBackend(
        LocalClusterConfig(state_dir=state_dir, nodes=1, profile=profile, metrics="none", owner_pid=os.getpid())
    )


@contextlib.contextmanager
def cluster(backend: LocalBackend, failure: list[str]) -> Iterator[ClusterInfo]:
    """Start `backend`'s cluster and stop it on exit, also on Ctrl-C.

    When the start or the work inside fails, the tails of the driver logs go to `failure` before the stop (the
    state directory is removed afterwards), and a BenchError carries the one-line error.
    """
    try:
        try:
            info = backend.start()
        except ConformanceError as error:
            failure.extend(log_tails(backend.layout.root))
            raise BenchError(f"cluster start: {type(error).__name__}: {error}") from None
        try:
            yield info
        except BenchError:
            failure.extend(log_tails(backend.layout.root))
            raise
        except (ConformanceError, ApiException, HTTPError, grpc.RpcError) as error:
            failure.extend(log_tails(backend.layout.root))
            raise BenchError(f"{type(error).__name__}: {' '.join(str(error).split())}") from None
    finally:
        backend.stop()


# --- part 1: NodePrepareResources latency -------------------------------------------------------------------------


@dataclass
class LatencyResult:
    """Client-side latencies of the successful calls, and what went wrong in the others."""

    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    setup_seconds: float = 0.0
    unprepare_errors: int = 0
    # The same concurrency of GET + status apply, and of GET alone, issued by the benchmark itself (see the
    # module's docstring).
    floor: LatencyResult | None = None
    read_floor: LatencyResult | None = None
    # The driver's own API requests per second while the prepares ran (from the audit log), and whose they are.
    driver_requests: list[int] = field(default_factory=list)
    driver_user: str = ""
    # (driver p99, floor p99) of each round: the floor, then the prepares, then the unprepares, repeated.
    rounds: list[tuple[float, float]] = field(default_factory=list)

    def median_ratio(self) -> float:
        """The median over the rounds of driver p99 / floor p99 (nan without a round that has both)."""
        ratios = [driver / floor for driver, floor in self.rounds if floor > 0]
        return statistics.median(ratios) if ratios else float("nan")

    def percentile(self, quantile: float) -> float:
        """The nearest-rank percentile (`model.stats`) of the latencies, in seconds."""
        return percentile(self.latencies, quantile)


def allocate(api: client.ApiClient, profile: DriverProfile, node: str, claims: int) -> list[dict[str, Any]]:
    """Create a DeviceClass, `claims` claims and pods pinned to `node`; return the claims once all are allocated."""
    group, version = RESOURCE_API.split("/")
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    create_namespace(api, NAMESPACE, "bench-driver", Timeouts().namespace_ready)
    builder = Builder(NAMESPACE, profile.driver)
    device_class = builder.device_class()
    custom.create_cluster_custom_object(group, version, "deviceclasses", device_class)
    for _ in range(claims):
        claim = builder.claim(device_class["metadata"]["name"])
        custom.create_namespaced_custom_object(group, version, NAMESPACE, "resourceclaims", claim)
        core.create_namespaced_pod(NAMESPACE, builder.pod(claim=claim["metadata"]["name"], node=node))

    def observe() -> tuple[list[dict[str, Any]], int]:
        listed = custom.list_namespaced_custom_object(group, version, NAMESPACE, "resourceclaims")["items"]
        bound = sum(1 for pod in core.list_namespaced_pod(NAMESPACE).items if pod.spec.node_name == node)
        return [c for c in listed if (c.get("status") or {}).get("allocation")], bound

    allocated, _ = waits.until(
        observe,
        lambda seen: len(seen[0]) == claims and seen[1] == claims,
        timeout=ALLOCATED_DEADLINE,
        what=f"{claims} claims allocated and {claims} pods bound to {node}",
        describe=lambda seen: f"{len(seen[0])} claims allocated, {seen[1]} pods bound",
        retry_on=(ApiException, HTTPError),
    )
    return allocated


def concurrently(work: Callable[[Any], float], items: list[Any]) -> list[float]:
    """Run `work` for every item at once (threads released by a barrier); its returned latencies, in order."""
    barrier = threading.Barrier(len(items))

    def call(item: Any) -> float:
        barrier.wait(BARRIER_DEADLINE)
        return work(item)

    with ThreadPoolExecutor(max_workers=len(items), thread_name_prefix="floor") as executor:
        return list(executor.map(call, items))


def api_floor(kubeconfig: Path, claims: list[dict[str, Any]], result: LatencyResult, reads: LatencyResult) -> None:
    """GET + status apply per claim, all at once, from this process (then GET alone, into `reads`).

    The status entries are removed afterwards.
    """
    # One connection per concurrent caller, as a driver could.
    with client_from_kubeconfig(kubeconfig, connections=len(claims)) as api:
        resource = client.ResourceV1Api(api)

        def read(claim: dict[str, Any]) -> float:
            started = time.monotonic()
            meta = claim["metadata"]
            response = resource.read_namespaced_resource_claim(meta["name"], meta["namespace"], _preload_content=False)
            response.data  # noqa: B018 - read the body, as a driver must
            response.release_conn()
            return time.monotonic() - started

        def apply(claim: dict[str, Any], entries: list[dict[str, Any]]) -> None:
            meta = claim["metadata"]
            body = {
                "apiVersion": RESOURCE_API,
                "kind": "ResourceClaim",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
                "status": {"devices": entries},
            }
            response = resource.patch_namespaced_resource_claim_status(
                meta["name"],
                meta["namespace"],
                body,
                field_manager=FLOOR_FIELD_MANAGER,
                force=True,
                _content_type="application/apply-patch+yaml",
                _preload_content=False,
            )
            response.data  # noqa: B018
            response.release_conn()

        def entry(claim: dict[str, Any]) -> list[dict[str, Any]]:
            allocated = claim["status"]["allocation"]["devices"]["results"][0]
            condition = {
                "type": FLOOR_CONDITION,
                "status": "True",
                "reason": "Floor",
                "message": "bench/driver API floor",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
            keys = {key: allocated[key] for key in ("driver", "pool", "device")}
            return [{**keys, "conditions": [condition]}]

        def read_and_write(claim: dict[str, Any]) -> float:
            started = time.monotonic()
            read(claim)
            apply(claim, entry(claim))
            return time.monotonic() - started

        concurrently(read, claims)  # warms the connection pool: a driver's connections are up long before
        result.latencies = concurrently(read_and_write, claims)
        reads.latencies = concurrently(read, claims)

        def remove(claim: dict[str, Any]) -> float:
            apply(claim, [])
            return 0.0

        concurrently(remove, claims)


def prepare_all(driver: DriverClient, refs: list[ClaimRef], result: LatencyResult) -> None:
    """One NodePrepareResources call per claim, all in flight at once; record latencies and errors."""
    barrier = threading.Barrier(len(refs))

    def call(ref: ClaimRef) -> tuple[float | None, str]:
        barrier.wait(BARRIER_DEADLINE)
        try:
            answer = driver.prepare([ref])
        except grpc.RpcError as error:
            return None, f"{ref.name}: {error.code()}: {error.details()}"
        claim = answer.claims.get(ref.uid)
        problem = "no answer for the claim" if claim is None else claim.error
        return (None, f"{ref.name}: {problem}") if problem else (answer.latency, "")

    executor = ThreadPoolExecutor(max_workers=len(refs), thread_name_prefix="prepare")
    try:
        for latency, error in executor.map(call, refs):
            if latency is not None:
                result.latencies.append(latency)
            else:
                result.errors.append(error)
    except BaseException as error:
        barrier.abort()
        executor.shutdown(wait=False, cancel_futures=True)
        if isinstance(error, threading.BrokenBarrierError):
            raise BenchError(f"{len(refs)} calling threads not all started within {BARRIER_DEADLINE:g}s") from None
        raise
    executor.shutdown()


def unprepare_all(driver: DriverClient, refs: list[ClaimRef]) -> int:
    """NodeUnprepareResources for every claim (also concurrently); the number of claims that failed."""

    def call(ref: ClaimRef) -> bool:
        try:
            answer = driver.unprepare([ref])
        except grpc.RpcError:
            return False
        return not any(claim.error for claim in answer.claims.values())

    with ThreadPoolExecutor(max_workers=len(refs), thread_name_prefix="unprepare") as executor:
        return sum(1 for ok in executor.map(call, refs) if not ok)


def measure_latency(
    profile_path: Path, claims: int, scratch: Path, failure: list[str], rounds: int = 1
) -> LatencyResult:
    """Prepare latency against the API floor, measured `rounds` times on one cluster.

    Each round is the API floor, then every claim prepared at once, then every claim unprepared: interleaved, so a
    spell of load on a shared machine hits the floor and the driver alike. The result pools every round's
    latencies; its `rounds` keeps each round's p99s, and the audit log's request rate is the first round's.
    """
    copy = sized_copy(profile_path, claims, scratch / "profiles")
    profile = load_profile(copy)
    result = LatencyResult(floor=LatencyResult(), read_floor=LatencyResult())
    assert result.floor is not None and result.read_floor is not None
    with cluster(local_backend(copy, scratch / "cluster-latency"), failure) as info:
        endpoint = info.drivers[0]
        started = time.monotonic()
        with client_from_kubeconfig(info.kubeconfig) as api:
            allocated = allocate(api, profile, endpoint.node, claims)
        result.setup_seconds = time.monotonic() - started
        refs = [ClaimRef.of(claim) for claim in allocated]
        for index in range(rounds):
            floor, reads, prepared = LatencyResult(), LatencyResult(), LatencyResult()
            api_floor(info.kubeconfig, allocated, floor, reads)
            with DriverClient(load(), endpoint.registration_socket) as driver:
                # Connect first, as the kubelet does when the plugin registers: no call pays for the connection.
                grpc.channel_ready_future(driver.endpoint()).result(timeout=CONNECT_DEADLINE)
                since = time.time()
                prepare_all(driver, refs, prepared)
                until = time.time()
            if index == 0 and info.audit_log is not None:
                account = profile.identity.service_account
                result.driver_user = f"system:serviceaccount:{account.namespace}:{account.name}"
                result.driver_requests = audit_log.requests_per_second(info.audit_log, result.driver_user, since, until)
            with DriverClient(load(), endpoint.registration_socket) as driver:
                result.unprepare_errors += unprepare_all(driver, refs)  # on a failure the cluster goes anyway
            result.latencies += prepared.latencies
            result.errors += prepared.errors
            result.floor.latencies += floor.latencies
            result.read_floor.latencies += reads.latencies
            if prepared.latencies and floor.latencies:
                result.rounds.append((prepared.percentile(0.99), floor.percentile(0.99)))
    return result


# --- part 2: pool publish time ------------------------------------------------------------------------------------


class PoolObserver(threading.Thread):
    """Polls the node's pools while the backend starts the cluster; notes when the full pool is first seen."""

    def __init__(self, layout: ClusterLayout, driver: str, node: str, devices: int) -> None:
        """Observe `driver`'s pools on `node` of the cluster in `layout`, waiting for `devices` devices."""
        super().__init__(name="pool-observer", daemon=True)
        self.layout, self.driver, self.node, self.devices = layout, driver, node, devices
        self.stop = threading.Event()
        # CLOCK_BOOTTIME seconds of the LIST answer that first showed the complete pool.
        self.complete_at: float | None = None
        self.last_seen = "no ResourceSlice for this node"

    def run(self) -> None:
        """Wait for the driver's deployment, then poll until the full pool is seen or `stop` is set."""
        # deploy() creates the node's registration directory just before the driver process is added.
        registrar = drivers.kubelet_root(self.layout, self.node) / "plugins_registry"
        while not registrar.is_dir():
            if self.stop.wait(POOL_POLL_INTERVAL):
                return
        with client_from_kubeconfig(self.layout.kubeconfig, retries=0) as api:
            while not self.stop.is_set():
                try:
                    pools = node_pools(api, self.driver, self.node)
                except (ApiException, HTTPError):
                    pools = {}
                now = time.clock_gettime(time.CLOCK_BOOTTIME)
                if pools:
                    self.last_seen = "; ".join(pool.describe() for pool in pools.values())
                if any(pool.complete and len(pool.devices) == self.devices for pool in pools.values()):
                    self.complete_at = now
                    return
                self.stop.wait(POOL_POLL_INTERVAL)


def process_start(pid: int) -> float:
    """CLOCK_BOOTTIME seconds at which process `pid` started (field 22 of /proc/<pid>/stat, in clock ticks)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces; fields from 3 (state) on
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")


@dataclass
class PoolResult:
    """Seconds from the driver process's start to its complete pool, and the backend's own phase figure."""

    publish_seconds: float
    drivers_ready: float


def measure_pool(profile_path: Path, devices: int, scratch: Path, failure: list[str]) -> PoolResult:
    copy = sized_copy(profile_path, devices, scratch / "profiles")
    profile = load_profile(copy)
    backend = local_backend(copy, scratch / "cluster-pool")
    node = backend.node_names()[0]
    observer = PoolObserver(backend.layout, profile.driver, node, devices)
    observer.start()
    try:
        with cluster(backend, failure) as info:
            observer.join(CONNECT_DEADLINE)  # start() returned once the pool was complete: seen on the next poll
            if observer.complete_at is None:
                raise BenchError(
                    f"the pool on {node} never held {devices} devices at a complete generation; "
                    f"last seen: {observer.last_seen}"
                )
            started = process_start(int(info.details[f"pid.{drivers.process_name(node)}"]))
            return PoolResult(observer.complete_at - started, float(info.details["startup.drivers_ready"]))
    finally:
        observer.stop.set()
        observer.join()


# --- the report ---------------------------------------------------------------------------------------------------


@dataclass
class ProfileReport:
    """What was measured for one profile, or why a part could not be measured (with its log lines)."""

    path: Path
    driver: str
    latency: LatencyResult | None = None
    latency_error: str = ""
    latency_log: list[str] = field(default_factory=list)
    pool: PoolResult | None = None
    pool_error: str = ""
    pool_log: list[str] = field(default_factory=list)


def throttling_diagnosis(requests: list[int], p99: float, floor_p99: float) -> str:
    """One line: whether the driver's API request rate during the prepares points at a client-side rate limiter.

    A limiter shows as a flat rate: the same number of requests every second while prepares queue behind it,
    whatever the API server could take. The first and last seconds are partial and left out.
    """
    inner = requests[1:-1]
    if len(inner) < 2:
        return (
            f"no sign of a client-side rate limit: {sum(requests)} requests within {len(requests)} s (a limiter "
            "shows as the same count second after second while prepares wait)"
        )
    median = statistics.median(inner)
    spread = max(inner) - min(inner)
    flat = median > 0 and spread <= max(1.0, FLAT_RATE_TOLERANCE * median)
    slow = floor_p99 > 0 and p99 > SLOW_AGAINST_FLOOR * floor_p99
    if flat and slow:
        return (
            f"THROTTLED: the driver's API requests ran flat at ~{median:g}/s for {len(inner)} s while prepares "
            f"waited (p99 {p99 / floor_p99:.1f}x the API floor): its API client's rate limiter is the likely cause "
            f"(client-go's default is QPS {CLIENT_GO_DEFAULT_QPS}, burst {CLIENT_GO_DEFAULT_BURST}); raise the "
            "driver's QPS/burst"
        )
    if flat:
        return f"request rate flat at ~{median:g}/s, but prepares kept within {SLOW_AGAINST_FLOOR:g}x the API floor"
    return f"no sign of a client-side rate limit: {min(inner)}-{max(inner)} requests per second (median {median:g})"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def print_profile(report: ProfileReport, claims: int, pool_devices: int) -> None:
    print(f"== {report.path.name}: driver {report.driver}", flush=True)
    latency = report.latency
    label = f"NodePrepareResources, {claims} concurrent claims (client side)"
    if latency is not None:
        p50, p99 = (ms(latency.percentile(q)) if latency.latencies else "-" for q in (0.5, 0.99))
        worst = ms(max(latency.latencies)) if latency.latencies else "-"
        print(f"  {label:<58} count {len(latency.latencies)}  p50 {p50}  p99 {p99}  max {worst}")
        print(
            f"  {'':<58} errors {len(latency.errors)}  (allocated and bound in {latency.setup_seconds:.1f} s; "
            f"unprepare errors {latency.unprepare_errors})"
        )
        for error in latency.errors[:3]:
            print(f"    error: {error}")
        if latency.floor is not None and latency.floor.latencies:
            floor = latency.floor
            print(
                f"  {'API floor: GET + status apply per claim, same concurrency':<58} p50 {ms(floor.percentile(0.5))}"
                f"  p99 {ms(floor.percentile(0.99))}"
            )
        if latency.rounds:
            pairs = ", ".join(f"{ms(driver)} / {ms(floor)}" for driver, floor in latency.rounds)
            print(
                f"  {'driver p99 / floor p99 per round (floor, then prepares)':<58} {pairs}; median ratio "
                f"{latency.median_ratio():.2f} (target <= {TARGET_P99_OVER_FLOOR:g} for the reference driver)"
            )
        if latency.read_floor is not None and latency.read_floor.latencies:
            reads = latency.read_floor
            print(
                f"  {'API floor: GET alone per claim, same concurrency':<58} p50 {ms(reads.percentile(0.5))}"
                f"  p99 {ms(reads.percentile(0.99))}"
            )
        if latency.latencies:
            slowest = latency.percentile(0.99)
            within = "within it" if slowest < KUBELET_CALL_DEADLINE else "prepares this slow would FAIL on a real node"
            print(
                f"  {'kubelet gRPC deadline per NodePrepareResources call':<58} {KUBELET_CALL_DEADLINE:g} s; "
                f"p99 {ms(slowest)}: {within}"
            )
        if latency.driver_requests:
            per_second = " ".join(str(count) for count in latency.driver_requests)
            print(
                f"  {'driver API requests per second during the prepares':<58} {per_second}  "
                f"({sum(latency.driver_requests)} by {latency.driver_user}, from the audit log)"
            )
            floor_p99 = latency.floor.percentile(0.99) if latency.floor and latency.floor.latencies else 0.0
            slowest = latency.percentile(0.99) if latency.latencies else 0.0
            print(f"  {'':<58} {throttling_diagnosis(latency.driver_requests, slowest, floor_p99)}")
    else:
        print(f"  {label:<58} FAILED: {report.latency_error}")
        for line in report.latency_log:
            print(line)
    label = f"pool publish, {pool_devices} devices"
    if report.pool is not None:
        print(
            f"  {label:<58} {report.pool.publish_seconds:.2f} s  (process start -> complete pool, incl. the "
            f"driver's start-up and first slice write)"
        )
        print(
            f"  {'':<58} startup.drivers_ready {report.pool.drivers_ready:.2f} s  (backend phase: also RBAC, "
            "token and supervisor hand-off)"
        )
    else:
        print(f"  {label:<58} FAILED: {report.pool_error}")
        for line in report.pool_log:
            print(line)


def print_targets(reports: list[ProfileReport]) -> None:
    print(
        f"targets: NodePrepareResources p99 <= {TARGET_PREPARE_P99_MS:g} ms (stated for the reference driver; other "
        f"profiles shown against it), pool publish <= {TARGET_POOL_PUBLISH_S:g} s (ratio = measured / target)"
    )
    width = max(len(r.path.name) for r in reports)
    for report in reports:
        if report.latency is not None and report.latency.latencies:
            p99 = report.latency.percentile(0.99) * 1000
            prepare = f"p99 {p99:.1f} ms -> ratio {p99 / TARGET_PREPARE_P99_MS:.2f}"
        else:
            prepare = "p99 not measured"
        if report.pool is not None:
            seconds = report.pool.publish_seconds
            pool = f"pool {seconds:.2f} s -> ratio {seconds / TARGET_POOL_PUBLISH_S:.2f}"
        else:
            pool = "pool not measured"
        print(f"  {report.path.name:<{width}}  {prepare:<34}  {pool}")


def figures(reports: list[ProfileReport], wall_seconds: float) -> list[Figure]:
    """The record of the printed figures (`--json`), each named after its profile's file: `<stem>.<figure>`."""
    found = [lower("wall_s", wall_seconds, "s")]
    for report in reports:
        prefix = report.path.stem
        latency = report.latency
        if latency is not None:
            found += [
                lower(f"{prefix}.prepare_errors", len(latency.errors), "count"),
                lower(f"{prefix}.unprepare_errors", latency.unprepare_errors, "count"),
                lower(f"{prefix}.allocate_s", latency.setup_seconds, "s"),
            ]
            if latency.latencies:
                found += [
                    lower(f"{prefix}.prepare_p50_ms", latency.percentile(0.5) * 1000, "ms"),
                    lower(f"{prefix}.prepare_p99_ms", latency.percentile(0.99) * 1000, "ms"),
                    lower(f"{prefix}.prepare_max_ms", max(latency.latencies) * 1000, "ms"),
                ]
            for name, floor in (("floor", latency.floor), ("read_floor", latency.read_floor)):
                if floor is not None and floor.latencies:
                    found.append(lower(f"{prefix}.{name}_p50_ms", floor.percentile(0.5) * 1000, "ms"))
                    found.append(lower(f"{prefix}.{name}_p99_ms", floor.percentile(0.99) * 1000, "ms"))
            if latency.rounds:
                found.append(lower(f"{prefix}.prepare_p99_over_floor", latency.median_ratio(), "x"))
        if report.pool is not None:
            found.append(lower(f"{prefix}.pool_publish_s", report.pool.publish_seconds, "s"))
            found.append(lower(f"{prefix}.drivers_ready_s", report.pool.drivers_ready, "s"))
    return found


def measure(path: Path, claims: int, pool_devices: int, rounds: int = 1) -> ProfileReport:
    report = ProfileReport(path, load_profile(path).driver)
    with tempfile.TemporaryDirectory(prefix="dra-bench-driver-") as scratch:
        try:
            report.latency = measure_latency(path, claims, Path(scratch) / "latency", report.latency_log, rounds)
        except BenchError as error:
            report.latency_error = str(error)
    with tempfile.TemporaryDirectory(prefix="dra-bench-driver-") as scratch:
        try:
            report.pool = measure_pool(path, pool_devices, Path(scratch) / "pool", report.pool_log)
        except BenchError as error:
            report.pool_error = str(error)
    return report


def interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up like Ctrl-C: clusters stopped, temporary directories removed


def main() -> None:
    profiles_dir = paths.fixtures_dir() / "profiles"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--profiles",
        nargs="+",
        type=Path,
        default=[
            profiles_dir / "reference-driver.yaml",
            profiles_dir / "upstream-test-driver.yaml",
        ],
    )
    parser.add_argument("--claims", type=int, default=100, help="concurrent claims to prepare (default 100)")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of floor, prepares and unprepares, interleaved (default 3)"
    )
    parser.add_argument("--pool-devices", type=int, default=1000, help="devices in the published pool (default 1000)")
    bench_record.add_option(parser)
    args = parser.parse_args()
    if args.claims < 1 or args.pool_devices < 1 or args.rounds < 1:
        parser.error("--claims, --pool-devices and --rounds must be at least 1")
    signal.signal(signal.SIGTERM, interrupt)
    try:
        for path in args.profiles:  # every profile sizeable before any cluster starts
            check_sizeable(path)
    except (BenchError, ConformanceError) as error:
        sys.exit(f"bench/driver: {error}")
    started = time.monotonic()
    reports = []
    try:
        for path in args.profiles:
            reports.append(measure(path, args.claims, args.pool_devices, args.rounds))
            print_profile(reports[-1], args.claims, args.pool_devices)
    except KeyboardInterrupt:
        sys.exit("bench/driver: interrupted; clusters stopped, temporary directories removed")
    print_targets(reports)
    wall = time.monotonic() - started
    print(f"total wall time {wall:.0f} s")
    bench_record.save(args.json, "driver", figures(reports, wall))
    if any(report.latency is None or report.pool is None or report.latency.errors for report in reports):
        sys.exit(1)


if __name__ == "__main__":
    main()
