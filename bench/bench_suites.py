#!/usr/bin/env python3
"""Benchmark: wall time of the scenario suites (allocation + status) with -n 1 and -n 2.

Prints the median per-test duration (setup + call + teardown, from JUnit) and the total wall time of each run,
and the speed-up of -n 2 over -n 1. The local cluster is started once beforehand and shared by both runs, so
its start-up is not part of either figure (bench/cluster_up measures that).

    python bench/suites [--suites suites/allocation suites/status] [--runs 1]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from dra_conformance import paths
from dra_conformance.backends.local.backend import LocalBackend, LocalClusterConfig


def run(workers: int, suites: list[str], junit: Path) -> tuple[float, list[float], str]:
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
            f"--junitxml={junit}",
            *suites,
        ],
        cwd=paths.CHECKOUT,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - started
    cases = ElementTree.parse(junit).getroot().iter("testcase")
    durations = [float(case.get("time", "0")) for case in cases]
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr[-500:]
    return wall, durations, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--suites", nargs="+", default=["suites/allocation", "suites/status"])
    parser.add_argument("--runs", type=int, default=1, help="repetitions per worker count (medians are reported)")
    args = parser.parse_args()
    backend = LocalBackend(LocalClusterConfig())
    started_here = backend.info() is None
    backend.start()
    walls: dict[int, list[float]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="dra-bench-suites-") as scratch:
            for workers in (1, 2):
                for attempt in range(args.runs):
                    wall, durations, summary = run(workers, args.suites, Path(scratch) / f"n{workers}-{attempt}.xml")
                    walls.setdefault(workers, []).append(wall)
                    print(
                        f"-n {workers}: {len(durations)} tests, median per test {statistics.median(durations):.2f} s, "
                        f"max {max(durations):.2f} s, total wall {wall:.1f} s  ({summary})",
                        flush=True,
                    )
    finally:
        if started_here:
            backend.stop()
    one, two = statistics.median(walls[1]), statistics.median(walls[2])
    print(f"speed-up -n 2 over -n 1: {one / two:.2f}x ({one:.1f} s -> {two:.1f} s) on this machine's cores")


if __name__ == "__main__":
    main()
