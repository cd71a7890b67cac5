"""The `local` backend: builds the pinned binaries and composes the cluster from one builder per component.

The control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok: components/) is rendered
into the supervisor's plan; the fake nodes, the driver under test, the real node and the metrics adapter are started
on the running cluster, each waiting for its own readiness. `start` reads as the list of those phases.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from dra_conformance import paths
from dra_conformance.backends.local import (
    bootstrap_rbac,
    cluster_record,
    control_plane,
    daemonset_disruption,
    driver_swap,
    drivers,
    images,
    install_record,
    real_node_host,
    shipped,
)
from dra_conformance.backends.local.build import Binaries, BinaryBuilder, RealNodeBinaries, echo_stderr, select
from dra_conformance.backends.local.cluster_record import ClusterRecord
from dra_conformance.backends.local.components import driver as driver_component
from dra_conformance.backends.local.components import fake_nodes, kwok, metrics_adapter, shipped_driver
from dra_conformance.backends.local.components import real_nodes as real_nodes_component
from dra_conformance.backends.local.components.kube_apiserver import KubeApiserver
from dra_conformance.backends.local.components.kube_controller_manager import KubeControllerManager
from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.backends.local.owners import Owners
from dra_conformance.backends.local.ports import PortReservation, reserved
from dra_conformance.backends.local.process_plan import ProcessSpec
from dra_conformance.backends.local.supervised import STARTUP_POLL_CAP, SupervisedCluster
from dra_conformance.driver.profile import DriverProfile, load_profile, profile_hash
from dra_conformance.driver.reference import GO_BUILD_DETAIL
from dra_conformance.errors import BackendError, UsageError, WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.client import status_message
from dra_conformance.kube.preflight import check_cluster
from dra_conformance.model.cluster import (
    BackendCapability,
    ClusterInfo,
    DriverExit,
)
from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.processes import process_state
from dra_conformance.timeouts import Timeouts
from dra_wire.cache import default_cache_dir

# The names other modules know these by (tests, benchmarks).
KWOK_NODE_ANNOTATION = kwok.NODE_ANNOTATION
NODE_LABEL = fake_nodes.NODE_LABEL
SET_ASIDE_NODES = fake_nodes.SET_ASIDE_NODES
NODE_CAPACITY = fake_nodes.NODE_CAPACITY
# Where `kill_driver` notes each kill it makes, in the cluster's state dir (JSON lines: name, at).
KILL_LOG = "driver-kills.jsonl"
# The client's typed API classes the start-up uses after the control plane answers. The first use of each builds a
# model class per type it references (1.3 s of CPU for CoreV1Api alone); they are built while the control plane
# starts instead.
START_API_CLASSES = (
    "CoreV1Api",
    "ApiregistrationV1Api",
    "AuthenticationV1Api",
    "AuthorizationV1Api",
    "CustomObjectsApi",
    "VersionApi",
)
# An exit this soon after the suite's own SIGKILL of that process is the kill's (the supervisor sees it at once).
KILL_ATTRIBUTION = 30.0


class Stopwatch:
    """Seconds spent per start-up phase, recorded so `status` and the benchmark can say where time goes."""

    def __init__(self) -> None:
        """Start timing now."""
        self.laps: dict[str, float] = {}
        self._last = time.monotonic()

    def lap(self, phase: str) -> None:
        """Record the time since the previous lap under `phase`."""
        now = time.monotonic()
        self.laps[phase] = now - self._last
        self._last = now


# The real node's kubelet, by its name among the supervisor's processes.
KUBELET = "kubelet"


def wanted_components(profile: DriverProfile, metrics: str) -> frozenset[str]:
    """The components of `build.ON_DEMAND` a local cluster with `profile` and Metrics API `metrics` runs.

    Those its metrics implementation runs (metrics-server's binary) and those the profile's commands name
    (`{bin:<component>}`); `build.select` adds the ones every local cluster runs.
    """
    return metrics_adapter.components(metrics) | (profile.run.binaries() if profile.run is not None else frozenset())


@dataclass(frozen=True)
class LocalClusterConfig:
    """Settings of one local cluster."""

    # State directory: PKI, kubeconfig, component logs, etcd data. One cluster per directory.
    state_dir: Path = field(default_factory=lambda: paths.default_state_root() / "local")
    # Build cache shared by every checkout of this user; keyed by the pinned versions.
    cache_dir: Path = field(default_factory=default_cache_dir)
    # Wrapper Go modules that build the pinned upstream components.
    assets: Path = field(default_factory=paths.cluster_assets)
    # Number of kwok-managed fake nodes.
    nodes: int = 2
    timeouts: Timeouts = field(default_factory=Timeouts)
    # A process whose exit stops the cluster (the pytest run that started it); None lets it outlive the caller.
    owner_pid: int | None = None
    # Resource Metrics API implementation: "fake" (the reference adapter, v1 and v1beta1), "metrics-server" (the
    # real one, v1beta1 only, scraping kwok's emulated kubelet metrics) or "none".
    metrics: str = "fake"
    # The driver under test, run on every node as its profile says (default: the reference driver).
    profile: Path = field(default_factory=paths.reference_driver_profile)
    # Add a real node: a kubelet on containerd and runc on this machine (root only), for kubelet-mode checks.
    real_node: bool = False
    # With real_node, how many: node 0 in this machine's namespaces, each further one in its own (node_namespace).
    real_nodes: int = 1
    # A running cluster of this state directory with another profile's driver gets this profile's driver instead
    # (`driver_swap`), rather than refusing the run.
    replace_driver: bool = False
    # The scheduler's client QPS and burst (bench/scheduling --scheduler-qps, as upstream's scheduler_perf lifts
    # them); None leaves the scheduler's defaults, as on a default cluster.
    scheduler_qps: int | None = None
    # Where the API server's default RBAC objects are recorded, one file per kube binary (bootstrap_rbac.py); None:
    # beside the binaries, in the build cache.
    bootstrap_rbac_dir: Path | None = None


class LocalBackend:
    """Runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok as local processes."""

    name = "local"

    def __init__(self, config: LocalClusterConfig, echo: Callable[[str], None] = echo_stderr) -> None:
        """Manage the cluster described by `config`, reporting progress through `echo`."""
        if config.nodes < 1:
            raise ValueError(f"a local cluster needs at least one node, got {config.nodes}")
        self.config = config
        # Absolute: the real node's driver pod mounts these directories by path, and a relative
        # `--cluster-state-dir` would name a different place for every process that is not started here.
        self.layout = ClusterLayout(config.state_dir.resolve())
        self.echo = echo
        self.supervised = SupervisedCluster(self.layout, config.timeouts)

    @functools.cached_property
    def profile(self) -> DriverProfile:
        """The driver profile of this config, read and validated once per command."""
        return load_profile(self.config.profile)

    def node_names(self) -> tuple[str, ...]:
        """Names of the fake nodes, in index order (the set-aside nodes not included)."""
        return fake_nodes.node_names(self.config.nodes)

    # --- inspection -------------------------------------------------------------------------------------------

    def _state(self) -> dict[str, Any] | None:
        return self.supervised.state()

    def info(self) -> ClusterInfo | None:
        """Describe the running cluster, or None if no supervisor is running for this state directory."""
        state = self._state()
        if state is None or state.get("phase") != "running" or not self.supervised.supervisor_alive(state):
            return None
        recorded = ClusterRecord.read(self.layout)
        if recorded is None:
            return None  # still starting: nodes not registered yet
        return ClusterInfo(
            backend=self.name,
            kubeconfig=self.layout.kubeconfig,
            server=str(state["server"]),
            nodes=recorded.nodes,
            capabilities=frozenset(
                {
                    BackendCapability.NODE_CLIENT_CERTS,
                    BackendCapability.AUDIT_LOG,
                    BackendCapability.KWOK_NODES,
                    BackendCapability.LOCAL_PROCESSES,
                }
                | ({BackendCapability.REFERENCE_DRIVER} if recorded.drivers else set())
                | ({BackendCapability.REFERENCE_METRICS_ADAPTER} if recorded.metrics == "fake" else set())
                | {BackendCapability.SET_ASIDE_NODES}
                | ({BackendCapability.REAL_KUBELET} if recorded.real_nodes else set())
            ),
            drivers=recorded.drivers,
            set_aside_nodes=SET_ASIDE_NODES,
            real_nodes=recorded.real_nodes,
            driver_daemonsets=install_record.driver_daemonsets(self.layout),
            install_transforms=shipped.recorded_transforms(self.layout),
            previous_release=shipped.recorded_previous_release(self.layout),
            pki_dir=self.layout.pki,
            audit_log=self.layout.audit_log,
            log_dir=self.layout.logs,
            details={
                "supervisor_pid": str(state["supervisor_pid"]),
                "metrics.control_socket": str(self.metrics_control_socket),
                "metrics": recorded.metrics or "none",
                "profile": recorded.profile,
                "profile.digest": recorded.profile_digest,
                "state_dir": str(self.layout.root),
                **({"workload_image": images.BUSYBOX_IMAGE} if recorded.real_nodes else {}),
                **({GO_BUILD_DETAIL: recorded.reference_driver_go} if recorded.reference_driver_go else {}),
                **{f"pid.{name}": str(pid) for name, pid in state.get("processes", {}).items()},
                **{f"startup.{phase}": f"{seconds:.3f}" for phase, seconds in recorded.startup.items()},
                **{f"timeline.{event}": f"{at:.3f}" for event, at in state.get("timeline", {}).items()},
            },
        )

    # --- start ------------------------------------------------------------------------------------------------

    def start(self) -> ClusterInfo:
        """Attach to the running cluster of this state directory, or build and start a new one.

        Either way the caller's process (`owner_pid`) holds the cluster until it releases it or exits; the cluster
        stops when its last holder is gone, unless someone keeps it (no owner: `cluster up`, `--keep-cluster`).
        """
        self.layout.root.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.layout.lock)):
            running = self.info()
            if running is not None:
                if self.config.replace_driver and running.details.get("profile.digest") != profile_hash(
                    self.config.profile
                ):
                    running = self._replace_driver()
                self._check_same_driver(running)
                self._join(running)
                return running
            profile = self.profile
            self._check_start(profile)
            builder = BinaryBuilder(
                self.config.assets, self.config.cache_dir, timeout=self.config.timeouts.build, echo=self.echo
            )
            binaries = builder.ensure_selected(select(wanted_components(profile, self.config.metrics)))
            real_binaries = builder.ensure_real_node() if self.config.real_node else None
            self._stop_locked()  # a half-started or crashed cluster from an earlier run
            timings = Stopwatch()
            self._reset_state_dir()
            with reserved() as ports:
                adapter = self._render(binaries, ports)
                timings.lap("render")
                # The supervisor inherits the ports' locks and holds them until it exits (see ports.py).
                self.supervised.spawn(pass_fds=ports.descriptors)
            # A first use in this thread meanwhile waits for the class's import to finish, as imports do.
            threading.Thread(target=_build_api_classes, name="build-api-classes", daemon=True).start()
            try:
                endpoints = self._start_phases(timings, binaries, real_binaries, adapter)
            except (ApiException, HTTPError) as error:
                self._stop_locked()
                cause = f"{error.status} {status_message(error)}" if isinstance(error, ApiException) else str(error)
                raise BackendError(f"start local cluster: register nodes and drivers: {cause}") from None
            except BaseException:
                self._stop_locked()
                raise
            self._record(timings, endpoints, binaries, self.config.real_nodes if real_binaries is not None else 0)
            info = self.info()
            if info is None:
                reason = self.supervised.reason()
                raise BackendError(f"start local cluster: supervisor stopped right after start-up: {reason}")
            return info

    def _render(self, binaries: Binaries, ports: PortReservation) -> metrics_adapter.MetricsAdapter | None:
        """Write the control plane's files, its plan and its owners; return the metrics adapter (if any)."""
        adapter = None
        if self.config.metrics != "none":
            adapter = metrics_adapter.MetricsAdapter(self.config.metrics, ports.take(), binaries.metrics_server)
        plan = control_plane.render(
            self.layout,
            binaries,
            control_plane.allocate_ports(ports),
            kwok_stages=self.config.assets / "kwok-stages.yaml",
            ready_timeout=self.config.timeouts.apiserver_ready,
            stop_timeout=self.config.timeouts.process_stop,
            owner_pid=self.config.owner_pid,
            cleanup_paths=[drivers.runtime_dir(self.layout)],
            scheduler_qps=self.config.scheduler_qps,
        )
        if adapter is not None:
            adapter = adapter.planned(self.supervised, plan)
        plan.write(self.layout.plan)
        Owners().joined(self.config.owner_pid).write(self.layout.owners)
        return adapter

    def _start_phases(
        self,
        timings: Stopwatch,
        binaries: Binaries,
        real_binaries: RealNodeBinaries | None,
        adapter: metrics_adapter.MetricsAdapter | None,
    ) -> list[DriverEndpoint]:
        """Bring the cluster up phase by phase, each a component that waits for its own readiness.

        The API server's default RBAC objects are written first from a record of an earlier start, so that its own
        hook finds them written (see bootstrap_rbac.py); without a record they are recorded once /readyz answers.

        What needs only the API (the metrics adapter's APIServices, the Node objects and kwok, the driver's identity)
        overlaps the API server's bootstrap hooks; the driver's processes start once /readyz answers, as on any
        cluster, so no driver sees an API server without its default roles.
        """
        cluster = self.supervised
        apiserver = KubeApiserver()
        apiserver.serving(cluster)
        timings.lap("api_serving")
        rbac = self._bootstrap_rbac(binaries)
        recorded = rbac.recorded()
        if recorded is not None:
            with cluster.api() as api_client:
                try:
                    rbac.seed(api_client, recorded)
                except (ApiException, HTTPError) as error:
                    rbac.path.unlink(missing_ok=True)  # the next start records it again
                    cause = f"{error.status} {status_message(error)}" if isinstance(error, ApiException) else error
                    raise BackendError(
                        f"start local cluster: write the API server's default RBAC objects from {rbac.path}: {cause} "
                        "(the record is deleted; the next start records it again)"
                    ) from None
            timings.lap("bootstrap_rbac")
        # The metrics adapter's APIServices are registered first: the aggregator takes up to a second after that
        # to proxy each version, which then overlaps with the nodes' and drivers' start.
        if adapter is not None:
            adapter.launch(cluster)
        nodes = fake_nodes.FakeNodes(self.node_names())
        nodes.register(cluster)
        profile = self.profile
        driver = None
        if profile.real_nodes_only:
            self.echo(
                f"driver {profile.driver}: real nodes only ({profile.source}: nodes: realOnly), none on kwok nodes"
            )
        else:
            driver = driver_component.DriverUnderTest(profile, binaries.built(), nodes.all)
            driver.install(cluster)  # while kwok turns the nodes Ready
        nodes.ready(cluster)  # kwok's work
        timings.lap("nodes_ready")
        apiserver.ready(cluster)
        if recorded is None:
            with cluster.api() as api_client:
                rbac.record(api_client)
        timings.lap("control_plane")
        endpoints: list[DriverEndpoint] = []
        if driver is not None:
            driver.launch(cluster)
            driver.ready(cluster)
            endpoints = driver.endpoints
        timings.lap("drivers_ready")
        if real_binaries is not None:
            images = shipped.archives(profile.install) if profile.install else ()
            real_nodes = real_nodes_component.RealNodes(cluster, real_binaries, images, self.config.real_nodes)
            real_nodes.start(cluster)
            timings.lap("real_node_ready")
            on_real_node = real_nodes.names
            if profile.install is not None:
                endpoints += shipped_driver.ShippedDriver(profile, self.layout, on_real_node, self.echo).start(cluster)
            else:
                endpoints += driver_component.DriverUnderTest(
                    profile, binaries.built(), on_real_node, in_pods=True
                ).start(cluster)
            timings.lap("real_node_driver_ready")
        if adapter is not None:
            adapter.ready(cluster)
            timings.lap("metrics_available")
        # Last, so the controller-manager's start-up overlaps with the drivers'.
        KubeControllerManager().ready(cluster)
        timings.lap("nodes_untainted")
        check_cluster(self.layout.kubeconfig)  # the same preflight any cluster passes
        timings.lap("preflight")
        return endpoints

    def _bootstrap_rbac(self, binaries: Binaries) -> bootstrap_rbac.BootstrapRbac:
        """The record of the default RBAC objects of this cluster's API server binary."""
        directory = self.config.bootstrap_rbac_dir or self.config.cache_dir / "bootstrap-rbac"
        return bootstrap_rbac.BootstrapRbac(bootstrap_rbac.record_path(directory, binaries.kube))

    def _check_start(self, profile: DriverProfile) -> None:
        """What the profile and the real node need of this machine, checked before anything is built or started."""
        if self.config.real_node and os.geteuid() != 0:
            raise UsageError(
                f"--real-node needs root (uid {os.geteuid()}): its kubelet, containerd and runc set sysctls, bind "
                "sockets under /run and make cgroups; run as root, or leave --real-node out"
            )
        if self.config.real_node:
            real_node_host.refuse_other_kubelet()
        if profile.real_nodes_only and not self.config.real_node:
            raise UsageError(
                f"{profile.source}: driver {profile.driver} runs on real nodes only (nodes: realOnly); add --real-node"
            )
        if profile.install is not None:
            missing = shipped.missing_images(profile.install)
            if missing:
                raise UsageError(
                    f"{profile.source}: install.images: no archive at {', '.join(map(str, missing))} (the reference "
                    "driver's: dra-conformance image build --image reference-driver --output <that path>)"
                )

    def _record(self, timings: Stopwatch, endpoints: list[DriverEndpoint], binaries: Binaries, real_nodes: int) -> None:
        """Write what `info` reports beyond the supervisor's state: nodes, drivers, start-up times."""
        ClusterRecord(
            nodes=self.node_names(),
            real_nodes=tuple(real_node_host.node_name(index) for index in range(real_nodes)),
            drivers=tuple(endpoints),
            metrics=self.config.metrics if self.config.metrics != "none" else None,
            profile=str(self.config.profile),
            profile_digest=profile_hash(self.config.profile),
            reference_driver_go=str(binaries.reference_driver_go),
            startup=timings.laps,
        ).write(self.layout)

    def _replace_driver(self) -> ClusterInfo:
        """Swap the running cluster's driver for this config's profile's (`driver_swap`); under the cluster's lock."""
        began = time.monotonic()
        profile = self.profile
        recorded = ClusterRecord.read(self.layout)
        if recorded is None:
            raise BackendError(f"replace driver: the cluster in {self.layout.root} recorded no start")
        refused = driver_swap.refusal(self.layout, recorded, profile, self.config.owner_pid)
        if refused is not None:
            raise UsageError(
                f"cannot replace the driver of the local cluster in {self.layout.root}: {refused}; stop it first "
                "(dra-conformance cluster down) or use another state directory"
            )
        for endpoint in recorded.drivers:
            self._stop_driver_process(endpoint.node)
        self._kill_log().unlink(missing_ok=True)  # the old driver's kills: no exit of the new one is the suite's
        with self.supervised.api() as api_client:
            old = driver_swap.remove_old_driver(api_client, self.layout, self.config.timeouts.delete)
        # The metrics adapter is kept: only what the new driver runs may be new to this cluster.
        wanted = wanted_components(profile, recorded.metrics or "none")
        binaries = BinaryBuilder(
            self.config.assets, self.config.cache_dir, timeout=self.config.timeouts.build, echo=self.echo
        ).ensure_selected(select(wanted))
        nodes = fake_nodes.FakeNodes(recorded.nodes).all
        endpoints = driver_component.DriverUnderTest(profile, binaries.built(), nodes).start(self.supervised)
        recorded.with_driver(
            tuple(endpoints),
            profile=str(self.config.profile),
            profile_digest=profile_hash(self.config.profile),
            reference_driver_go=str(binaries.reference_driver_go),
        ).write(self.layout)
        self.echo(
            f"driver {old} replaced by {profile.driver} of {profile.source} in {time.monotonic() - began:.1f} s "
            "(control plane, nodes and metrics adapter kept)"
        )
        info = self.info()
        if info is None:
            raise BackendError(f"replace driver: the cluster stopped meanwhile: {self.supervised.reason()}")
        return info

    def _join(self, running: ClusterInfo) -> None:
        """Hold the running cluster too (under the lock): it stops only once every holder released it or exited."""
        owners = Owners.read(self.layout.owners)
        if owners is None:
            return  # started before clusters had owners: its one owner still decides
        owners.live().joined(self.config.owner_pid).write(self.layout.owners)
        # The supervisor watches the new owner too (or, once kept, none): nothing here waits for it.
        with contextlib.suppress(ProcessLookupError):  # it stopped since: the next start finds it gone
            os.kill(int(running.details["supervisor_pid"]), signal.SIGUSR2)

    def _check_same_driver(self, running: ClusterInfo) -> None:
        """A running cluster serves one driver: attaching with another profile would certify the wrong driver."""
        wanted = profile_hash(self.config.profile)
        if running.details.get("profile.digest") != wanted:
            raise UsageError(
                f"the local cluster in {self.layout.root} runs the driver of {running.details.get('profile')}, not "
                f"{self.config.profile}; replace its driver (--replace-driver), stop it first (dra-conformance "
                "cluster down) or use another state directory"
            )

    # --- the driver under test ----------------------------------------------------------------------------------

    def kill_driver(self, node: str, sig: signal.Signals = signal.SIGKILL) -> int:
        """SIGKILL (or `sig`) the driver on `node`; return its exit status once the supervisor has recorded the exit."""
        name = drivers.process_name(node)
        processes = (self._state() or {}).get("processes", {})
        if name not in processes:
            installed = self._installed_on(node)
            if installed:
                with self.supervised.api() as api_client:
                    stop = self.config.timeouts.process_stop
                    return daemonset_disruption.stop(api_client, installed, node, stop, sig)
            raise BackendError(self._not_supervised(node))
        # Noted before the kill, so the run counts the exit as the suite's doing (`driver_exits`).
        with self._kill_log().open("a") as log:
            log.write(json.dumps({"name": name, "at": time.time()}) + "\n")
        return self._sigkill(name, int(processes[name]), sig)

    def terminate_driver(self, node: str) -> int:
        """SIGTERM the driver on `node`, as the kubelet stops its pod; SIGKILL once it outlived process_stop."""
        try:
            return self.kill_driver(node, signal.SIGTERM)
        except BackendError:  # still running after process_stop, as after a pod's grace period
            return self.kill_driver(node)

    def _stop_driver_process(self, node: str) -> None:
        """SIGKILL the driver process on `node` if it runs, without noting it as the suite's kill (a swap's)."""
        name = drivers.process_name(node)
        pid = (self._state() or {}).get("processes", {}).get(name)
        if pid is not None and self.supervised.exit_code(name) is None:
            self._sigkill(name, int(pid))

    def _sigkill(self, name: str, pid: int, sig: signal.Signals = signal.SIGKILL) -> int:
        """SIGKILL (or `sig`) supervised process `name` (`pid`); return its exit status once the supervisor has it."""

        def exits() -> list[int]:
            return [int(e["code"]) for e in (self._state() or {}).get("exit_history", []) if e["name"] == name]

        before = len(exits())
        with contextlib.suppress(ProcessLookupError):  # it exited on its own; the supervisor records that exit
            os.kill(pid, sig)
        try:
            recorded = waits.until(
                exits,
                lambda codes: len(codes) > before,
                timeout=self.config.timeouts.process_stop,
                what=f"supervisor recording an exit of {name} (pid {pid}) after {sig.name}",
                describe=lambda codes: f"{len(codes)} exits recorded, {before} before the kill",
                max_interval=STARTUP_POLL_CAP,
            )
        except WaitTimeout as timeout:
            raise BackendError(f"{timeout}; the driver's process: {process_state(pid)}") from None
        return recorded[before]

    def import_images(self, archives: tuple[Path, ...]) -> None:
        """Import OCI image archives into every real node's containerd, for pods there (e.g. the suite's image)."""
        recorded = ClusterRecord.read(self.layout) if self.info() is not None else None
        if recorded is None or not recorded.real_nodes:
            raise BackendError(
                f"the local cluster in {self.layout.root} has no real node to import images into (start it with "
                "--real-node)"
            )
        binaries = BinaryBuilder(
            self.config.assets, self.config.cache_dir, timeout=self.config.timeouts.build, echo=self.echo
        ).ensure_real_node()
        for node in recorded.real_nodes:
            real_node_host.import_archives(
                binaries.ctr,
                real_node_host.containerd_socket(self.layout, node),
                archives,
                real_node_host.VENDOR_IMPORT_TIMEOUT,
            )

    def restart_kubelet(self, node: str) -> None:
        """SIGTERM a real node's kubelet, wait for it to exit, and have the supervisor start it again."""
        name = real_node_host.process_name(KUBELET, node)
        pid = (self._state() or {}).get("processes", {}).get(name)
        specs = json.loads(self.layout.extra_processes.read_text()) if self.layout.extra_processes.exists() else []
        spec = next((item for item in specs if item["name"] == name), None)
        if pid is None or spec is None:
            raise BackendError(f"the local cluster runs no kubelet on {node} (start it with --real-node)")
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGTERM)
        waits.until(
            lambda: (self._state() or {}).get("exited", {}),
            lambda seen: name in seen,
            timeout=self.config.timeouts.process_stop,
            what=f"supervisor seeing the kubelet of {node} (pid {pid}) exit after SIGTERM",
            describe=str,
            max_interval=STARTUP_POLL_CAP,
        )
        self.supervised.add_processes([ProcessSpec(**spec)])

    def _installed_on(self, node: str) -> tuple[str, ...]:
        """The DaemonSets the install applied, where `node` is a real node they run the driver on (else none)."""
        info = self.info()
        if info is None or node not in info.real_nodes or self.profile.install is None:
            return ()
        return info.driver_daemonsets

    def _start_installed(self, node: str) -> None:
        info = self.info()
        endpoint = next((e for e in info.drivers if e.node == node), None) if info else None
        if info is None or endpoint is None:
            raise BackendError(f"start driver on {node}: the local cluster is not running or has no driver there")
        profile = self.profile
        with self.supervised.api() as api_client:
            core = client.CoreV1Api(api_client)
            namespaces = tuple(sorted({entry.partition("/")[0] for entry in info.driver_daemonsets}))
            failed = functools.partial(shipped.driver_pod_failure, core, profile.driver, namespaces, node)
            ready = functools.partial(
                driver_component.await_driver, self.supervised, api_client, profile, endpoint, failed
            )
            daemonset_disruption.start(api_client, node, ready)

    @staticmethod
    def _not_supervised(node: str) -> str:
        return (
            f"the driver on {node} is not a process of the local cluster's supervisor (on the real node it runs "
            "as a DaemonSet pod: delete the pod to restart it)"
        )

    def start_driver(self, node: str, build: str | None = None) -> None:
        """Have the supervisor start the (exited) driver on `node` again; wait for its registration and pool.

        `build` names another build of the profile (`run.versions`, e.g. "previous"); None starts its own.
        """
        builds = (
            json.loads(drivers.builds_path(self.layout).read_text())
            if drivers.builds_path(self.layout).exists()
            else {}
        )
        if node not in builds and build is None and self._installed_on(node):
            self._start_installed(node)
            return
        if node not in builds:
            raise BackendError(self._not_supervised(node))
        chosen = build or drivers.CURRENT_BUILD
        if chosen not in builds.get(node, {}):
            raise UsageError(
                f"{self.config.profile}: the driver has no build {chosen!r} (run.versions names: "
                f"{sorted(set(builds.get(node, {})) - {drivers.CURRENT_BUILD}) or 'none'})"
            )
        self.supervised.add_processes([ProcessSpec(**builds[node][chosen])])
        info = self.info()
        endpoint = next((e for e in info.drivers if e.node == node), None) if info else None
        if endpoint is None:
            raise BackendError(f"start driver on {node}: the local cluster is not running or has no driver there")
        profile = self.profile
        with self.supervised.api() as api_client:
            failed = driver_component.exit_of(self.supervised, profile, node)
            driver_component.await_driver(self.supervised, api_client, profile, endpoint, failed)

    def driver_kubeconfig(self, node: str) -> Path:
        """The kubeconfig the driver on `node` reads at start."""
        return drivers.kubeconfig_path(self.layout, node)

    def _kill_log(self) -> Path:
        return self.layout.root / KILL_LOG

    def driver_exits(self, since: float) -> list[DriverExit]:
        """Every exit of a driver-under-test process since `since`; an exit shortly after `kill_driver` is ours."""
        history = [e for e in (self._state() or {}).get("exit_history", []) if e["at"] >= since]
        log = self._kill_log()
        kills = [json.loads(line) for line in log.read_text().splitlines() if line] if log.exists() else []
        exits = []
        for entry in history:
            name = str(entry["name"])
            node = drivers.node_of_process(name)
            if node is None:
                continue
            ours = any(k["name"] == name and 0 <= entry["at"] - k["at"] <= KILL_ATTRIBUTION for k in kills)
            exits.append(DriverExit(node, int(entry["code"]), float(entry["at"]), ours, self.supervised.log_tail(name)))
        return exits

    @property
    def metrics_control_socket(self) -> Path:
        """Control socket of the reference metrics adapter (faults, requests served)."""
        return metrics_adapter.control_socket(drivers.runtime_dir(self.layout))

    def _reset_state_dir(self) -> None:
        shutil.rmtree(drivers.runtime_dir(self.layout), ignore_errors=True)
        for path in (
            self.layout.pki,
            self.layout.config,
            self.layout.etcd_data,
            self.layout.logs,
            self.layout.root / "nodes",
        ):
            shutil.rmtree(path, ignore_errors=True)
        for path in (
            self.layout.state,
            self.layout.plan,
            self.layout.extra_processes,
            self.layout.owners,
            cluster_record.record_path(self.layout),
        ):
            path.unlink(missing_ok=True)
        self.layout.logs.mkdir(parents=True)

    # --- stop -------------------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the supervisor of this state directory (and with it every component); no-op if none runs.

        Stops it whoever holds it: this is `cluster down`, the user's explicit word.
        """
        self.layout.root.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.layout.lock)):
            self._stop_locked()

    def release(self, owner_pid: int) -> None:
        """`owner_pid` no longer holds the cluster: stop it if no other live run holds it (and nobody keeps it)."""
        self.layout.root.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.layout.lock)):
            owners = Owners.read(self.layout.owners)
            if owners is not None and owner_pid in owners.pids:
                owners.left(owner_pid).live().write(self.layout.owners)
            if self._ends_with_locked(owners, owner_pid):
                self._stop_locked()

    def ends_with(self, owner_pid: int) -> bool:
        """Whether `owner_pid` is the last live holder of an unkept cluster (before owners: the one that started it)."""
        self.layout.root.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.layout.lock)):
            return self._ends_with_locked(Owners.read(self.layout.owners), owner_pid)

    def _ends_with_locked(self, owners: Owners | None, owner_pid: int) -> bool:
        if owners is None:  # started before clusters had owners: its plan names its one owner
            try:
                return bool(json.loads(self.layout.plan.read_text()).get("owner_pid") == owner_pid)
            except (OSError, ValueError):
                return False
        if owner_pid not in owners.pids:
            return False  # not one of its holders: it is not ours to stop
        return owners.left(owner_pid).live().abandoned

    def _stop_locked(self) -> None:
        try:
            self.supervised.stop_supervisor()
        finally:
            # The supervisor tears the real node down itself; after a killed supervisor, this does it.
            problems = real_node_host.teardown(self.layout)
        if problems:
            raise BackendError(f"stop local cluster: real node left behind: {'; '.join(problems)}")


def _build_api_classes() -> None:
    for name in START_API_CLASSES:
        getattr(client, name)
