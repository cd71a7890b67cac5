#!/usr/bin/env python3
"""Benchmark: the default suites on a 1,000-node cluster against the default 4-node one: cost must not grow with it.

Two private local clusters, one after the other (each in a temporary state directory of its own, stopped at the end,
also on Ctrl-C or SIGTERM, and by the supervisor itself if this process dies), each started as `dra-conformance run`
starts it (the reference driver under test on 2 fake nodes plus the 2 set-aside nodes, the reference metrics
adapter):

1. baseline: the default cluster, 4 nodes.
2. scaled: the same, then grown by the bench to --nodes nodes in all (default 1,000): the added nodes are copies of
   kwok-node-0 as bench/scheduling registers them (kwok manages them; they do not carry the backend's node label,
   as a production cluster's nodes would not), every node of the cluster carries a pool of a second driver
   (`scale.bench.dra-conformance.io`, --devices devices in all, default 10,000: the slices are rendered by the
   reference driver's own binary from its command line with the driver and node names changed, and published
   through the API, as bench/scheduling does), and --pods unrelated pods (default 2,000) run in namespaces of
   their own, 100 per namespace, bound to the regular nodes round robin (kwok runs them).

On each cluster, the default suites run as `dra-conformance run` runs them (the same pytest options, -n 2,
`suites/`; its Allure HTML is not rendered), timed from the start of pytest to its exit: once, or `--runs N` times
on the same cluster, when the ratio is of the median wall times (one run's wall time swung by 10-15% on a shared
machine, and the ratio of two single runs by as much; the request and list figures cover the first run). The bench
prints:

- both wall times, their ratio and the target (at most 1.3x) met or not, the suites' own CPU (pytest and its
  workers) and the control plane's CPU during each run (a machine busier with a larger cluster shows there, not in
  the suites' work), and the tests whose duration grew the most;
- the API server's requests during each run per resource and verb, side by side (`apiserver_request_total` from
  its /metrics, after minus before), and the bytes of its LIST answers per resource and scope
  (`apiserver_response_sizes` sum): a regression in either shows as a ratio;
- the largest list calls of the scaled run, by response size, with who made them. The local backend's audit
  policy logs at Metadata level, which records no sizes; and `apiserver_response_sizes` has no caller or selector
  label. So the bench takes who, what and how often from the audit log (user, user agent, verb, resource, the
  request URI with its selectors, for every list call received during the run), and the size by replaying each
  distinct list URI once after the run on the same cluster (JSON, the admin identity; paging and resourceVersion
  parameters dropped, `limit` kept): every cluster-scoped one, and every one in a namespace that outlived the run.
  Raising the audit level to RequestResponse for lists would record sizes directly, but it serializes every listed
  object into the log during the timed run, at 1,000 nodes megabytes per list call: the measure would change what
  it measures. Lists in the run's own namespaces are not replayed (the namespaces are gone by then, and they hold
  only what the tests made); the histogram gives their bytes. A namespace that outlived the run was not the run's:
  a check listing there reads what grows with the cluster.

    python bench/scale [--nodes 1000] [--devices 10000] [--pods 2000] [-n 2] [--runs 1] [--suites suites]
                       [--profile-phases] [--json [PATH]]

`--profile-phases` records the first run on each cluster with `--dra-phases-file` and prints, for the tests that
grew most, their waits on both clusters side by side: which condition took longer on the larger cluster.

Heavy: two cluster starts, the growth (nodes, slices, pods) and two full default runs, several minutes of both
cores; run it on a machine nobody else is measuring on. Try `--nodes 50 --devices 500 --pods 100` first. The bench
exits 0 whatever the ratio (the target is a printed figure); non-zero only when it could not measure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import bench_record
import bench_scheduling
import phases_report
from bench_record import Figure, lower
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from dra_conformance import paths
from dra_conformance.backends.local import drivers
from dra_conformance.backends.local.backend import NODE_LABEL, SET_ASIDE_NODES, LocalBackend, LocalClusterConfig
from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.backends.local.network import NODE_ADDRESS_BASE
from dra_conformance.cli import SUITE_PYTEST_OPTIONS
from dra_conformance.config import SuiteConfig
from dra_conformance.cpus import available_cpus, default_workers
from dra_conformance.errors import ConformanceError
from dra_conformance.kube import audit_log, waits
from dra_conformance.kube.namespaces import create_namespace
from dra_conformance.kube.nodes import ready_node_names
from dra_conformance.timeouts import Timeouts

# The ratio of the scaled run's wall time to the baseline's that issue 24 sets as the target.
TARGET_RATIO = 1.3
SECOND_DRIVER = "scale.bench.dra-conformance.io"
# The label of the nodes the bench adds (the backend's own carry NODE_LABEL; these must not).
BENCH_NODE_LABEL = "dra-conformance.io/bench-scale-node"
POD_NAMESPACE_PREFIX = "bench-scale-pods-"
PODS_PER_NAMESPACE = 100
RUN_ID = "bench-scale"
# The unrelated pods' container: kwok never pulls it; a real node would run the pause image.
POD_IMAGE = "registry.k8s.io/pause:3.10"
# Deadlines of the growth, each proportional to what is created (a rate far below what the API server and kwok
# manage on a loaded 2-core machine, so a slow but working cluster finishes and a stuck one is reported): nodes
# Ready (kwok's node stage), pools listed complete (the API server storing them), pods Running (kwok's pod stage).
MIN_RATE = 5.0
MIN_DEADLINE = 120.0
# A list answer on loopback takes seconds at most, even a 1,000-node one.
LIST_TIMEOUT = 60.0
# The default suites take minutes; an hour means pytest hangs.
SUITE_DEADLINE = 3600.0
# Query parameters that do not change what a list returns (paging, consistency, watch), dropped before the replay.
DROPPED_PARAMETERS = frozenset(
    {
        "resourceVersion",
        "resourceVersionMatch",
        "continue",
        "timeout",
        "timeoutSeconds",
        "allowWatchBookmarks",
        "sendInitialEvents",
        "watch",
    }
)
# Threads creating the growth's objects (as bench/scheduling's default): the API server, not this process, is the limit.
GROWTH_WORKERS = 8
# Rows of the printed tables.
TOP_LIST_CALLS = 15
TOP_REQUESTS = 30
TOP_GROWN_TESTS = 10
# With --profile-phases: the tests whose waits are printed, and the shortest wait printed (seconds).
TOP_WAITED_TESTS = 5
WAIT_FLOOR = 0.5
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
DRIVERS = "drivers (sum)"
# The processes whose CPU the report prints, beside the suites' own.
PROCESSES = (*CONTROL_PLANE, "fake-metrics", DRIVERS)
REQUESTS_METRIC = "apiserver_request_total"
SIZES_METRIC = "apiserver_response_sizes"


class BenchError(Exception):
    """The benchmark could not measure; the message is one line."""


# --- growing the cluster --------------------------------------------------------------------------------------------


def node_address(index: int) -> str:
    """A loopback address for the `index`th node, past 127.0.0.255 when needed (all of 127/8 is loopback)."""
    number = NODE_ADDRESS_BASE + index
    return f"127.{(number >> 16) & 255}.{(number >> 8) & 255}.{number & 255}"


def deadline(count: int) -> float:
    return max(MIN_DEADLINE, count / MIN_RATE)


def register_nodes(api: client.ApiClient, names: list[str], first_index: int, workers: int) -> None:
    """Register `names` as copies of kwok-node-0 without the backend's node label; wait until kwok has them Ready."""
    core = client.CoreV1Api(api)
    template = api.sanitize_for_serialization(core.read_node(bench_scheduling.node_names(1)[0]))
    metadata, status = template["metadata"], template["status"]
    labels = {key: value for key, value in metadata["labels"].items() if key != NODE_LABEL}

    def manifest(index: int, name: str) -> dict[str, Any]:
        origin = bench_scheduling.node_names(1)[0]
        addresses = [
            {"type": "InternalIP", "address": node_address(index)},
            {"type": "Hostname", "address": name},
            *(a for a in status["addresses"] if a["type"] not in ("InternalIP", "Hostname")),
        ]
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {**labels, "kubernetes.io/hostname": name, BENCH_NODE_LABEL: "true"},
                "annotations": {k: v.replace(origin, name) for k, v in metadata.get("annotations", {}).items()},
            },
            "status": {"addresses": addresses, "capacity": status["capacity"], "allocatable": status["capacity"]},
        }

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nodes") as pool:
        list(
            pool.map(
                lambda item: bench_scheduling.drain(core.create_node(manifest(*item), _preload_content=False)),
                enumerate(names, start=first_index),
            )
        )
    waits.until(
        lambda: len(ready_node_names(core, f"{BENCH_NODE_LABEL}=true")),
        lambda count: count == len(names),
        timeout=deadline(len(names)),
        what=f"{len(names)} nodes registered by the bench Ready (kwok managing them)",
        describe=lambda count: f"{count} Ready",
        retry_on=(ApiException, HTTPError),
    )


