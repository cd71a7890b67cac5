#!/usr/bin/env python3
"""Benchmark: the warm default run (cluster start + every check, `dra-conformance run`), against a baseline checkout.

What a vendor waits for when iterating on a driver: the README's run with the pinned binaries already built. Each
run starts its own local cluster (a state directory of its own under a temporary directory), runs every bundled
suite on `run`'s default workers with the reference driver, and stops the cluster; the figure is the command's wall
time, with the pytest time and the outcome counts from its summary beside it.

With `--baseline DIR` (another checkout of this repository, e.g. a git worktree of an older commit), the same run
of that checkout is timed in the same invocation, interleaved with this one's (baseline, this, baseline, this...),
so load on a shared machine hits both alike; the ratio this / baseline is printed. The baseline runs on this
checkout's Python with the other checkout first on the path (its engine, suites and reference programs).

    python bench/default_run [--runs 1] [--baseline DIR] [--workers N] [--without-explore] [--json [PATH]]

Each run also prints the explorer's tier (suites/explore) beside the other checks, from the run's JUnit: what the
exploration costs the default run.

Target (issue 24): at most 60 s on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import bench_record
from bench_record import Figure, lower

CHECKOUT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 60.0
# A default run takes minutes; an hour means it hung (its own deadlines are far shorter).
RUN_DEADLINE = 3600.0
RUN_CLI = "from dra_conformance.cli import main; raise SystemExit(main())"
# The JUnit class names of the explorer's tier (suites/explore), and its one check (--without-explore deselects it).
EXPLORE_CLASSES = "suites.explore."
EXPLORE_CHECK = (
    "suites/explore/test_explore.py::"
    "test_the_driver_keeps_the_contract_through_random_sequences_of_kubelet_and_node_operations"
)


def _environment(checkout: Path) -> dict[str, str]:
    if checkout == CHECKOUT:
        return dict(os.environ)
    # dra-wire too: what the reference programs share (sockets, client helpers) changes with them.
    drivers = checkout / "drivers"
    paths = [checkout, drivers / "fake-metrics", drivers / "dra-wire"]
    # A checkout from before the Python reference driver was deleted (issue 47) still loads it.
    paths += [drivers / "fake-dra"] if (drivers / "fake-dra").is_dir() else []
    inherited = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, paths), *([inherited] if inherited else [])])}


def _state_dir_option(checkout: Path) -> str:
    """The checkout's spelling of the cluster state directory option (one spelling per option came after 5d60f30)."""
    options = (checkout / "dra_conformance" / "plugin" / "options.py").read_text()
    return "--dra-cluster-state-dir" if '"--dra-cluster-state-dir"' in options else "--dra-state-dir"


def timed_run(
    checkout: Path, scratch: Path, workers: int | None = None, extra: tuple[str, ...] = ()
) -> dict[str, object]:
    """One default run of `checkout`: wall seconds, exit code, pytest seconds, outcome totals and explore seconds."""
    reports = scratch / "reports"
    argv = [
        sys.executable,
        "-c",
        RUN_CLI,
        "run",
        f"{_state_dir_option(checkout)}={scratch / 'cluster'}",
        f"--dra-reports-dir={reports}",
        *([f"--workers={workers}"] if workers is not None else []),
        *extra,
    ]
    started = time.monotonic()
    environment = _environment(checkout)
    result = subprocess.run(
        argv, cwd=checkout, env=environment, capture_output=True, text=True, timeout=RUN_DEADLINE, check=False
    )
    wall = time.monotonic() - started
    summaries = sorted(reports.glob("*/summary.json"))
    summary = json.loads(summaries[-1].read_text()) if summaries else {}
    junits = sorted(reports.glob("*/junit.xml"))
    explore, checks = explore_seconds(junits[-1]) if junits else (0.0, 0.0)
    tail = [line for line in result.stdout.splitlines() if " in " in line and ("passed" in line or "failed" in line)]
    return {
        "wall": wall,
        "code": result.returncode,
        "verdict": summary.get("verdict", "no summary"),
        "totals": summary.get("totals", {}),
        "pytest": tail[-1].strip("= ") if tail else (result.stderr.strip().splitlines() or ["no output"])[-1],
        "explore": explore,
        "checks": checks,
    }


