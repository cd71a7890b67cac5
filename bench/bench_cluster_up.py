#!/usr/bin/env python3
"""Benchmark: cold build of the pinned binaries, and warm local-cluster start-up (median of N runs).

Warm start-up is measured from `LocalBackend.start()` until the API answers and every fake node is Ready,
with the phase split the backend records (render = PKI and configs; control_plane = supervisor spawn until
kube-apiserver /readyz and the remaining components started; nodes_ready = Node objects created until Ready).

    python bench/cluster_up [--runs 5] [--nodes 2] [--skip-cold] [--real-node]

With --real-node the clusters also start the real node (kubelet, containerd, runc; root), and the extra start
time it costs is printed: the backend's phases from the fake drivers ready until the real node is Ready
(containerd, image import, kubelet registration) and its driver registered with a complete pool.

The cold build uses an empty Go build cache in a temporary directory; the Go module cache stays as it is, so
downloads are not part of the figure (they depend on the network, not on this project).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from dra_conformance.backends.local.backend import LocalBackend, LocalClusterConfig
from dra_conformance.backends.local.build import COMPONENTS, Builder

# The target for a warm start on 2 cores, and published figures of comparable tools (seconds).
TARGET_WARM_SECONDS = 5.0
# The real node issue's target: what a real node adds to a warm start.
TARGET_REAL_NODE_EXTRA_SECONDS = 10.0
REAL_NODE_PHASES = ("real_node_ready", "real_node_driver_ready")
PUBLISHED = {"kwokctl": (1.6, 3.3), "envtest (API only)": (7.0, 7.0), "kind single node": (12.0, 17.0)}


def cold_build(assets: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="dra-bench-cold-") as scratch:
        root = Path(scratch)
        builder = Builder(
            assets, root / "cache", timeout=3600, echo=lambda _m: None, go_env={"GOCACHE": str(root / "gocache")}
        )
        total = 0.0
        for component in COMPONENTS:
            started = time.monotonic()
            builder.ensure(component)
            seconds = time.monotonic() - started
            total += seconds
            print(f"cold build {component.name:<5} {component.version:<8} {seconds:7.1f} s", flush=True)
        print(f"cold build total               {total:7.1f} s  (empty GOCACHE, warm module cache)")


def warm_starts(runs: int, nodes: int, real_node: bool) -> None:
    starts: list[float] = []
    stops: list[float] = []
    phases: dict[str, list[float]] = {}
    timeline: dict[str, list[float]] = {}
    for run in range(1, runs + 1):
        with tempfile.TemporaryDirectory(prefix="dra-bench-warm-") as scratch:
            backend = LocalBackend(
                LocalClusterConfig(state_dir=Path(scratch) / "cluster", nodes=nodes, real_node=real_node)
            )
            started = time.monotonic()
            info = backend.start()
            starts.append(time.monotonic() - started)
            for key, value in info.details.items():
                if key.startswith("startup."):
                    phases.setdefault(key.removeprefix("startup."), []).append(float(value))
                if key.startswith("timeline."):
                    timeline.setdefault(key.removeprefix("timeline."), []).append(float(value))
            started = time.monotonic()
            backend.stop()
            stops.append(time.monotonic() - started)
        print(f"warm start {run}: {starts[-1]:.2f} s (stop {stops[-1]:.2f} s)", flush=True)
    median = statistics.median(starts)
    print(
        f"warm start median of {runs}: {median:.2f} s (min {min(starts):.2f}, max {max(starts):.2f}), "
        f"{nodes} nodes; target {TARGET_WARM_SECONDS:g} s -> {median / TARGET_WARM_SECONDS:.2f} of target"
    )
    api_and_nodes = [
        sum(values[i] for key, values in phases.items() if key in ("render", "control_plane", "nodes_ready"))
        for i in range(len(starts))
    ]
    print(
        f"  API answering and every node Ready (the issue's measure): median {statistics.median(api_and_nodes):.2f} s;"
        f" the rest is the fake drivers and the metrics adapter"
    )
    for phase, values in phases.items():
        share = statistics.median(values) / median
        print(f"  {phase:<14} median {statistics.median(values):.2f} s ({share:.0%})")
    print("  supervisor timeline (median seconds after the supervisor started):")
    for event, values in sorted(timeline.items(), key=lambda item: statistics.median(item[1])):
        print(f"    {event:<32} {statistics.median(values):.2f}")
    print(f"stop median: {statistics.median(stops):.2f} s")
    if real_node:
        extra = [sum(phases[phase][i] for phase in REAL_NODE_PHASES) for i in range(len(starts))]
        print(
            f"  real node extra start: median {statistics.median(extra):.2f} s (min {min(extra):.2f}, max "
            f"{max(extra):.2f}); target {TARGET_REAL_NODE_EXTRA_SECONDS:g} s -> "
            f"{statistics.median(extra) / TARGET_REAL_NODE_EXTRA_SECONDS:.2f} of target"
        )
    for tool, (low, high) in PUBLISHED.items():
        print(f"  vs {tool} {low:g}-{high:g} s: ratio {median / high:.2f}-{median / low:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--skip-cold", action="store_true", help="skip the cold build (it takes minutes)")
    parser.add_argument("--real-node", action="store_true", help="also start the real node and print what it adds")
    args = parser.parse_args()
    assets = LocalClusterConfig().assets
    if not args.skip_cold:
        cold_build(assets)
    # Warm runs need the cached binaries; this is a no-op when they exist.
    builder = Builder(assets, LocalClusterConfig().cache_dir, timeout=3600, echo=print)
    builder.ensure_all()
    if args.real_node:
        builder.ensure_real_node()
    warm_starts(args.runs, args.nodes, args.real_node)


if __name__ == "__main__":
    main()