def per_node(devices: int, nodes: int) -> list[int]:
    """`devices` spread over `nodes` pools as evenly as they go (the first ones take the remainder)."""
    return [devices // nodes + (1 if index < devices % nodes else 0) for index in range(nodes)]


def publish_second_driver(
    api: client.ApiClient, layout: ClusterLayout, nodes: list[str], devices: int, workers: int
) -> int:
    """Publish a pool of SECOND_DRIVER on every node in `nodes`, `devices` devices in all; return the slices written.

    The reference driver renders each pool (`bench_scheduling.reference_pool`) from its command line on kwok-node-0
    with the driver name, the node name and the device count changed.
    """
    manifests: list[dict[str, Any]] = []
    for name, count in zip(nodes, per_node(devices, len(nodes)), strict=True):
        changed = {"--node-name": name, "--driver-name": SECOND_DRIVER, "--devices": str(count)}
        manifests += bench_scheduling.reference_pool(layout, changed)
    resource_api = client.ResourceV1Api(api)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="slices") as pool:
        list(
            pool.map(
                lambda body: bench_scheduling.drain(resource_api.create_resource_slice(body, _preload_content=False)),
                manifests,
            )
        )

    def listed() -> int:
        answer = resource_api.list_resource_slice(
            field_selector=f"spec.driver={SECOND_DRIVER}", _preload_content=False, _request_timeout=LIST_TIMEOUT
        )
        items = json.loads(answer.data)["items"]
        return sum(len(item["spec"].get("devices") or []) for item in items)

    waits.until(
        listed,
        lambda count: count == devices,
        timeout=deadline(len(manifests)),
        what=f"{devices} devices of {SECOND_DRIVER} in {len(manifests)} slices listed",
        describe=lambda count: f"{count} devices listed",
        retry_on=(ApiException, HTTPError),
    )
    return len(manifests)


