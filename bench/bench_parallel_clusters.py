#!/usr/bin/env python3
"""Benchmark: N `dra-conformance cluster up` started at the same moment, each on its own state directory.

What a platform team's CI does when matrix jobs share one host. It checks that every cluster comes up, that no two
got the same loopback port (ports.py reserves each one machine-wide), and that `cluster down` leaves no process
behind; and it measures what N clusters cost (start-up time, resident memory, the lowest MemAvailable seen).

    python bench/parallel_clusters [--clusters 20] [--nodes 2] [--startup-deadline 300] [--workdir DIR] [--json [PATH]]

The start-up deadlines (etcd, API server, driver readiness) are passed to every `cluster up` as
`--dra-timeout-<name>`: their defaults are sized for one or two clusters per host, while N clusters starting on a
few cores share the CPU N ways; a machine that is merely slow is then told apart from one where a cluster hangs.

Every port of every cluster is listed, from its state directory: the control plane's (plan.json details), the
metrics adapter's (its process in extra-processes.json) and the API server's (the kubeconfig's server URL). The exit
code is 0 only when all N came up with distinct ports and nothing was left running after `cluster down`.

Not a test of the default run: it takes minutes and most of a small machine's memory, and its answer (how many
clusters fit) depends on the machine; the reservation's race-freedom itself is unit-tested
(tests/unit/test_listener_ports.py, threads and processes).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import bench_record
import yaml
from bench_record import Figure, higher, lower

# How often MemAvailable is sampled while the clusters start (a measurement, not a synchronization).
MEMORY_SAMPLE_INTERVAL = 1.0
# `cluster up` of N clusters at once on a small shared machine: minutes; past this one counts as hung.
UP_TIMEOUT = 1800.0
# `cluster down` waits for the supervisor (3 x process_stop at most) and the real node's teardown.
DOWN_TIMEOUT = 120.0
# Start-up deadlines lengthened for N clusters sharing a host's cores (see the docstring); each is printed.
STARTUP_DEADLINES = ("etcd_ready", "apiserver_ready", "driver_ready")
# Lines of a failed `cluster up` quoted.
OUTPUT_TAIL = 5


@dataclass
class Cluster:
    """One cluster of the benchmark and what was seen of it."""

    index: int
    state_dir: Path
    process: subprocess.Popen[str] | None = None
    started: float = 0.0
    seconds: float = 0.0
    code: int | None = None
    output: str = ""
    ports: dict[str, int] = field(default_factory=dict)


def cli() -> list[str]:
    """The `dra-conformance` command of the Python running this script."""
    found = Path(sys.executable).with_name("dra-conformance")
    return [str(found)] if found.exists() else [sys.executable, "-m", "dra_conformance.cli"]


def mem_available_kib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def ports_of(state_dir: Path) -> dict[str, int]:
    """Every loopback port the cluster in `state_dir` listens on, by listener."""
    plan = json.loads((state_dir / "plan.json").read_text())
    found = {key[5:]: int(value) for key, value in plan["details"].items() if key.startswith("port.")}
    extra = state_dir / "extra-processes.json"
    for spec in json.loads(extra.read_text()) if extra.exists() else []:
        for arg in spec["argv"]:
            if arg.startswith(("--port=", "--secure-port=")):
                found[spec["name"]] = int(arg.split("=", 1)[1])
    server = yaml.safe_load((state_dir / "kubeconfig").read_text())["clusters"][0]["cluster"]["server"]
    found["kubeconfig-server"] = int(server.rsplit(":", 1)[1])
    return found


def resident_kib(state_dir: Path) -> int:
    """Resident memory of the cluster's supervisor and every process it runs."""
    state = json.loads((state_dir / "state.json").read_text())
    total = 0
    for pid in [state["supervisor_pid"], *state.get("processes", {}).values()]:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total


def leftovers(workdir: Path) -> list[str]:
    """Processes whose command line names the benchmark's directory (pgrep -af)."""
    found = subprocess.run(["pgrep", "-af", str(workdir)], capture_output=True, text=True, check=False)
    return [line for line in found.stdout.splitlines() if "parallel_clusters" not in line and "pgrep" not in line]


