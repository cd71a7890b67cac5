"""Starting reference driver instances: as a new interpreter each, or forked from a launcher that imported it once.

A private reference driver instance started as `python -m fake_dra` spends about a second of CPU importing the
Kubernetes client before it does anything; checks start dozens of them per run. `DriverLauncher` starts
`python -m fake_dra.launcher` once per test process, which imports the driver once and forks an instance per
request (see that module for the protocol). Both kinds of start give a `DriverChild`, which the caller polls,
signals and waits on the same way.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Protocol

from dra_conformance.errors import DriverError
from dra_conformance.kube import waits
from dra_conformance.processes import die_with

# The module a reference driver instance runs; an argv that starts with `python -m` it can come from the launcher.
DRIVER_MODULE = "fake_dra"
LAUNCHER_MODULE = "fake_dra.launcher"
# The launcher imports the driver (a second or two, more on a loaded machine) before it listens.
LAUNCHER_READY_TIMEOUT = 60.0
# The launcher answers a request with the child's pid right after fork().
LAUNCH_ANSWER_TIMEOUT = 15.0
# The launcher reports a child's exit as soon as the kernel tells it (SIGCHLD).
EXIT_POLL_INTERVAL = 0.05


class DriverChild(Protocol):
    """A running driver instance: the subset of `subprocess.Popen` its owner uses."""

    @property
    def pid(self) -> int:
        """The process id."""
        ...

    def poll(self) -> int | None:
        """The exit code once the process has exited, else None."""
        ...

    def send_signal(self, signum: int) -> None:
        """Signal the process."""
        ...

    def wait(self, timeout: float | None = None) -> int:
        """The exit code; `subprocess.TimeoutExpired` once `timeout` passes first."""
        ...

    def terminate(self) -> None:
        """SIGTERM."""
        ...

    def kill(self) -> None:
        """SIGKILL."""
        ...


class ForkedChild:
    """An instance forked by the launcher; its exit code arrives on the request's connection."""

    def __init__(self, pid: int, connection: socket.socket, unread: bytes = b"") -> None:
        """Track the child `pid`, whose launcher reports its exit on `connection` (`unread`: received already)."""
        self._pid = pid
        self._connection = connection
        self._buffer = unread
        self.returncode: int | None = None

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self._pid

    def _read(self, timeout: float) -> None:
        if self.returncode is not None:
            return
        if b"\n" not in self._buffer:
            readable, _, _ = select.select([self._connection], [], [], max(timeout, 0.0))
            if not readable:
                return
            chunk = self._connection.recv(4096)
            if not chunk:  # the launcher died, and its children with it (SIGKILL)
                self.returncode = -signal.SIGKILL
            self._buffer += chunk
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            message = json.loads(line)
            if "exit" in message:
                self.returncode = int(message["exit"])
        if self.returncode is not None:
            self._connection.close()

    def poll(self) -> int | None:
        """The exit code once the child has exited, else None."""
        self._read(0.0)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        """Signal the child, unless it has already exited (its pid may belong to another process by now)."""
        if self.poll() is None:
            os.kill(self._pid, signum)

    def terminate(self) -> None:
        """SIGTERM, as `Popen.terminate`."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL, as `Popen.kill`."""
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit code; `subprocess.TimeoutExpired` after `timeout` seconds, as Popen raises."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = EXIT_POLL_INTERVAL if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(f"driver pid {self._pid}", timeout or 0.0)
            self._read(min(left, 1.0))
        assert self.returncode is not None
        return self.returncode


class DriverLauncher:
    """One `fake_dra.launcher` for the test process, started on first use; `close` stops it and its children."""

    def __init__(self, directory: Path | None = None) -> None:
        """Nothing starts until the first `launch` (or `start`); its socket and log go in `directory` (short).

        Without one, a new temporary directory holds them.
        """
        self._process: subprocess.Popen[bytes] | None = None
        self._chosen = directory
        self._directory: Path | None = None

    @property
    def _socket(self) -> Path:
        assert self._directory is not None
        return self._directory / "launcher.sock"

    def start(self) -> None:
        """Start the launcher now (it imports the driver in the background while the caller goes on)."""
        if self._process is not None:
            return
        # Unix socket paths are limited to 107 bytes: a short directory of its own.
        if self._chosen is None:
            self._directory = Path(tempfile.mkdtemp(prefix="dra-launch-"))
        else:
            self._chosen.mkdir(parents=True, exist_ok=True)
            self._directory = self._chosen
        log = (self._directory / "launcher.log").open("ab")
        with log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", LAUNCHER_MODULE, f"--socket={self._socket}"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with(os.getpid()),
            )

    def _connect(self) -> socket.socket:
        assert self._process is not None
        process = self._process

        def connected() -> socket.socket | None:
            if process.poll() is not None:
                log = (self._socket.parent / "launcher.log").read_text(errors="replace")[-2000:]
                raise DriverError(f"driver launcher exited with code {process.returncode}: {log}")
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                connection.connect(str(self._socket))
            except OSError:
                connection.close()
                return None
            return connection

        found = waits.until(
            connected,
            lambda connection: connection is not None,
            timeout=LAUNCHER_READY_TIMEOUT,
            what=f"driver launcher listening on {self._socket}",
            max_interval=EXIT_POLL_INTERVAL,
        )
        assert found is not None
        return found

    def launch(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> ForkedChild:
        """Fork a driver instance with the driver's own options `argv`, its output appended to `log`.

        `env` is added to the launcher's environment (which is its starter's) in the instance.
        """
        self.start()
        connection = self._connect()
        connection.sendall(json.dumps({"argv": argv, "log": str(log), "env": env or {}}).encode() + b"\n")
        deadline = time.monotonic() + LAUNCH_ANSWER_TIMEOUT
        answer = b""
        while b"\n" not in answer and time.monotonic() < deadline:
            readable, _, _ = select.select([connection], [], [], deadline - time.monotonic())
            chunk = connection.recv(4096) if readable else b""
            if not chunk:
                break
            answer += chunk
        line = answer.split(b"\n", 1)[0]
        try:
            message = json.loads(line)
            pid = int(message["pid"])
        except (ValueError, KeyError, TypeError):
            connection.close()
            raise DriverError(f"driver launcher answered {answer[:300]!r} to a launch request") from None
        return ForkedChild(pid, connection, answer.split(b"\n", 1)[1] if b"\n" in answer else b"")

    def close(self) -> None:
        """Stop the launcher; its children die with it (SIGKILL), so callers stop theirs first."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        if self._directory is not None:
            for name in ("launcher.sock", "launcher.log"):
                (self._directory / name).unlink(missing_ok=True)
            self._directory.rmdir()
            self._directory = None


def launches_driver(argv: list[str]) -> bool:
    """Whether `argv` runs the reference driver in this interpreter, so the launcher can start it instead."""
    return argv[:3] == [sys.executable, "-m", DRIVER_MODULE]