def pod_manifest(name: str, node: str) -> dict[str, Any]:
    """An unrelated pod bound to `node` (no scheduling: the bench measures the suites, not the scheduler)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench-scale-unrelated"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": POD_IMAGE}],
            "automountServiceAccountToken": False,
        },
    }


def run_unrelated_pods(api: client.ApiClient, nodes: list[str], pods: int, workers: int) -> int:
    """Create `pods` pods in namespaces of their own, round robin over `nodes`; wait until kwok runs them all.

    Returns the number of namespaces.
    """
    core = client.CoreV1Api(api)
    namespaces = [f"{POD_NAMESPACE_PREFIX}{index}" for index in range(math.ceil(pods / PODS_PER_NAMESPACE))]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="namespaces") as pool:
        list(pool.map(lambda ns: create_namespace(api, ns, RUN_ID, Timeouts().namespace_ready), namespaces))
    placed = [
        (namespaces[index // PODS_PER_NAMESPACE], pod_manifest(f"unrelated-{index}", nodes[index % len(nodes)]))
        for index in range(pods)
    ]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pods") as pool:
        list(
            pool.map(
                lambda item: bench_scheduling.drain(
                    core.create_namespaced_pod(item[0], item[1], _preload_content=False)
                ),
                placed,
            )
        )

    def running() -> int:
        return sum(
            len(
                json.loads(
                    core.list_namespaced_pod(
                        ns,
                        field_selector="status.phase=Running",
                        _preload_content=False,
                        _request_timeout=LIST_TIMEOUT,
                    ).data
                )["items"]
            )
            for ns in namespaces
        )

    waits.until(
        running,
        lambda count: count == pods,
        timeout=deadline(pods),
        what=f"{pods} unrelated pods Running (kwok's pod stage)",
        describe=lambda count: f"{count} Running",
        retry_on=(ApiException, HTTPError),
    )
    return len(namespaces)


@dataclass(frozen=True)
class Growth:
    """What the bench added to the scaled cluster, and how long it took."""

    nodes: int
    slices: int
    devices: int
    pods: int
    namespaces: int
    seconds: float


def grow(api: client.ApiClient, layout: ClusterLayout, backend_nodes: list[str], args: argparse.Namespace) -> Growth:
    """Grow the started cluster to `args.nodes` nodes, with the second driver's pools and the unrelated pods."""
    started = time.monotonic()
    added = [f"kwok-scale-{index}" for index in range(args.nodes - len(backend_nodes))]
    if added:
        register_nodes(api, added, len(backend_nodes), GROWTH_WORKERS)
    every = [*backend_nodes, *added]
    slices = publish_second_driver(api, layout, every, args.devices, GROWTH_WORKERS) if args.devices else 0
    regular = [name for name in every if name not in SET_ASIDE_NODES]
    namespaces = run_unrelated_pods(api, regular, args.pods, GROWTH_WORKERS) if args.pods else 0
    return Growth(len(every), slices, args.devices, args.pods, namespaces, time.monotonic() - started)


# --- the API server's metrics ---------------------------------------------------------------------------------------

Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]
SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str, names: Iterable[str]) -> Samples:
    """The samples of the metrics `names` (exact sample names) in Prometheus text format."""
    wanted = set(names)
    samples: Samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        if match is None or match["name"] not in wanted:
            continue
        labels = tuple(sorted(LABEL.findall(match["labels"] or "")))
        samples[(match["name"], labels)] = float(match["value"])
    return samples


def delta(before: Samples, after: Samples) -> Samples:
    """Each sample's increase (counters only grow while the API server runs)."""
    return {key: value - before.get(key, 0.0) for key, value in after.items() if value - before.get(key, 0.0) > 0}


def resource_name(labels: dict[str, str]) -> str:
    """`resource[/subresource][.group]` of a sample, e.g. `resourceslices.resource.k8s.io`, `pods/status`."""
    name = labels.get("resource") or "(non-resource)"
    if labels.get("subresource"):
        name += f"/{labels['subresource']}"
    return f"{name}.{labels['group']}" if labels.get("group") else name


