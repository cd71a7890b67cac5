"""Driving the reference fake DRA driver: its control socket (faults, call log) and how to launch it."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.dynamic import DynamicClient

from dra_conformance.driver.identity import DriverIdentity
from dra_conformance.errors import DriverError
from dra_conformance.kube import kinds, waits
from dra_conformance.kube.builders import RESOURCE_API
from dra_conformance.kube.leaks import driver_leftovers, slice_leftovers
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.processes import dying_with_this_process
from dra_conformance.timeouts import Timeouts
from dra_wire.unix_http import unix_json_request

# Control requests are local; a fault change republishes a slice, one API round trip.
CONTROL_TIMEOUT = 15.0
# A private driver is polled on its local control socket while it starts (~1 s): a probe costs a connect() that
# fails at once, so a short cap notices it up within 50 ms, where the default backoff cap (1 s) lost up to a second
# per start, and scenario checks start dozens of private drivers.
CONTROL_POLL_CAP = 0.05


class FakeDriverControl:
    """Switches faults and reads the call log of one fake driver process."""

    def __init__(self, endpoint: DriverEndpoint) -> None:
        """Control the driver at `endpoint`."""
        self.endpoint = endpoint

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            return unix_json_request(self.endpoint.control_socket, method, path, body, timeout=CONTROL_TIMEOUT)
        except (OSError, ValueError) as error:
            raise DriverError(f"fake driver on {self.endpoint.node}: {method} {path}: {error}") from None

    def healthz(self) -> dict[str, Any]:
        """Driver name, node and current pool generation."""
        return self._request("GET", "/healthz")

    def faults(self) -> list[dict[str, Any]]:
        """The active faults."""
        return list(self._request("GET", "/faults")["faults"])

    def set_faults(self, faults: list[dict[str, Any]]) -> Callable[[], None]:
        """Replace the active faults; returns an undo that restores the previous ones."""
        previous = self.faults()
        self._request("PUT", "/faults", {"faults": faults})
        return lambda: self.restore(previous)

    def restore(self, faults: list[dict[str, Any]]) -> None:
        """Set `faults` again (used by undo callables)."""
        self._request("PUT", "/faults", {"faults": faults})

    def crash(self) -> None:
        """Make the process exit at once (the `crash` fault)."""
        self._request("PUT", "/faults", {"faults": [{"mode": "crash"}]})

    def calls(self) -> list[dict[str, Any]]:
        """Every gRPC call served, oldest first (copies)."""
        return list(self._request("GET", "/calls")["calls"])

    def prepared(self) -> dict[str, Any]:
        """Prepared claims by UID."""
        return dict(self._request("GET", "/prepared")["claims"])

    def attachments(self) -> list[dict[str, Any]]:
        """The gpu-fabric profile's attaches (claim UID, device, outcome, startedAt/finishedAt), oldest first."""
        return list(self._request("GET", "/attachments")["attachments"])


# The reference driver's binary (its Go build), as the backend that built it names it in `ClusterInfo.details`.
GO_BUILD_DETAIL = "reference_driver.go_binary"


def reference_program(details: dict[str, str]) -> tuple[str, ...]:
    """What private reference driver instances run: the binary the backend built."""
    go_binary = details.get(GO_BUILD_DETAIL)
    if not go_binary:
        raise DriverError(
            f"the cluster names no reference driver binary ({GO_BUILD_DETAIL}); restart it to build and record one"
        )
    return (go_binary,)


def driver_argv(
    endpoint: DriverEndpoint,
    *,
    kubeconfig: Path,
    state_dir: Path,
    cdi_dir: Path,
    devices: int = 4,
    profile: str = "gpu",
    delete_slices_on_exit: bool = False,
    behaviour: tuple[str, ...] = (),
    program: tuple[str, ...],
) -> list[str]:
    """The command line of one fake driver process: `program` (the reference driver's binary) and its options.

    `behaviour` adds the profile's behaviour options.
    """
    argv = [
        *program,
        f"--driver-name={endpoint.driver}",
        f"--node-name={endpoint.node}",
        f"--kubelet-root={endpoint.kubelet_root}",
        f"--cdi-dir={cdi_dir}",
        f"--state-dir={state_dir}",
        f"--kubeconfig={kubeconfig}",
        f"--devices={devices}",
        f"--profile={profile}",
    ]
    if delete_slices_on_exit:
        argv.append("--delete-slices-on-exit")
    return [*argv, *behaviour]