def figures(clusters: list[Cluster], shared: int, in_use: int, left: int, resident: int, lowest: int) -> list[Figure]:
    """The record of the printed figures (`--json`); memory in KiB as read from /proc, recorded in GiB."""
    up = [c for c in clusters if c.code == 0]
    times = sorted(c.seconds for c in up)
    found = [
        higher("clusters_up", len(up), "count"),
        lower("clusters_failed", len(clusters) - len(up), "count"),
        lower("ports_shared", shared, "count"),
        lower("address_in_use_clusters", in_use, "count"),
        lower("left_running", left, "count"),
        lower("resident_gib", resident / 1024**2, "GiB"),
        higher("mem_available_lowest_gib", lowest / 1024**2, "GiB"),
    ]
    if times:
        found += [
            lower("startup_first_s", times[0], "s"),
            lower("startup_median_s", times[len(times) // 2], "s"),
            lower("startup_last_s", times[-1], "s"),
        ]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--workdir", type=Path, help="where the state directories go (default: a temporary one)")
    parser.add_argument(
        "--startup-deadline",
        type=float,
        default=300.0,
        help="seconds for each of etcd, API server and driver readiness per cluster (default 300)",
    )
    bench_record.add_option(parser)
    args = parser.parse_args()
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="dra-parallel-"))).resolve()
    clusters = [Cluster(index, workdir / f"cluster-{index:02d}") for index in range(args.clusters)]
    lowest = [mem_available_kib()]
    before = lowest[0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(MEMORY_SAMPLE_INTERVAL):
            lowest.append(mem_available_kib())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    deadlines = [f"--dra-timeout-{name.replace('_', '-')}={args.startup_deadline:g}" for name in STARTUP_DEADLINES]
    print(f"starting {args.clusters} clusters at once under {workdir}; deadlines: {' '.join(deadlines)}", flush=True)
    for cluster in clusters:
        cluster.started = time.monotonic()
        cluster.process = subprocess.Popen(
            [*cli(), "cluster", "up", f"--state-dir={cluster.state_dir}", f"--nodes={args.nodes}", *deadlines],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def finish(cluster: Cluster) -> None:
        assert cluster.process is not None
        cluster.output, _ = cluster.process.communicate(timeout=UP_TIMEOUT)
        cluster.code = cluster.process.returncode
        cluster.seconds = time.monotonic() - cluster.started

    try:
        # One waiter per cluster, so each one's start-up time is taken when it returns.
        with ThreadPoolExecutor(len(clusters)) as waiters:
            list(waiters.map(finish, clusters))
        # Every cluster that came up is measured while all of them run.
        up = [c for c in clusters if c.code == 0]
        for cluster in up:
            cluster.ports = ports_of(cluster.state_dir)
        resident = sum(resident_kib(c.state_dir) for c in up)
    finally:
        done.set()
        print("stopping every cluster (cluster down)", flush=True)
        for cluster in clusters:
            if cluster.process is not None and cluster.process.poll() is None:
                cluster.process.kill()
            subprocess.run(
                [*cli(), "cluster", "down", f"--state-dir={cluster.state_dir}"],
                capture_output=True,
                timeout=DOWN_TIMEOUT,
                check=False,
            )
    left = leftovers(workdir)

    for cluster in clusters:
        if cluster.code == 0:
            listing = " ".join(f"{name}={port}" for name, port in sorted(cluster.ports.items()))
            print(f"cluster-{cluster.index:02d} up in {cluster.seconds:6.1f} s: {listing}")
        else:
            tail = " | ".join(cluster.output.strip().splitlines()[-OUTPUT_TAIL:])
            print(f"cluster-{cluster.index:02d} FAILED (exit {cluster.code}) after {cluster.seconds:.1f} s: {tail}")
    up = [c for c in clusters if c.code == 0]
    # A cluster's own API server port appears twice (plan and kubeconfig): count each listener once per cluster.
    owners = Counter(port for c in up for port in set(c.ports.values()))
    shared = {port: [c.index for c in up if port in c.ports.values()] for port, n in owners.items() if n > 1}
    in_use_errors = [c.index for c in clusters if "address already in use" in c.output]
    times = sorted(c.seconds for c in up)
    print(f"up: {len(up)}/{len(clusters)}; ports listed: {sum(len(set(c.ports.values())) for c in up)}")
    print(f"ports held by more than one cluster: {shared or 'none'}")
    print(f"clusters that saw 'address already in use': {in_use_errors or 'none'}")
    if times:
        print(f"start-up seconds: first {times[0]:.1f}, median {times[len(times) // 2]:.1f}, last {times[-1]:.1f}")
    print(
        f"memory: {resident / 1024**2:.1f} GiB resident in the {len(up)} clusters; MemAvailable {before / 1024**2:.1f}"
        f" GiB before, lowest {min(lowest) / 1024**2:.1f} GiB while starting"
    )
    print(f"left running after cluster down: {left or 'nothing'}")
    found = figures(clusters, len(shared), len(in_use_errors), len(left), resident, min(lowest))
    bench_record.save(args.json, "parallel_clusters", found)
    if args.workdir is None and not left:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if len(up) == len(clusters) and not shared and not in_use_errors and not left else 1


if __name__ == "__main__":
    sys.exit(main())