def requests_by_resource(samples: Samples) -> Counter[tuple[str, str]]:
    """Requests per (resource, verb) from `apiserver_request_total` samples."""
    counts: Counter[tuple[str, str]] = Counter()
    for (name, labels), value in samples.items():
        if name == REQUESTS_METRIC:
            found = dict(labels)
            counts[(resource_name(found), found.get("verb", "?"))] += int(value)
    return counts


def list_bytes_by_resource(samples: Samples) -> dict[tuple[str, str], tuple[float, int]]:
    """Bytes and count of LIST answers per (resource, scope) from `apiserver_response_sizes` sum and count."""
    found: dict[tuple[str, str], tuple[float, int]] = {}
    for (name, labels), value in samples.items():
        if name not in (f"{SIZES_METRIC}_sum", f"{SIZES_METRIC}_count"):
            continue
        seen = dict(labels)
        if seen.get("verb") != "LIST":
            continue
        key = (resource_name(seen), seen.get("scope", "?"))
        total, count = found.get(key, (0.0, 0))
        found[key] = (total + value, count) if name.endswith("_sum") else (total, count + int(value))
    return found


def scrape(api: client.ApiClient) -> Samples:
    """The API server's request counts and response sizes now."""
    response = api.rest_client.request(
        "GET", f"{api.configuration.host}/metrics", headers={"Accept": "text/plain"}, _request_timeout=LIST_TIMEOUT
    )
    if response.status != 200:
        raise BenchError(f"the API server's /metrics answered {response.status}")
    text = response.read().decode()
    return parse_metrics(text, (REQUESTS_METRIC, f"{SIZES_METRIC}_sum", f"{SIZES_METRIC}_count"))


# --- the audit log: who listed what ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """A kind of list (or watch) call: who made it and what it asked for (its URI without paging parameters)."""

    verb: str
    resource: str
    uri: str
    namespace: str
    user: str
    user_agent: str


def normalized(uri: str) -> str:
    """`uri` without the parameters that do not change what is listed (paging, resourceVersion, watch)."""
    parts = urlsplit(uri)
    kept = [
        (key, value) for key, value in parse_qsl(parts.query, keep_blank_values=True) if key not in DROPPED_PARAMETERS
    ]
    return parts.path + (f"?{urlencode(kept)}" if kept else "")


def selection(call: Call) -> str:
    """How the call is scoped: cluster-wide, or by namespace, label, field; with the selectors."""
    query = dict(parse_qsl(urlsplit(call.uri).query))
    chosen = [f"{key}={unquote(query[key])}" for key in ("labelSelector", "fieldSelector") if query.get(key)]
    where = f"namespace {call.namespace}" if call.namespace else "cluster"
    if not chosen:
        return "cluster-wide" if not call.namespace else where
    return f"{where}, {', '.join(chosen)}"


def short_agent(user_agent: str) -> str:
    """The user agent's program and version (`kube-scheduler/v1.37.2`, `OpenAPI-Generator/37.0.2/python`)."""
    return user_agent.split(" ", 1)[0] if user_agent else "?"


@dataclass
class AuditWindow:
    """What the audit log holds about the requests received in a time window."""

    lists: Counter[Call] = field(default_factory=Counter)
    cluster_watches: Counter[Call] = field(default_factory=Counter)
    by_user: Counter[str] = field(default_factory=Counter)


def audit_logs(log_dir: Path) -> list[Path]:
    """The audit log and its rotated backups (audit-<time>.log), oldest first."""
    return [*sorted(log_dir.glob("audit-*.log")), log_dir / "audit.log"]


def audit_lines(files: Iterable[Path]) -> Iterator[str]:
    for path in files:
        if path.is_file():
            with path.open(errors="replace") as log:
                yield from log


def read_window(lines: Iterable[str], since: float, until: float) -> AuditWindow:
    """Every request received from `since` to `until` (Unix times): lists and cluster-wide watches, and per user."""
    window = AuditWindow()
    for line in lines:
        if '"ResponseComplete"' not in line and '"verb":"watch"' not in line:
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short (the log rotated or the server died mid-write) says nothing
        at = audit_log.received(event)
        if at is None or not since <= at < until:
            continue
        verb = str(event.get("verb", ""))
        stage = event.get("stage")
        user = str((event.get("user") or {}).get("username", "?"))
        if stage == "ResponseComplete":
            window.by_user[user] += 1
        reference = event.get("objectRef") or {}
        call = Call(
            verb,
            resource_name({"resource": reference.get("resource", ""), "group": reference.get("apiGroup", "")}),
            normalized(str(event.get("requestURI", ""))),
            str(reference.get("namespace", "")),
            user,
            short_agent(str(event.get("userAgent", ""))),
        )
        if verb == "list" and stage == "ResponseComplete":
            window.lists[call] += 1
        elif verb == "watch" and stage == "ResponseStarted" and not call.namespace and "Selector" not in call.uri:
            window.cluster_watches[call] += 1
    return window


