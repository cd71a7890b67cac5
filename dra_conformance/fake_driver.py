"""Driving the reference fake DRA driver: its control socket (faults, call log) and how to launch it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dra_conformance import waits
from dra_conformance.backends.base import DriverEndpoint
from dra_conformance.errors import DriverError
from dra_conformance.processes import die_with_parent
from dra_conformance.unix_http import unix_json_request

# The default driver the local backend runs on every node.
DEFAULT_DRIVER = "gpu.fake-dra.example.com"
# Control requests are local; a fault change republishes a slice, one API round trip.
CONTROL_TIMEOUT = 15.0


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


def driver_argv(
    endpoint: DriverEndpoint,
    *,
    kubeconfig: Path,
    state_dir: Path,
    cdi_dir: Path,
    devices: int = 4,
    profile: str = "gpu",
    delete_slices_on_exit: bool = False,
) -> list[str]:
    """The command line of one fake driver process."""
    argv = [
        sys.executable,
        "-m",
        "fake_dra",
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
    return argv


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

    def start(self, timeout: float) -> None:
        """Start the process and wait until its control socket answers."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
            )

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
        )

    def stop(self, timeout: float) -> int | None:
        """SIGTERM, wait up to `timeout`, then SIGKILL; returns the exit code."""
        if self._process is None:
            return None
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        return self._process.returncode

    def wait_exit(self, timeout: float) -> int:
        """Wait for the process to exit on its own (e.g. after a crash fault) and return its exit code."""
        assert self._process is not None, "not started"
        return self._process.wait(timeout)