# Options of the reference driver that choose a behaviour (a variant the contract allows, or a broken mode), not
# where it runs: private instances of the driver under test carry the ones its profile gives it.
BEHAVIOUR_OPTIONS = (
    "--health-service",
    "--status-conditions",
    "--keep-status-after-unprepare",
    "--refuse-devices-held-by-other-claims",
    "--unknown-claim-answer",
    "--device-id-format",
    "--broken-mode",
    "--api-qps",
    "--api-burst",
)


def behaviour_args(args: tuple[str, ...]) -> tuple[str, ...]:
    """The behaviour options among a profile's `run.args` (`--name=value` or a bare flag)."""
    return tuple(arg for arg in args if arg.split("=", 1)[0] in BEHAVIOUR_OPTIONS)


class FakeDriverProcess:
    """One fake driver process owned by the caller (a test); it dies with its parent (PR_SET_PDEATHSIG)."""

    def __init__(self, endpoint: DriverEndpoint, argv: list[str], log: Path) -> None:
        """Run `argv` for `endpoint`, logging to `log`."""
        self.endpoint = endpoint
        self.argv = argv
        self.log = log
        self.control = FakeDriverControl(endpoint)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def exit_code(self) -> int | None:
        """The exit code once the process has exited, else None."""
        return None if self._process is None else self._process.poll()

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the driver's log, for failure messages."""
        if not self.log.exists():
            return "(no log)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def _spawn(self) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as log:
            # The suite's process runs grpcio's threads: no preexec_fn (see DIE_WITH_PARENT).
            return subprocess.Popen(
                dying_with_this_process(self.argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )

    def start(self, timeout: float) -> None:
        """Start the process and wait until its control socket answers."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._process = self._spawn()

        def answer() -> dict[str, Any] | None:
            if self.exit_code is not None:
                raise DriverError(
                    f"fake driver on {self.endpoint.node} exited with code {self.exit_code}:\n{self.log_tail()}"
                )
            try:
                return self.control.healthz()
            except DriverError:
                return None

        waits.until(
            answer,
            lambda reply: reply is not None,
            timeout=timeout,
            what=f"fake driver {self.endpoint.driver} on {self.endpoint.node} answering",
            describe=lambda _reply: self.log_tail(5),
            max_interval=CONTROL_POLL_CAP,
        )

    def stop(self, timeout: float) -> int | None:
        """SIGTERM, wait up to `timeout`, then SIGKILL; returns the exit code."""
        if self._process is None:
            return None
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                return self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._process.send_signal(signal.SIGKILL)
        return self._process.wait()

    def wait_exit(self, timeout: float) -> int:
        """Wait for the process to exit on its own (e.g. after a crash fault) and return its exit code."""
        assert self._process is not None, "not started"
        return self._process.wait(timeout)


@dataclass
class PrivateDriver:
    """A fake driver instance that only one test uses."""

    name: str
    processes: dict[str, FakeDriverProcess]

    def on(self, node: str) -> FakeDriverProcess:
        """The process serving `node`."""
        return self.processes[node]


class PrivateDrivers:
    """Starts reference driver instances that only one test uses, each with a driver name of its own.

    Faults then stay private to the test. The processes run on this machine, so only a backend with fake nodes
    and local processes can offer them. `cleanup` stops them and returns what they left behind.
    """

    def __init__(
        self,
        dynamic_client: DynamicClient,
        api_client: client.ApiClient,
        tracker: ResourceTracker,
        namespace: str,
        default_nodes: tuple[str, ...],
        timeouts: Timeouts,
        *,
        program: tuple[str, ...],
        behaviour: tuple[str, ...] = (),
    ) -> None:
        """Create identities through `tracker` in `namespace`; start on `default_nodes` unless told otherwise.

        `behaviour`: the driver under test's behaviour options (`behaviour_args`), which every instance gets, so
        the checks that run on private instances judge the driver as its profile runs it. `program`: the reference
        driver's binary (`reference_program`).
        """
        self.behaviour, self.program = behaviour, program
        self.dynamic_client, self.api_client, self.tracker = dynamic_client, api_client, tracker
        self.namespace, self.default_nodes, self.timeouts = namespace, default_nodes, timeouts
        # Socket paths are limited to 107 bytes, so the kubelet roots live in a short temp directory.
        self.scratch = Path(tempfile.mkdtemp(prefix="dra-"))
        self.started: list[FakeDriverProcess] = []

    def start(
        self,
        nodes: tuple[str, ...] | None = None,
        *,
        profile: str = "gpu",
        devices: int = 2,
        args: tuple[str, ...] = (),
    ) -> PrivateDriver:
        """Start one instance per node (default: the first node) and wait until each answers.

        `args`: further options of the reference driver for this instance (after the profile's behaviour options).
        """
        driver = f"{profile}-{self.namespace.rsplit('-', 1)[1]}.fake-dra.example.com"
        identity = DriverIdentity(self.tracker, self.api_client, self.namespace, driver)
        processes = {}
        for node in nodes or self.default_nodes:
            endpoint = DriverEndpoint(driver, node, self.scratch / node / "kubelet", self.scratch / node / "cdi")
            argv = driver_argv(
                endpoint,
                kubeconfig=identity.kubeconfig_for(node, self.scratch),
                devices=devices,
                profile=profile,
                state_dir=self.scratch / node / "state",
                cdi_dir=self.scratch / node / "cdi",
                delete_slices_on_exit=True,
                behaviour=(*self.behaviour, *args),
                program=self.program,
            )
            process = FakeDriverProcess(endpoint, argv, self.scratch / node / "driver.log")
            self.started.append(process)
            process.start(self.timeouts.driver_ready)
            processes[node] = process
        return PrivateDriver(driver, processes)

    def cleanup(self) -> list[str]:
        """Stop every instance; return claims still prepared, CDI specs and slices they left behind."""
        leaks = []
        slices = kinds.resource(self.dynamic_client, RESOURCE_API, "ResourceSlice")
        stopped: dict[str, list[str]] = {}
        for process in self.started:
            node = process.endpoint.node
            if process.exit_code is None:
                leaks += driver_leftovers(process.control.prepared(), self.scratch / node / "cdi")
                code = process.stop(self.timeouts.driver_stop)
                if code == -signal.SIGKILL:
                    # Killed before it could delete its slice: a slow machine, not a leak of the driver; the
                    # harness removes the slice as the kubelet would, and says so.
                    warnings.warn(
                        f"driver {process.endpoint.driver} on {node} did not stop within {self.timeouts.driver_stop:g}"
                        f" s (--dra-timeout-driver-stop) and was killed; its slices were deleted for it: "
                        f"{process.log_tail(5)}",
                        stacklevel=2,
                    )
                    slices.delete(field_selector=f"spec.driver={process.endpoint.driver},spec.nodeName={node}")
                elif code != 0:
                    stopped.setdefault(process.endpoint.driver, []).append(
                        f"on {node} it stopped with code {code}: {process.log_tail(5)}"
                    )
            else:
                # A driver that died (crash fault) cannot remove its slice; the kubelet would, once it unregistered.
                slices.delete(field_selector=f"spec.driver={process.endpoint.driver},spec.nodeName={node}")
        for driver in {process.endpoint.driver for process in self.started}:
            left = slice_leftovers(self.dynamic_client, driver)
            # Slices outlive a driver that was killed before it could delete them: say so next to them.
            leaks += [*left, *stopped.get(driver, [])] if left else []
        shutil.rmtree(self.scratch, ignore_errors=True)
        return leaks