def namespaces_now(api: client.ApiClient) -> set[str]:
    """The names of the namespaces that exist now."""
    return {item.metadata.name for item in client.CoreV1Api(api).list_namespace(_request_timeout=LIST_TIMEOUT).items}


def replayed_lists(window: AuditWindow, existing: set[str]) -> list[str]:
    """The list URIs worth replaying: cluster-scoped ones, and those in namespaces that outlived the run.

    The suites' own namespaces are gone once the run ends, and a list in one of them reads only what the test made.
    A namespace that is still there (the cluster's own, or the unrelated workloads of a large cluster) was not the
    run's: a check listing in it reads what grows with the cluster.
    """
    return sorted({call.uri for call in window.lists if not call.namespace or call.namespace in existing})


def replay_sizes(api: client.ApiClient, uris: Iterable[str]) -> dict[str, int]:
    """The JSON size of each list `uri` answered now (the admin identity); -status for an answer other than 200."""
    sizes: dict[str, int] = {}
    for uri in uris:
        response = api.rest_client.request(
            "GET",
            f"{api.configuration.host}{uri}",
            headers={"Accept": "application/json"},
            _request_timeout=LIST_TIMEOUT,
        )
        sizes[uri] = len(response.read()) if response.status == 200 else -int(response.status)
    return sizes


# --- one run of the suites ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SuiteRun:
    """One run of the suites: its wall time, outcome, per-test durations and the CPU it and the cluster spent."""

    wall: float
    summary: str
    returncode: int
    durations: dict[str, float]
    outcomes: dict[str, str]
    started: float
    ended: float
    suite_cpu: float
    component_cpu: dict[str, float]
    # Each test's time by phase and its waits (`--profile-phases`, the first run on each cluster), else empty.
    phases: list[phases_report.TestTime] = field(default_factory=list)


def cpu_seconds(pid: str) -> float | None:
    """User + system CPU seconds of process `pid` since it started, from /proc; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # from field 3 (state) on; utime, stime are fields 14, 15
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def component_cpu(details: dict[str, str]) -> dict[str, float]:
    """CPU seconds so far of the cluster's processes: each control plane one, the metrics adapter, the drivers.

    The drivers are those the backend started (their sum); a private driver a check starts comes and goes with it.
    """
    found: dict[str, float] = {}
    for key, pid in details.items():
        name = key.removeprefix("pid.")
        if not key.startswith("pid.") or name == "supervisor":
            continue
        seconds = cpu_seconds(pid)
        if seconds is None:
            continue
        group = DRIVERS if name.startswith(drivers.process_name("")) else name
        found[group] = found.get(group, 0.0) + seconds
    return found


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_suites(
    state_dir: Path,
    scratch: Path,
    label: str,
    args: argparse.Namespace,
    details: dict[str, str],
    *,
    profile: bool = False,
) -> SuiteRun:
    """Run the suites as `dra-conformance run` does, on the running cluster of `state_dir`; time and measure it.

    With `profile`, the run also records where each test's time went (`--dra-phases-file`).
    """
    junit, output = scratch / f"{label}.xml", scratch / f"{label}.out"
    phases = scratch / f"{label}-phases.jsonl"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--dra-cluster=local",
        f"--dra-nodes={SuiteConfig.nodes}",
        f"--dra-state-dir={state_dir}",
        f"--dra-reports-dir={scratch / f'reports-{label}'}",
        "--rootdir",
        str(paths.CHECKOUT),
        "-n",
        str(args.workers),
        *SUITE_PYTEST_OPTIONS,
        "-p",
        "no:cacheprovider",
        "-q",
        f"--junitxml={junit}",
        *([f"--dra-phases-file={phases}"] if profile else []),
        *args.suites,
    ]
    cpu_before, components_before = children_cpu(), component_cpu(details)
    started_wall, started = time.time(), time.monotonic()
    with output.open("w") as out:
        result = subprocess.run(
            command, cwd=paths.CHECKOUT, stdout=out, stderr=subprocess.STDOUT, timeout=SUITE_DEADLINE, check=False
        )
    wall, ended_wall = time.monotonic() - started, time.time()
    suite_cpu, components_after = children_cpu() - cpu_before, component_cpu(details)
    durations, outcomes = junit_results(junit)
    return SuiteRun(
        wall,
        last_line(output),
        result.returncode,
        durations,
        outcomes,
        started_wall,
        ended_wall,
        suite_cpu,
        {
            name: components_after[name] - components_before[name]
            for name in components_after
            if name in components_before
        },
        phases_report.read(phases) if profile and phases.is_file() else [],
    )


def junit_results(path: Path) -> tuple[dict[str, float], dict[str, str]]:
    """Each test's duration and outcome (passed, failed, error, skipped) from a JUnit file."""
    durations: dict[str, float] = {}
    outcomes: dict[str, str] = {}
    if not path.is_file():
        return durations, outcomes
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        nodeid = f"{case.get('classname', '')}::{case.get('name', '')}"
        durations[nodeid] = float(case.get("time", "0"))
        outcome = "passed"
        for kind in ("failure", "error", "skipped"):
            if case.find(kind) is not None:
                outcome = {"failure": "failed"}.get(kind, kind)
        outcomes[nodeid] = outcome
    return durations, outcomes


