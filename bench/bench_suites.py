#!/usr/bin/env python3
"""Benchmark: wall time of the scenario suites (allocation + status) with -n 1 and -n 2, and their API floor.

Prints the median per-test duration (setup + call + teardown, from JUnit) and the total wall time of each run,
and the speed-up of -n 2 over -n 1. The local cluster is started once beforehand (in a temporary state directory
of its own, stopped at the end) and shared by every run, so its start-up is not part of any figure
(bench/cluster_up measures that).

The API floor is what a test of the allocation suite costs without the suite: with the `kubernetes` client alone,
--floor-runs times, a namespace (awaited until its default ServiceAccount exists, as the suite's fixture does), a
DeviceClass of the reference driver, a ResourceClaim and a pod pinned to a node of that driver; once the pod is
bound and the claim allocated (what the allocation test waits for), the objects are deleted newest first, each
awaited until gone, and the namespace's deletion is requested (as the suite's teardown does; the suite awaits its
namespaces once per session, so the floor awaits them once after the last cycle). The per-test overhead is the
suite's median per test that ran at -n 1 minus the floor's median per cycle.

    python bench/suites [--suites suites/allocation suites/status] [--runs 1] [--floor-runs 10] [--json [PATH]]
                        [--profile-phases]

`--profile-phases` records the -n 2 run with `--dra-phases-file` and prints where its time went
(bench/phases_report.py): setup, API work, waits (by deadline) and teardown, the longest tests and the ten largest
waits with what each waited for. `--suites suites` profiles the whole default run.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from types import FrameType
from typing import Any

import bench_record
import phases_report
from bench_record import Figure, higher, lower
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from dra_conformance import paths
from dra_conformance.backends.local.backend import LocalBackend, LocalClusterConfig
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API, Builder
from dra_conformance.kube.client import client_from_kubeconfig
from dra_conformance.kube.namespaces import NamespaceReaper, create_namespace
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.model.stats import percentile
from dra_conformance.timeouts import Timeouts

# The floor waits as long as a test would for the same step, so it fails where a test would (each deadline's reason
# is in dra_conformance/timeouts.py): the default ServiceAccount comes from a controller with a resync of seconds;
# the scheduler allocates and binds within a few backoffs of at most 10 s; deletions wait for finalizers.
NAMESPACE_READY_DEADLINE = Timeouts().namespace_ready
ALLOCATED_DEADLINE = Timeouts().pod_scheduled
DELETE_DEADLINE = Timeouts().delete
FLOOR_RUN_ID = "bench-suites-floor"


def run(
    workers: int, suites: list[str], junit: Path, state_dir: Path, phases: Path | None = None
) -> tuple[float, list[float], list[float], str]:
    """Run the suites once; return the wall time, every test's duration, those of the tests that ran, the summary.

    With `phases`, the run writes its per-phase record there (`--dra-phases-file`).
    """
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            str(workers),
            f"--dra-state-dir={state_dir}",
            f"--junitxml={junit}",
            *([f"--dra-phases-file={phases}"] if phases else []),
            *suites,
        ],
        cwd=paths.CHECKOUT,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - started
    cases = list(ElementTree.parse(junit).getroot().iter("testcase"))
    durations = [float(case.get("time", "0")) for case in cases]
    ran = [float(case.get("time", "0")) for case in cases if case.find("skipped") is None]
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr[-500:]
    return wall, durations, ran, summary


def floor_cycle(
    api: client.ApiClient, dynamic: DynamicClient, reaper: NamespaceReaper, driver: str, node: str, index: int
) -> float:
    """One floor cycle (see the module docstring); return its duration in seconds."""
    namespace = f"bench-floor-{index}-{secrets.token_hex(3)}"
    tracker = ResourceTracker(dynamic, delete_timeout=DELETE_DEADLINE)
    started = time.monotonic()
    try:
        create_namespace(api, namespace, FLOOR_RUN_ID, NAMESPACE_READY_DEADLINE)
        build = Builder(namespace=namespace, driver=driver)
        device_class = tracker.create(build.device_class())["metadata"]["name"]
        claim = tracker.create(build.claim(device_class))["metadata"]["name"]
        pod = tracker.create(build.pod(claim=claim, node=node))["metadata"]["name"]

        def observe() -> tuple[dict[str, Any], dict[str, Any]]:
            return (
                tracker.get("v1", "Pod", pod, namespace),
                tracker.get(RESOURCE_API, "ResourceClaim", claim, namespace),
            )

        waits.until(
            observe,
            lambda seen: bool(seen[0]["spec"].get("nodeName") and (seen[1].get("status") or {}).get("allocation")),
            timeout=ALLOCATED_DEADLINE,
            what=f"pod {namespace}/{pod} bound and claim {claim} allocated",
            describe=lambda seen: f"nodeName={seen[0]['spec'].get('nodeName')} claim status={seen[1].get('status')}",
        )
    finally:
        try:
            tracker.cleanup()
        finally:
            reaper.delete(namespace)
    return time.monotonic() - started


def api_floor(info: ClusterInfo, runs: int, scratch: Path) -> tuple[list[float], float, str]:
    """Run `runs` floor cycles; return their durations, how long the namespaces took to go afterwards, the node."""
    endpoint = next(e for e in info.drivers if e.node in info.nodes)
    with client_from_kubeconfig(info.kubeconfig) as api:
        dynamic = DynamicClient(api, cache_file=str(scratch / "discovery.json"))
        reaper = NamespaceReaper(client.CoreV1Api(api), DELETE_DEADLINE)
        cycles: list[float] = []
        try:
            for index in range(runs):
                cycles.append(floor_cycle(api, dynamic, reaper, endpoint.driver, endpoint.node, index))
        finally:
            started = time.monotonic()
            reaper.wait_all()
    return cycles, time.monotonic() - started, endpoint.node


def figures(
    cycles: list[float], namespaces_gone: float, walls: dict[int, list[float]], ran_one: list[float]
) -> list[Figure]:
    """The record of the printed figures (`--json`): the floor, the wall times, the speed-up and the overhead."""
    one, two = statistics.median(walls[1]), statistics.median(walls[2])
    suite, floor = statistics.median(ran_one), statistics.median(cycles)
    return [
        lower("floor_median_s", floor, "s"),
        lower("floor_p95_s", percentile(cycles, 0.95), "s"),
        lower("floor_namespaces_gone_s", namespaces_gone, "s"),
        lower("wall_n1_s", one, "s"),
        lower("wall_n2_s", two, "s"),
        higher("speedup_n2", one / two, "x"),
        lower("test_median_n1_s", suite, "s"),
        lower("overhead_per_test_s", suite - floor, "s"),
        lower("suite_over_floor", suite / floor, "x"),
    ]


def interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up like Ctrl-C: the cluster stopped, its directory removed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--suites", nargs="+", default=["suites/allocation", "suites/status"])
    parser.add_argument("--runs", type=int, default=1, help="repetitions per worker count (medians are reported)")
    parser.add_argument("--floor-runs", type=int, default=10, help="API floor cycles (default 10)")
    parser.add_argument(
        "--profile-phases",
        action="store_true",
        help="break the -n 2 run into setup, API work, waits (by deadline) and teardown per test, and print the "
        "ten largest waits with what they waited for",
    )
    bench_record.add_option(parser)
    args = parser.parse_args()
    if args.runs < 1 or args.floor_runs < 1:
        parser.error("--runs and --floor-runs must be at least 1")
    signal.signal(signal.SIGTERM, interrupt)
    walls: dict[int, list[float]] = {}
    ran_one: list[float] = []
    with tempfile.TemporaryDirectory(prefix="dra-bench-suites-") as scratch_name:
        scratch = Path(scratch_name)
        state_dir = scratch / "cluster"
        backend = LocalBackend(LocalClusterConfig(state_dir=state_dir, owner_pid=os.getpid()))
        try:
            info = backend.start()
            cycles, namespaces_gone, node = api_floor(info, args.floor_runs, scratch)
            print(
                f"API floor: {len(cycles)} cycles (namespace, DeviceClass, claim, pod on {node}; until allocated and "
                f"bound; deleted), median {statistics.median(cycles):.2f} s, p95 {percentile(cycles, 0.95):.2f} s "
                f"(nearest rank), max {max(cycles):.2f} s; namespaces gone {namespaces_gone:.1f} s after the last",
                flush=True,
            )
            for workers in (1, 2):
                for attempt in range(args.runs):
                    junit = scratch / f"n{workers}-{attempt}.xml"
                    phases = scratch / "phases-n2.jsonl" if args.profile_phases and workers == 2 else None
                    wall, durations, ran, summary = run(workers, args.suites, junit, state_dir, phases)
                    walls.setdefault(workers, []).append(wall)
                    if workers == 1:
                        ran_one += ran
                    print(
                        f"-n {workers}: {len(durations)} tests, median per test {statistics.median(durations):.2f} s, "
                        f"max {max(durations):.2f} s, total wall {wall:.1f} s  ({summary})",
                        flush=True,
                    )
            if args.profile_phases:
                print("\n".join(phases_report.render(phases_report.read(scratch / "phases-n2.jsonl"))), flush=True)
        finally:
            backend.stop()
    one, two = statistics.median(walls[1]), statistics.median(walls[2])
    print(f"speed-up -n 2 over -n 1: {one / two:.2f}x ({one:.1f} s -> {two:.1f} s) on this machine's cores")
    suite, floor = statistics.median(ran_one), statistics.median(cycles)
    print(
        f"per-test overhead over the API floor (-n 1, {len(ran_one)} tests that ran, skipped ones left out): "
        f"suite median {suite:.2f} s - floor median {floor:.2f} s = {suite - floor:.2f} s; "
        f"suite/floor {suite / floor:.2f}x"
    )
    bench_record.save(args.json, "suites", figures(cycles, namespaces_gone, walls, ran_one))


if __name__ == "__main__":
    main()