def explore_seconds(junit: Path) -> tuple[float, float]:
    """Seconds of the explorer's checks (suites/explore) and of every check, from the run's JUnit.

    Checks run on several workers at once, so these are check-seconds, not wall time: the explorer's share of them
    is what it costs the run's workers, and its check's time is the wall time it adds where nothing else is left.
    """
    cases = ElementTree.parse(junit).getroot().iter("testcase")
    times = [(case.get("classname", ""), float(case.get("time", "0"))) for case in cases]
    return sum(t for name, t in times if name.startswith(EXPLORE_CLASSES)), sum(t for _, t in times)


def main() -> None:
    """Time the default run here (and at --baseline), interleaved; print the figures and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="runs per checkout (medians are reported)")
    parser.add_argument("--baseline", type=Path, help="another checkout to time alongside, interleaved")
    parser.add_argument("--workers", type=int, help="`run --workers` (default: run's own), e.g. on a shared machine")
    parser.add_argument(
        "--without-explore",
        action="store_true",
        help="also time this checkout's run with the explorer's tier deselected, interleaved (what the tier costs)",
    )
    bench_record.add_option(parser)
    args = parser.parse_args()
    checkouts = {"this": CHECKOUT}
    if args.baseline is not None:
        if not (args.baseline / "dra_conformance" / "cli.py").is_file():
            parser.error(f"--baseline {args.baseline}: not a checkout of dra-conformance (no dra_conformance/cli.py)")
        checkouts = {"baseline": args.baseline.resolve(), "this": CHECKOUT}
    # Label -> (checkout, extra `run` arguments).
    variants: dict[str, tuple[Path, tuple[str, ...]]] = {label: (checkout, ()) for label, checkout in checkouts.items()}
    if args.without_explore:
        variants["this without explore"] = (CHECKOUT, (f"--deselect={EXPLORE_CHECK}",))
    walls: dict[str, list[float]] = {label: [] for label in variants}
    explores: dict[str, list[float]] = {label: [] for label in variants}
    with tempfile.TemporaryDirectory(prefix="dra-bench-default-") as scratch:
        for index in range(args.runs):
            for label, (checkout, extra) in variants.items():
                run_dir = Path(scratch) / f"{label.replace(' ', '-')}-{index}"
                found = timed_run(checkout, run_dir, args.workers, extra)
                walls[label].append(float(str(found["wall"])))
                explores[label].append(float(str(found["explore"])))
                print(
                    f"{label} run {index + 1}: {found['wall']:.1f} s wall, exit {found['code']}, "
                    f"{found['verdict']}, {found['totals']} ({found['pytest']})",
                    flush=True,
                )
                checks = float(str(found["checks"]))
                print(
                    f"{label} run {index + 1}: explore tier {found['explore']:.1f} s | the other checks "
                    f"{checks - float(str(found['explore'])):.1f} s (check-seconds over the workers)",
                    flush=True,
                )
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end")
    figures: list[Figure] = []
    for label, values in walls.items():
        median = statistics.median(values)
        print(
            f"{label}: warm default run median {median:.1f} s over {len(values)} run(s); target {TARGET_SECONDS:g} s "
            f"-> {median / TARGET_SECONDS:.2f} of target"
        )
        name = label.replace(" ", "_")
        figures.append(lower(f"default_run_{name}_s", median, "s"))
        figures.append(lower(f"default_run_{name}_explore_s", statistics.median(explores[label]), "s"))
    if "this without explore" in walls:
        with_it, without = statistics.median(walls["this"]), statistics.median(walls["this without explore"])
        print(f"explore tier: the default run {with_it:.1f} s with it, {without:.1f} s without")
    if "baseline" in walls:
        ratio = statistics.median(walls["this"]) / statistics.median(walls["baseline"])
        print(f"ratio this / baseline: {ratio:.2f}")
        figures.append(lower("default_run_ratio_to_baseline", ratio, "x"))
    bench_record.save(args.json, "default_run", figures)


if __name__ == "__main__":
    main()