def last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()] if path.is_file() else []
    return lines[-1].strip("= ") if lines else "(no output)"


# --- one cluster size -----------------------------------------------------------------------------------------------


@dataclass
class Measured:
    """What one cluster size measured."""

    label: str
    nodes: int
    run: SuiteRun
    requests: Counter[tuple[str, str]]
    list_bytes: dict[tuple[str, str], tuple[float, int]]
    audit: AuditWindow
    sizes: dict[str, int]
    growth: Growth | None = None
    start_seconds: float = 0.0
    # Wall seconds of every run on this cluster (`run` is the first, which the request and list figures cover).
    walls: list[float] = field(default_factory=list)

    @property
    def wall(self) -> float:
        """The median wall time of the runs on this cluster."""
        return statistics.median(self.walls or [self.run.wall])


def measure(label: str, args: argparse.Namespace, scratch: Path, scaled: bool) -> Measured:
    """Start a cluster, grow it when `scaled`, run the suites on it, measure; stop it whatever happens."""
    state_dir = scratch / f"cluster-{label}"
    backend = LocalBackend(LocalClusterConfig(state_dir=state_dir, owner_pid=os.getpid()))
    try:
        started = time.monotonic()
        info = backend.start()
        start_seconds = time.monotonic() - started
        backend_nodes = [*info.nodes, *info.set_aside_nodes]
        with bench_scheduling.api_client(info.kubeconfig, GROWTH_WORKERS) as api:
            growth = grow(api, backend.layout, backend_nodes, args) if scaled else None
            if growth is not None:
                print(
                    f"{label}: grown to {growth.nodes} nodes, {growth.devices} devices of {SECOND_DRIVER} in "
                    f"{growth.slices} slices, {growth.pods} unrelated pods Running in {growth.namespaces} namespaces, "
                    f"in {growth.seconds:.1f} s",
                    flush=True,
                )
            before = scrape(api)
            run = run_suites(state_dir.resolve(), scratch, label, args, info.details, profile=args.profile_phases)
            after = scrape(api)
            print(f"{label}: suites ran in {run.wall:.1f} s ({run.summary})", flush=True)
            window = read_window(audit_lines(audit_logs(backend.layout.logs)), run.started, run.ended)
            sizes = replay_sizes(api, replayed_lists(window, namespaces_now(api)))
            walls = [run.wall]
            for index in range(2, args.runs + 1):  # the same cluster again: only the wall time is kept
                again = run_suites(state_dir.resolve(), scratch, f"{label}-{index}", args, info.details)
                print(f"{label}: suites ran again in {again.wall:.1f} s ({again.summary})", flush=True)
                walls.append(again.wall)
        changed = delta(before, after)
        return Measured(
            label,
            len(backend_nodes) if growth is None else growth.nodes,
            run,
            requests_by_resource(changed),
            list_bytes_by_resource(changed),
            window,
            sizes,
            growth,
            start_seconds,
            walls,
        )
    finally:
        backend.stop()


# --- the report -----------------------------------------------------------------------------------------------------


def human(size: float) -> str:
    """Bytes as B, KiB or MiB."""
    if size < 1024:
        return f"{size:.0f} B"
    if size < 1024**2:
        return f"{size / 1024:.1f} KiB"
    return f"{size / 1024**2:.2f} MiB"


def ratio(new: float, old: float) -> str:
    return f"{new / old:.2f}x" if old else ("=" if not new else "new")


def report_times(base: Measured, scaled: Measured, workers: int) -> float:
    """Wall times, the ratio and the target, CPU, changed outcomes, the tests that grew; return the ratio."""
    value = scaled.wall / base.wall
    print(f"\nwall time of the default suites (pytest start to exit, -n {workers}, as dra-conformance run):")
    for measured in (base, scaled):
        run = measured.run
        each = f"; median of {len(measured.walls)}: {', '.join(f'{w:.1f}' for w in measured.walls)}"
        print(
            f"  {measured.nodes:>5} nodes: {measured.wall:7.1f} s  ({run.summary}; exit {run.returncode}"
            f"{each if len(measured.walls) > 1 else ''})"
        )
    verdict = "PASS" if value <= TARGET_RATIO else "FAIL"
    print(f"  ratio {scaled.nodes} / {base.nodes} nodes: {value:.2f}x   target <= {TARGET_RATIO}x: {verdict}")
    print("CPU seconds during each run (the suites: pytest and its workers; the cluster's processes from /proc):")
    rows = [{"suites": m.run.suite_cpu, **m.run.component_cpu} for m in (base, scaled)]
    for name in ("suites", *PROCESSES):
        old, new = rows[0].get(name, 0.0), rows[1].get(name, 0.0)
        print(f"  {name:<24} {old:8.1f} s -> {new:8.1f} s  ({ratio(new, old)})")
    for name, outcome in sorted(scaled.run.outcomes.items()):
        before = base.run.outcomes.get(name)
        if before is not None and before != outcome:
            print(f"  outcome changed: {name}: {before} -> {outcome}")
    common = [name for name in scaled.run.durations if name in base.run.durations]
    grown = sorted(common, key=lambda n: scaled.run.durations[n] - base.run.durations[n], reverse=True)
    print(f"tests whose duration grew most ({base.nodes} -> {scaled.nodes} nodes):")
    for name in grown[:TOP_GROWN_TESTS]:
        old, new = base.run.durations[name], scaled.run.durations[name]
        print(f"  {new - old:+7.2f} s  {old:6.2f} -> {new:6.2f} s  {name}")
    if scaled.run.phases:
        report_grown_waits(base, scaled, grown[:TOP_WAITED_TESTS])
    return value


