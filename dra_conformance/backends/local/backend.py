"""The `local` backend: builds the pinned binaries, renders the cluster, and drives the supervisor."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from dra_conformance import paths
from dra_conformance.backends.local import control_plane, driver_daemonset, drivers, images, metrics, real_node
from dra_conformance.backends.local.build import Binaries, Builder, RealNodeBinaries, echo_stderr
from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.driver.pool import PoolState, node_pools
from dra_conformance.driver.profile import DriverProfile, load_profile, profile_hash
from dra_conformance.errors import BackendError, DriverStartError, UsageError, WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.client import client_from_kubeconfig, status_message
from dra_conformance.kube.nodes import lifecycle_tainted, ready_node_names
from dra_conformance.kube.pki import CertificateAuthority
from dra_conformance.kube.preflight import check_cluster
from dra_conformance.metrics import api as metrics_api
from dra_conformance.model.cluster import SET_ASIDE_TAINT, BackendCapability, ClusterInfo, DriverExit
from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.timeouts import Timeouts
from dra_wire.cache import default_cache_dir

# Labels and annotations on the fake nodes this backend creates.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
NODE_LABEL = "dra-conformance.io/local-node"
# Start-up polls run at most this far apart: the warm cluster-up target is 5 s, so a 1 s backoff would cost 20%.
STARTUP_POLL_CAP = 0.1
# Lines of a failed component's log quoted in the error.
LOG_TAIL_LINES = 15
# Lines of a driver's log quoted in its one-line start error.
DRIVER_LOG_TAIL_LINES = 3
# Nodes a check leases to have the driver under test there to itself (tainted; see SET_ASIDE_TAINT). Two, so that
# the default two xdist workers never wait for one.
SET_ASIDE_NODES = ("kwok-set-aside-0", "kwok-set-aside-1")
# Where `kill_driver` notes each kill it makes, in the cluster's state dir (JSON lines: name, at).
KILL_LOG = "driver-kills.jsonl"
# An exit this soon after the suite's own SIGKILL of that process is the kill's (the supervisor sees it at once).
KILL_ATTRIBUTION = 30.0
# Capacity of each fake node; large so allocation, not CPU or memory, decides scheduling in the suites.
NODE_CAPACITY = {"cpu": "32", "memory": "256Gi", "pods": "110"}


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

    def node_names(self) -> tuple[str, ...]:
        """Names of the fake nodes, in index order (the set-aside nodes not included)."""
        return tuple(f"kwok-node-{index}" for index in range(self.config.nodes))

    # --- inspection -------------------------------------------------------------------------------------------

    def _state(self) -> dict[str, Any] | None:
        try:
            state: dict[str, Any] = json.loads(self.layout.state.read_text())
        except (OSError, ValueError):
            return None
        return state

    def _supervisor_alive(self, state: dict[str, Any]) -> bool:
        pid = state.get("supervisor_pid")
        if not isinstance(pid, int):
            return False
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return b"dra_conformance.backends.local.supervisor" in cmdline  # guards against a reused pid

    def info(self) -> ClusterInfo | None:
        """Describe the running cluster, or None if no supervisor is running for this state directory."""
        state = self._state()
        if state is None or state.get("phase") != "running" or not self._supervisor_alive(state):
            return None
        try:
            recorded = json.loads((self.layout.root / "cluster.json").read_text())
        except (OSError, ValueError):
            return None  # still starting: nodes not registered yet
        return ClusterInfo(
            backend=self.name,
            kubeconfig=self.layout.kubeconfig,
            server=str(state["server"]),
            nodes=tuple(recorded["nodes"]),
            capabilities=frozenset(
                {
                    BackendCapability.NODE_CLIENT_CERTS,
                    BackendCapability.AUDIT_LOG,
                    BackendCapability.KWOK_NODES,
                    BackendCapability.LOCAL_PROCESSES,
                }
                | ({BackendCapability.REFERENCE_DRIVER} if recorded.get("drivers") else set())
                | ({BackendCapability.REFERENCE_METRICS_ADAPTER} if recorded.get("metrics") == "fake" else set())
                | {BackendCapability.SET_ASIDE_NODES}
                | ({BackendCapability.REAL_KUBELET} if recorded.get("real_nodes") else set())
            ),
            drivers=tuple(
                DriverEndpoint(
                    d["driver"], d["node"], Path(d["kubelet_root"]), Path(d["cdi_dir"]) if d.get("cdi_dir") else None
                )
                for d in recorded.get("drivers", [])
            ),
            set_aside_nodes=SET_ASIDE_NODES,
            real_nodes=tuple(recorded.get("real_nodes", [])),
            pki_dir=self.layout.pki,
            audit_log=self.layout.audit_log,
            log_dir=self.layout.logs,
            details={
                "supervisor_pid": str(state["supervisor_pid"]),
                "metrics.control_socket": str(self.metrics_control_socket),
                "metrics": str(recorded.get("metrics") or "none"),
                "profile": str(recorded.get("profile", "")),
                "profile.digest": str(recorded.get("profile_digest", "")),
                "state_dir": str(self.layout.root),
                **({"workload_image": images.BUSYBOX_IMAGE} if recorded.get("real_nodes") else {}),
                **{f"pid.{name}": str(pid) for name, pid in state.get("processes", {}).items()},
                **{f"startup.{phase}": f"{seconds:.3f}" for phase, seconds in recorded.get("startup", {}).items()},
                **{f"timeline.{event}": f"{at:.3f}" for event, at in state.get("timeline", {}).items()},
            },
        )

    # --- start ------------------------------------------------------------------------------------------------

    def start(self) -> ClusterInfo:
        """Attach to the running cluster of this state directory, or build and start a new one."""
        self.layout.root.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.layout.lock)):
            running = self.info()
            if running is not None:
                self._check_same_driver(running)
                return running
            builder = Builder(
                self.config.assets, self.config.cache_dir, timeout=self.config.timeouts.build, echo=self.echo
            )
            binaries = builder.ensure_all()
            real_binaries = builder.ensure_real_node() if self.config.real_node else None
            self._stop_locked()  # a half-started or crashed cluster from an earlier run
            timings = Stopwatch()
            self._reset_state_dir()
            plan = control_plane.render(
                self.layout,
                binaries,
                control_plane.Ports.allocate(),
                kwok_stages=self.config.assets / "kwok-stages.yaml",
                ready_timeout=self.config.timeouts.apiserver_ready,
                stop_timeout=self.config.timeouts.process_stop,
                owner_pid=self.config.owner_pid,
                cleanup_paths=[drivers.runtime_dir(self.layout)],
            )
            plan.write(self.layout.plan)
            timings.lap("render")
            self._spawn_supervisor()
            try:
                self._await_running()
                timings.lap("control_plane")
                nodes = self._register_nodes()
                timings.lap("nodes_ready")
                endpoints = self._start_drivers((*nodes, *SET_ASIDE_NODES), binaries)
                timings.lap("drivers_ready")
                if real_binaries is not None:
                    self._start_real_node(real_binaries)
                    timings.lap("real_node_ready")
                    endpoints += self._start_drivers((real_node.REAL_NODE,), binaries, in_pods=True)
                    timings.lap("real_node_driver_ready")
                if self.config.metrics != "none":
                    self._start_metrics(binaries.metrics_server)
                    timings.lap("metrics_available")
                self._await_lifecycle_taints_lifted()
                timings.lap("nodes_untainted")
                check_cluster(self.layout.kubeconfig)  # the same preflight any cluster passes
                timings.lap("preflight")
            except (ApiException, HTTPError) as error:
                self._stop_locked()
                cause = f"{error.status} {status_message(error)}" if isinstance(error, ApiException) else str(error)
                raise BackendError(f"start local cluster: register nodes and drivers: {cause}") from None
            except BaseException:
                self._stop_locked()
                raise
            recorded = {
                "nodes": list(nodes),
                "real_nodes": [real_node.REAL_NODE] if real_binaries is not None else [],
                "startup": timings.laps,
                "metrics": self.config.metrics if self.config.metrics != "none" else None,
                "profile": str(self.config.profile),
                "profile_digest": profile_hash(self.config.profile),
                "drivers": [
                    {"driver": e.driver, "node": e.node, "kubelet_root": str(e.kubelet_root), "cdi_dir": str(e.cdi_dir)}
                    for e in endpoints
                ],
            }
            (self.layout.root / "cluster.json").write_text(json.dumps(recorded))
            info = self.info()
            if info is None:
                raise BackendError(f"start local cluster: supervisor stopped right after start-up: {self._reason()}")
            return info

    def _start_real_node(self, binaries: RealNodeBinaries) -> None:
        """Start containerd and the kubelet of the real node and wait until the node is Ready."""
        node = real_node.RealNode(self.layout, binaries, binaries.pause, real_node.primary_address())
        node.record_host()  # before anything changes the host, so a failed start can be undone
        state = self._state() or {}
        node.write_files(
            CertificateAuthority.load(self.layout.pki / "ca.crt", self.layout.pki / "ca.key"),
            str(state["server"]),
        )
        self._add_processes([node.containerd_process()])
        waits.until(
            lambda: _listening(node.containerd_socket),
            bool,
            timeout=real_node.CONTAINERD_READY,
            what=f"containerd of {real_node.REAL_NODE} answering on {node.containerd_socket}",
            describe=lambda _up: f"not yet; last lines of its log: {self._log_tail('containerd')}",
            max_interval=STARTUP_POLL_CAP,
        )
        node.import_images()
        self._add_processes([node.kubelet_process()])
        with client_from_kubeconfig(self.layout.kubeconfig) as api_client:
            core = client.CoreV1Api(api_client)

            def ready() -> str:
                found = core.list_node(field_selector=f"metadata.name={real_node.REAL_NODE}", _request_timeout=5)
                conditions = [c for n in found.items for c in n.status.conditions or [] if c.type == "Ready"]
                return f"{conditions[0].status}: {conditions[0].message}" if conditions else "not registered"

            try:
                waits.until(
                    ready,
                    lambda seen: seen.startswith("True"),
                    timeout=self.config.timeouts.node_ready,
                    what=f"real node {real_node.REAL_NODE} Ready",
                    describe=str,
                    retry_on=(ApiException, HTTPError),
                    max_interval=STARTUP_POLL_CAP,
                )
            except WaitTimeout as error:
                raise BackendError(f"start local cluster: {error}; kubelet log: {self._log_tail('kubelet')}") from None
            self._start_device_plugin(node, core)

    def _start_device_plugin(self, node: real_node.RealNode, core: client.CoreV1Api) -> None:
        """Start the reference device plugin next to the kubelet; wait until the Node's allocatable shows it."""
        self._add_processes([node.device_plugin_process()])
        resource, wanted = real_node.DEVICE_PLUGIN_RESOURCE, str(real_node.DEVICE_PLUGIN_DEVICES)

        def allocatable() -> str | None:
            found = core.list_node(field_selector=f"metadata.name={real_node.REAL_NODE}", _request_timeout=5)
            exited = (self._state() or {}).get("exited", {})
            if "device-plugin" in exited:
                raise BackendError(
                    f"start local cluster: the device plugin exited with code {exited['device-plugin']}; last lines "
                    f"of its log: {self._log_tail('device-plugin')}"
                )
            return next(((n.status.allocatable or {}).get(resource) for n in found.items), None)

        try:
            waits.until(
                allocatable,
                lambda seen: seen == wanted,
                timeout=real_node.DEVICE_PLUGIN_READY,
                what=f"real node {real_node.REAL_NODE} allocatable {resource}={wanted} from the device plugin",
                describe=lambda seen: f"allocatable {resource}: {seen}",
                retry_on=(ApiException, HTTPError),
                max_interval=STARTUP_POLL_CAP,
            )
        except WaitTimeout as error:
            raise BackendError(
                f"start local cluster: {error}; device plugin log: {self._log_tail('device-plugin')}; kubelet log: "
                f"{self._log_tail('kubelet')}"
            ) from None

    def _check_same_driver(self, running: ClusterInfo) -> None:
        """A running cluster serves one driver: attaching with another profile would certify the wrong driver."""
        wanted = profile_hash(self.config.profile)
        if running.details.get("profile.digest") != wanted:
            raise UsageError(
                f"the local cluster in {self.layout.root} runs the driver of {running.details.get('profile')}, not "
                f"{self.config.profile}; stop it first (dra-conformance cluster down) or use another state directory"
            )

    def _start_drivers(
        self, nodes: tuple[str, ...], binaries: Binaries, *, in_pods: bool = False
    ) -> list[DriverEndpoint]:
        """Start the driver on `nodes`: as supervised host processes, or (`in_pods`) as DaemonSet pods."""
        profile = load_profile(self.config.profile)
        with client_from_kubeconfig(self.layout.kubeconfig) as api_client:
            deployment = drivers.deploy(
                api_client,
                self.layout,
                nodes,
                profile,
                vars(binaries),
                server=str(api_client.configuration.host),
                ca_pem=(self.layout.pki / "ca.crt").read_bytes(),
            )
            if in_pods:
                self._run_in_pods(api_client, profile, deployment)
                return deployment.endpoints
            builds = deployment.builds
            recorded = {node: {b: asdict(spec) for b, spec in specs.items()} for node, specs in builds.items()}
            drivers.builds_path(self.layout).write_text(json.dumps(recorded, indent=2))
            self._add_processes(deployment.processes)
            for endpoint in deployment.endpoints:
                self._await_driver(api_client, profile, endpoint, self._exit_of(profile, endpoint.node))
        return deployment.endpoints

    def _run_in_pods(
        self, api_client: client.ApiClient, profile: DriverProfile, deployment: drivers.DriverDeployment
    ) -> None:
        """Run the driver on each (real) node as a DaemonSet pod the kubelet owns; wait for each to register."""
        account = profile.identity.service_account
        apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
        for endpoint, spec in zip(deployment.endpoints, deployment.processes, strict=True):
            writable = (*deployment.directories[endpoint.node], endpoint.plugins_dir)
            body = driver_daemonset.manifest(spec, endpoint.node, account.namespace, account.name, writable)
            apps.create_namespaced_daemon_set(account.namespace, body)

            def failed(node: str = endpoint.node) -> str | None:
                reason = driver_daemonset.failure(core, account.namespace, node)
                return f"driver {profile.driver} on {node}: its pod {reason}" if reason else None

            def log(node: str = endpoint.node) -> str:
                pods = driver_daemonset.pods_of(core, account.namespace, node)
                return driver_daemonset.log_tail(core, pods[-1]) if pods else "(no pod yet)"

            self._await_driver(api_client, profile, endpoint, failed, log)

    def _exit_of(self, profile: DriverProfile, node: str) -> Callable[[], str | None]:
        """Why the supervised driver process on `node` is gone (its exit code and log), or None while it runs."""
        name = drivers.process_name(node)

        def exited() -> str | None:
            codes = (self._state() or {}).get("exited", {})
            if name not in codes:
                return None
            return (
                f"driver {profile.driver} on {node} exited with code {codes[name]} at start; last lines "
                f"of {self.layout.component_log(name)}: {self._log_tail(name)}"
            )

        return exited

    def _await_driver(
        self,
        api_client: client.ApiClient,
        profile: DriverProfile,
        endpoint: DriverEndpoint,
        failed: Callable[[], str | None],
        log_tail: Callable[[], str] | None = None,
    ) -> None:
        """Wait until the driver on the node registered a socket and published a complete pool for it.

        `failed` says why the driver will not come up (it exited, its pod crash-loops), which ends the wait at once;
        `log_tail` gives its last log lines for a timeout (by default, those of its supervised process).
        """
        name = drivers.process_name(endpoint.node)
        log_tail = log_tail or (lambda: self._log_tail(name))

        def observe() -> tuple[bool, dict[str, PoolState]]:
            reason = failed()
            if reason is not None:
                raise DriverStartError(reason)
            return _listening(endpoint.registration_socket), node_pools(api_client, profile.driver, endpoint.node)

        def describe(seen: tuple[bool, dict[str, PoolState]]) -> str:
            registered, pools = seen
            published = "; ".join(pool.describe() for pool in pools.values()) or "no ResourceSlice for this node"
            socket = "a registration socket" if registered else f"no socket answering in {endpoint.registrar_dir}"
            return f"{socket}; {published}"

        deadline = profile.timeouts.factor("driver_ready") * self.config.timeouts.driver_ready
        try:
            waits.until(
                observe,
                lambda seen: seen[0] and bool(seen[1]) and all(pool.complete for pool in seen[1].values()),
                timeout=deadline,
                what=f"driver {profile.driver} on {endpoint.node} registered with a complete pool",
                describe=describe,
                retry_on=(ApiException, HTTPError),
                max_interval=STARTUP_POLL_CAP,
            )
        except WaitTimeout as error:
            raise DriverStartError(f"{error}; last lines of its log: {log_tail()}") from None

    def kill_driver(self, node: str) -> int:
        """SIGKILL the driver on `node`; return its exit status once the supervisor has recorded the exit."""
        name = drivers.process_name(node)
        processes = (self._state() or {}).get("processes", {})
        if name not in processes:
            raise BackendError(self._not_supervised(node))
        pid = int(processes[name])
        # Noted before the kill, so the run counts the exit as the suite's doing (`driver_exits`).
        with self._kill_log().open("a") as log:
            log.write(json.dumps({"name": name, "at": time.time()}) + "\n")
        with contextlib.suppress(ProcessLookupError):  # it exited on its own; the supervisor has recorded it
            os.kill(pid, signal.SIGKILL)
        exited = waits.until(
            lambda: (self._state() or {}).get("exited", {}),
            lambda seen: name in seen,
            timeout=self.config.timeouts.process_stop,
            what=f"supervisor seeing driver {name} (pid {pid}) exit after SIGKILL",
            describe=str,
            max_interval=STARTUP_POLL_CAP,
        )
        return int(exited[name])

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
        builds = json.loads(drivers.builds_path(self.layout).read_text())
        if node not in builds:
            raise BackendError(self._not_supervised(node))
        chosen = build or drivers.CURRENT_BUILD
        if chosen not in builds.get(node, {}):
            raise UsageError(
                f"{self.config.profile}: the driver has no build {chosen!r} (run.versions names: "
                f"{sorted(set(builds.get(node, {})) - {drivers.CURRENT_BUILD}) or 'none'})"
            )
        self._add_processes([control_plane.ProcessSpec(**builds[node][chosen])])
        info = self.info()
        endpoint = next((e for e in info.drivers if e.node == node), None) if info else None
        if endpoint is None:
            raise BackendError(f"start driver on {node}: the local cluster is not running or has no driver there")
        with client_from_kubeconfig(self.layout.kubeconfig) as api_client:
            profile = load_profile(self.config.profile)
            self._await_driver(api_client, profile, endpoint, self._exit_of(profile, node))

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
            exits.append(DriverExit(node, int(entry["code"]), float(entry["at"]), ours, self._log_tail(name)))
        return exits

    def _log_tail(self, name: str) -> str:
        log = self.layout.component_log(name)
        lines = log.read_text(errors="replace").splitlines()[-DRIVER_LOG_TAIL_LINES:] if log.exists() else []
        return " | ".join(line.strip() for line in lines if line.strip()) or "(empty)"

    def _start_metrics(self, metrics_server: Path) -> None:
        port = control_plane.free_port()
        versions: tuple[str, ...]
        if self.config.metrics == "metrics-server":
            spec, ca_bundle = metrics.metrics_server_process(self.layout, metrics_server, port)
            versions, namespace, service = metrics.METRICS_SERVER_VERSIONS, "metrics-server", "metrics-server"
        else:
            spec, ca_bundle = metrics.process(self.layout, port, self.metrics_control_socket)
            versions, namespace, service = metrics.VERSIONS, metrics.NAMESPACE, metrics.SERVICE
        self._add_processes([spec])
        with client_from_kubeconfig(self.layout.kubeconfig) as api_client:
            metrics.register(api_client, port, ca_bundle, versions, namespace, service)
            waits.until(
                lambda: {v: s for v, s in metrics.available(api_client).items() if v.split(".")[0] in versions},
                lambda state: all(value.startswith("True") for value in state.values()),
                timeout=self.config.timeouts.metrics_available,
                what=f"metrics.k8s.io APIServices {versions} Available",
                describe=str,
                retry_on=(ApiException, HTTPError),
                max_interval=STARTUP_POLL_CAP,
            )
            with metrics_api.suite_client(api_client) as reader:
                metrics_api.wait_answering(reader, versions, self.config.timeouts.metrics_available)

    @property
    def metrics_control_socket(self) -> Path:
        """Control socket of the reference metrics adapter (faults, requests served)."""
        return drivers.runtime_dir(self.layout) / "fake-metrics" / "control.sock"

    def _add_processes(self, specs: list[control_plane.ProcessSpec]) -> None:
        """Have the running supervisor start more (non-critical) processes."""
        existing = json.loads(self.layout.extra_processes.read_text()) if self.layout.extra_processes.exists() else []
        names = {spec.name for spec in specs}
        merged = [item for item in existing if item["name"] not in names] + [asdict(spec) for spec in specs]
        self.layout.extra_processes.write_text(json.dumps(merged, indent=2))
        state = self._state() or {}
        earlier = state.get("processes", {})  # pids of earlier runs of the same names (a restart)
        os.kill(int(state["supervisor_pid"]), signal.SIGUSR1)

        def started() -> set[str]:
            # Started means a new pid: a process that already exited again was started too (its caller reports
            # why it exited), while the record of an earlier run of the same name is not this start.
            current = (self._state() or {}).get("processes", {})
            return {name for name in names if name in current and current[name] != earlier.get(name)}

        waits.until(
            started,
            lambda launched: launched == names,
            timeout=self.config.timeouts.driver_ready,
            what=f"supervisor started {sorted(names)}",
            describe=lambda launched: f"started: {sorted(launched)}",
            max_interval=STARTUP_POLL_CAP,
        )

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
            self.layout.root / "cluster.json",
        ):
            path.unlink(missing_ok=True)
        self.layout.logs.mkdir(parents=True)

    def _spawn_supervisor(self) -> None:
        with self.layout.component_log("supervisor").open("ab") as log:
            subprocess.Popen(
                [sys.executable, "-m", "dra_conformance.backends.local.supervisor", str(self.layout.root)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C at the terminal reaches pytest, which then stops us in order
                close_fds=True,
            )

    def _reason(self) -> str:
        state = self._state() or {}
        reason = str(state.get("reason") or "no reason recorded")
        for name in (
            "kube-apiserver",
            "etcd",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
            "supervisor",
        ):
            if name in reason or name == "supervisor":
                log = self.layout.component_log(name)
                if log.exists():
                    tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
                    return reason + f"\n--- last lines of {log}:\n" + "\n".join(tail)
        return reason

    def _await_running(self) -> None:
        def phase() -> str:
            state = self._state()
            if state is None:
                return "not started"
            if state.get("phase") in ("failed", "stopped"):
                raise BackendError(f"start local cluster: {self._reason()}")
            return str(state.get("phase"))

        # The supervisor itself enforces apiserver_ready before starting the rest; this covers the whole sequence.
        deadline = self.config.timeouts.apiserver_ready + self.config.timeouts.etcd_ready
        try:
            waits.until(
                phase,
                lambda p: p == "running",
                timeout=deadline,
                what="local control plane running",
                describe=str,
                max_interval=STARTUP_POLL_CAP,
            )
        except WaitTimeout as error:
            raise BackendError(f"start local cluster: {error}; {self._reason()}") from None

    def _register_nodes(self) -> tuple[str, ...]:
        """Create the fake nodes and the tainted set-aside nodes; return the names of the fake nodes."""
        regular = self.node_names()
        names = (*regular, *SET_ASIDE_NODES)
        with client_from_kubeconfig(self.layout.kubeconfig) as api_client:
            core = client.CoreV1Api(api_client)
            for index, name in enumerate(names):
                manifest = self._node_manifest(index, name)
                if name in SET_ASIDE_NODES:
                    manifest["spec"] = {"taints": [SET_ASIDE_TAINT]}
                core.create_node(manifest)

            waits.until(
                lambda: ready_node_names(core, NODE_LABEL),
                lambda ready: ready >= set(names),
                timeout=self.config.timeouts.node_ready,
                what=f"fake nodes {', '.join(names)} Ready",
                describe=lambda r: f"ready: {sorted(r)}",
                retry_on=(ApiException, HTTPError),
                max_interval=STARTUP_POLL_CAP,
            )
        return regular

    def _await_lifecycle_taints_lifted(self) -> None:
        """Wait until no node carries the not-ready taint new nodes get: a test starting earlier sees no usable node.

        Checked last, so the controller-manager's start-up overlaps with the drivers'.
        """
        with client_from_kubeconfig(self.layout.kubeconfig) as api_client:
            core = client.CoreV1Api(api_client)
            waits.until(
                lambda: lifecycle_tainted(core),
                lambda tainted: not tainted,
                timeout=self.config.timeouts.node_ready,
                what="the node lifecycle controller lifting the not-ready taint of every node",
                describe=lambda tainted: f"still tainted: {tainted}",
                retry_on=(ApiException, HTTPError),
                max_interval=STARTUP_POLL_CAP,
            )

    @staticmethod
    def _node_manifest(index: int, name: str) -> dict[str, Any]:
        # Status set at creation is kept for Nodes (kubelets register this way), and kwok's node stage keeps
        # addresses that are already present: so each node keeps its own loopback address.
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {
                    KWOK_NODE_ANNOTATION: "fake",
                    # Where kwok serves this node's emulated kubelet resource metrics (metrics-server follows it).
                    "metrics.k8s.io/resource-metrics-path": f"/metrics/nodes/{name}/metrics/resource",
                },
                "labels": {
                    NODE_LABEL: "true",
                    "type": "kwok",
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                },
            },
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": control_plane.node_address(index)},
                    {"type": "Hostname", "address": name},
                    # kwok serves every node's kubelet endpoints on one loopback listener; metrics-server reaches
                    # it with --kubelet-preferred-address-types=ExternalDNS.
                    {"type": "ExternalDNS", "address": "localhost"},
                ],
                "capacity": NODE_CAPACITY,
                "allocatable": NODE_CAPACITY,
            },
        }

    # --- stop -------------------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the supervisor of this state directory (and with it every component); no-op if none runs."""
        self.layout.root.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.layout.lock)):
            self._stop_locked()

    def release(self, owner_pid: int) -> None:
        """Stop the cluster if `owner_pid` started it (its plan names that owner); otherwise leave it running."""
        self.layout.root.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.layout.lock)):
            try:
                owner = json.loads(self.layout.plan.read_text()).get("owner_pid")
            except (OSError, ValueError):
                return
            if owner == owner_pid:
                self._stop_locked()

    def _stop_locked(self) -> None:
        try:
            self._stop_supervisor()
        finally:
            # The supervisor tears the real node down itself; after a killed supervisor, this does it.
            problems = real_node.teardown(self.layout)
        if problems:
            raise BackendError(f"stop local cluster: real node left behind: {'; '.join(problems)}")

    def _stop_supervisor(self) -> None:
        state = self._state()
        if state is None or not self._supervisor_alive(state):
            return
        pid = int(state["supervisor_pid"])
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        try:
            os.kill(pid, signal.SIGTERM)
            # Children get process_stop each, in two groups; one more for the supervisor's own bookkeeping.
            limit = 3 * self.config.timeouts.process_stop
            readable, _, _ = select.select([pidfd], [], [], limit)
            if not readable:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)  # its children die with it (PR_SET_PDEATHSIG)
                raise BackendError(f"stop local cluster: supervisor {pid} did not exit within {limit:g}s; killed")
        finally:
            os.close(pidfd)


def _listening(path: Path) -> bool:
    """Whether a process accepts connections on the unix socket `path` (a killed driver leaves a dead file behind)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True