def junit_key(nodeid: str) -> str:
    """A pytest node id as `junit_results` names it: "a/b.py::C::t" -> "a.b.C::t"."""
    path, *rest = nodeid.split("::")
    return "::".join([".".join([path.removesuffix(".py").replace("/", "."), *rest[:-1]]), *rest[-1:]])


def report_grown_waits(base: Measured, scaled: Measured, names: list[str]) -> None:
    """The waits of the tests that grew most, the scaled run's beside the baseline's (paired in the order waited)."""
    waits_of = [{junit_key(t.nodeid): t.wait_list for t in m.run.phases} for m in (base, scaled)]
    print(f"their waits ({base.nodes} -> {scaled.nodes} nodes, in the order waited, {WAIT_FLOOR} s or longer):")
    for name in names:
        old_waits, new_waits = waits_of[0].get(name, []), waits_of[1].get(name, [])
        print(f"  {name}")
        if not new_waits:
            print("    (no waits recorded)")
        for index, wait in enumerate(new_waits):
            new = float(wait["seconds"])
            old = float(old_waits[index]["seconds"]) if index < len(old_waits) else None
            if max(new, old or 0.0) >= WAIT_FLOOR:
                print(f"    {'     -' if old is None else f'{old:6.2f}'} -> {new:6.2f} s  {wait['what']}")


def report_requests(base: Measured, scaled: Measured) -> None:
    """Requests per resource and verb, and LIST bytes per resource and scope, side by side."""
    print(
        f"\nAPI server requests during the run per resource and verb (apiserver_request_total delta), "
        f"{base.nodes} -> {scaled.nodes} nodes:"
    )
    keys = sorted(set(base.requests) | set(scaled.requests), key=lambda k: -max(scaled.requests[k], base.requests[k]))
    for key in keys[:TOP_REQUESTS]:
        old, new = base.requests[key], scaled.requests[key]
        print(f"  {key[1]:<7} {key[0]:<44} {old:>7} -> {new:>7}  ({ratio(new, old)})")
    if len(keys) > TOP_REQUESTS:
        rest_old = sum(base.requests[k] for k in keys[TOP_REQUESTS:])
        rest_new = sum(scaled.requests[k] for k in keys[TOP_REQUESTS:])
        print(f"  {'':<7} {f'({len(keys) - TOP_REQUESTS} more)':<44} {rest_old:>7} -> {rest_new:>7}")
    old_total, new_total = sum(base.requests.values()), sum(scaled.requests.values())
    print(f"  {'all':<7} {'':<44} {old_total:>7} -> {new_total:>7}  ({ratio(new_total, old_total)})")
    print("bytes of LIST answers during the run per resource and scope (apiserver_response_sizes sum delta):")
    keys_b = sorted(
        set(base.list_bytes) | set(scaled.list_bytes),
        key=lambda k: -max(scaled.list_bytes.get(k, (0.0, 0))[0], base.list_bytes.get(k, (0.0, 0))[0]),
    )
    for key in keys_b[:TOP_REQUESTS]:
        old_bytes, old_count = base.list_bytes.get(key, (0.0, 0))
        new_bytes, new_count = scaled.list_bytes.get(key, (0.0, 0))
        print(
            f"  {key[0]:<40} {key[1]:<9} {human(old_bytes):>10} in {old_count:>4} -> {human(new_bytes):>10} in "
            f"{new_count:>4}  ({ratio(new_bytes, old_bytes)})"
        )
    old_sum = sum(v[0] for v in base.list_bytes.values())
    new_sum = sum(v[0] for v in scaled.list_bytes.values())
    print(f"  {'all':<40} {'':<9} {human(old_sum):>10} -> {human(new_sum):>10}  ({ratio(new_sum, old_sum)})")


def report_calls(scaled: Measured) -> int:
    """The largest list calls of the scaled run, with who made them; return the largest size."""
    window = scaled.audit
    measured = [
        (scaled.sizes.get(call.uri, 0), count, call)
        for call, count in window.lists.items()
        if not call.namespace or call.uri in scaled.sizes
    ]
    measured.sort(key=lambda row: (row[0], row[1]), reverse=True)
    print(
        f"\nlargest list calls during the {scaled.nodes}-node run, cluster-wide or in a namespace that outlived it, "
        "by response size (JSON bytes of the URI replayed after the run; caller from the audit log):"
    )
    print(f"  {'size':>10} {'calls':>5}  {'verb':<4} {'resource':<36} {'caller':<64} scope")
    for size, count, call in measured[:TOP_LIST_CALLS]:
        shown = human(size) if size >= 0 else f"HTTP {-size}"
        print(
            f"  {shown:>10} {count:>5}  {call.verb:<4} {call.resource:<36} "
            f"{f'{call.user} ({call.user_agent})':<64} {selection(call)}"
        )
    own = sum(count for call, count in window.lists.items() if call.namespace and call.uri not in scaled.sizes)
    print(f"  + {own} list calls in the run's own namespaces (gone after it; their bytes are in the table above)")
    if window.cluster_watches:
        print("cluster-wide watches (no namespace, no selector) opened during the run:")
        for call, count in window.cluster_watches.most_common(TOP_LIST_CALLS):
            print(f"  {count:>5}  {call.resource:<36} {call.user} ({call.user_agent})  {call.uri}")
    print("requests during the run per caller (audit log):")
    for user, count in window.by_user.most_common(TOP_LIST_CALLS):
        print(f"  {count:>7}  {user}")
    return max((size for size, _, _ in measured), default=0)


def figures(base: Measured, scaled: Measured, value: float, largest: int) -> list[Figure]:
    """The record of the printed figures (`--json`)."""
    found = [
        lower("wall_baseline_s", base.wall, "s"),
        lower("wall_scaled_s", scaled.wall, "s"),
        lower("scaled_over_baseline", value, "x"),
        lower("suite_cpu_baseline_s", base.run.suite_cpu, "s"),
        lower("suite_cpu_scaled_s", scaled.run.suite_cpu, "s"),
        lower("requests_baseline", sum(base.requests.values()), "requests"),
        lower("requests_scaled", sum(scaled.requests.values()), "requests"),
        lower("list_bytes_baseline", sum(v[0] for v in base.list_bytes.values()), "B"),
        lower("list_bytes_scaled", sum(v[0] for v in scaled.list_bytes.values()), "B"),
        lower("largest_list_call_bytes", largest, "B"),
    ]
    if scaled.growth is not None:
        found.append(lower("growth_s", scaled.growth.seconds, "s"))
    return found


def interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up like Ctrl-C: the clusters stopped, their directories removed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=1000, help="nodes of the scaled cluster in all (default 1000)")
    parser.add_argument("--devices", type=int, default=10000, help="devices of the second driver (default 10000)")
    parser.add_argument("--pods", type=int, default=2000, help="unrelated pods (default 2000)")
    parser.add_argument(
        "-n", "--workers", type=int, default=default_workers(available_cpus()), help="pytest-xdist workers (as run's)"
    )
    parser.add_argument(
        "--runs", type=int, default=1, help="runs of the suites on each cluster; the ratio is of medians (default 1)"
    )
    parser.add_argument(
        "--suites", nargs="+", default=[str(paths.suites_dir())], help="what pytest runs (default: every suite)"
    )
    parser.add_argument(
        "--profile-phases",
        action="store_true",
        help="record where each test's time went (the first run on each cluster) and print the waits of the tests "
        "that grew most",
    )
    bench_record.add_option(parser)
    args = parser.parse_args()
    smallest = SuiteConfig.nodes + len(SET_ASIDE_NODES)
    if args.nodes < smallest or args.devices < 0 or args.pods < 0 or args.workers < 1 or args.runs < 1:
        parser.error(f"need --nodes >= {smallest} (the default cluster's), --devices, --pods >= 0, -n, --runs >= 1")
    signal.signal(signal.SIGTERM, interrupt)
    print(f"machine: {bench_scheduling.machine()}", flush=True)
    try:
        with tempfile.TemporaryDirectory(prefix="dra-bench-scale-") as scratch_name:
            scratch = Path(scratch_name)
            base = measure("baseline", args, scratch, scaled=False)
            scaled = measure("scaled", args, scratch, scaled=True)
    except KeyboardInterrupt:
        sys.exit("bench/scale: interrupted; clusters stopped, temporary directory removed")
    except (BenchError, ConformanceError, ApiException, HTTPError, subprocess.TimeoutExpired) as error:
        sys.exit(f"bench/scale: {type(error).__name__}: {' '.join(str(error).split())}")
    value = report_times(base, scaled, args.workers)
    report_requests(base, scaled)
    largest = report_calls(scaled)
    bench_record.save(args.json, "scale", figures(base, scaled, value, largest))


if __name__ == "__main__":
    main()
