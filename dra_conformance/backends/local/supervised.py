"""The backend's side of the supervisor: spawn it, read what it reports, hand it more processes, stop it."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from filelock import FileLock
from kubernetes import client

from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.backends.local.process_plan import ProcessSpec
from dra_conformance.errors import BackendError, WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.client import client_from_kubeconfig
from dra_conformance.timeouts import Timeouts

# Start-up polls run at most this far apart: the warm cluster-up target is 5 s, so a 1 s backoff would cost 20%.
STARTUP_POLL_CAP = 0.1
# Lines of a failed component's log quoted in the error.
LOG_TAIL_LINES = 15
# Lines of a component's log quoted in a one-line error.
SHORT_LOG_TAIL_LINES = 3
# Components whose log explains a failed start, in the order their names are looked for in the stop reason.
CONTROL_PLANE_LOGS = ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok", "supervisor")


class SupervisedCluster:
    """A local cluster as its supervisor runs it, seen from the backend."""

    def __init__(self, layout: ClusterLayout, timeouts: Timeouts) -> None:
        """The cluster of the state directory `layout`."""
        self.layout = layout
        self.timeouts = timeouts

    def state(self) -> dict[str, Any] | None:
        """What the supervisor last reported (phase, pids, exits), or None before its first report."""
        try:
            state: dict[str, Any] = json.loads(self.layout.state.read_text())
        except (OSError, ValueError):
            return None
        return state

    @staticmethod
    def supervisor_alive(state: dict[str, Any]) -> bool:
        """Whether the supervisor that wrote `state` still runs."""
        pid = state.get("supervisor_pid")
        if not isinstance(pid, int):
            return False
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return b"dra_conformance.backends.local.supervisor" in cmdline  # guards against a reused pid

    @property
    def server(self) -> str:
        """The API server's URL, as the supervisor reports it."""
        return str((self.state() or {})["server"])

    @contextlib.contextmanager
    def api(self) -> Iterator[client.ApiClient]:
        """An admin API client of the cluster."""
        with client_from_kubeconfig(self.layout.kubeconfig) as api_client:
            yield api_client

    def log_tail(self, name: str, lines: int = SHORT_LOG_TAIL_LINES) -> str:
        """The last lines of component `name`'s log, on one line."""
        log = self.layout.component_log(name)
        tail = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else []
        return " | ".join(line.strip() for line in tail if line.strip()) or "(empty)"

    def exit_code(self, name: str) -> int | None:
        """The exit code of the non-critical process `name`, or None while it runs."""
        code = (self.state() or {}).get("exited", {}).get(name)
        return None if code is None else int(code)

    def spawn(self, pass_fds: tuple[int, ...] = ()) -> None:
        """Start the supervisor of the plan written in the state directory; it inherits `pass_fds`."""
        with self.layout.component_log("supervisor").open("ab") as log:
            subprocess.Popen(
                [sys.executable, "-m", "dra_conformance.backends.local.supervisor", str(self.layout.root)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C at the terminal reaches pytest, which then stops us in order
                close_fds=True,
                pass_fds=pass_fds,
            )

    def reason(self) -> str:
        """Why the supervisor stopped, with the last lines of the log that explains it."""
        state = self.state() or {}
        reason = str(state.get("reason") or "no reason recorded")
        for name in CONTROL_PLANE_LOGS:
            if name in reason or name == "supervisor":
                log = self.layout.component_log(name)
                if log.exists():
                    tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
                    return reason + f"\n--- last lines of {log}:\n" + "\n".join(tail)
        return reason

    def await_running(self) -> None:
        """Wait until the supervisor started every process of the plan (it probes the API server's readiness)."""
        self._await_state(lambda state: state.get("phase") == "running", "local control plane running")

    def await_timeline(self, event: str) -> None:
        """Wait until the supervisor's timeline records `event` (or it runs every process, which follows it)."""
        self._await_state(
            lambda state: event in state.get("timeline", {}) or state.get("phase") == "running",
            f"local control plane: {event}",
        )

    def _await_state(self, reached: Callable[[dict[str, Any]], bool], what: str) -> None:
        def observe() -> dict[str, Any]:
            state = self.state()
            if state is None:
                return {"phase": "not started"}
            if state.get("phase") in ("failed", "stopped"):
                raise BackendError(f"start local cluster: {self.reason()}")
            return state

        # The supervisor itself enforces apiserver_ready before starting the rest; this covers the whole sequence.
        deadline = self.timeouts.apiserver_ready + self.timeouts.etcd_ready
        try:
            waits.until(
                observe,
                reached,
                timeout=deadline,
                what=what,
                describe=lambda state: f"phase {state.get('phase')}, timeline {sorted(state.get('timeline', {}))}",
                max_interval=STARTUP_POLL_CAP,
            )
        except WaitTimeout as error:
            raise BackendError(f"start local cluster: {error}; {self.reason()}") from None

    def add_processes(self, specs: list[ProcessSpec]) -> None:
        """Have the running supervisor start more (non-critical) processes."""
        extra = self.layout.extra_processes
        names = {spec.name for spec in specs}
        request = uuid.uuid4().hex
        state = self.state() or {}
        self._refuse_if_stopping(state, names)
        # The pids of earlier runs of the same names (a restart), read before the request is written: a supervisor
        # still busy with an earlier signal may read the file and start these at once, before that signal is sent.
        earlier = state.get("processes", {})
        # Test processes add processes concurrently (pytest -n): read, merge and replace under a lock, so neither
        # loses the other's spec and the supervisor never reads a half-written file.
        with FileLock(f"{extra}.lock"):
            existing = json.loads(extra.read_text()) if extra.exists() else []
            merged = [item for item in existing if item["name"] not in names]
            merged += [asdict(replace(spec, request=request)) for spec in specs]
            partial = extra.with_suffix(".partial")
            partial.write_text(json.dumps(merged, indent=2))
            partial.replace(extra)
        os.kill(int(state["supervisor_pid"]), signal.SIGUSR1)

        def started() -> set[str]:
            # Started means a new pid: a process that already exited again was started too (its caller reports
            # why it exited), while the record of an earlier run of the same name is not this start.
            now = self.state() or {}
            self._refuse_if_stopping(now, names)
            current = now.get("processes", {})
            return {name for name in names if name in current and current[name] != earlier.get(name)}

        waits.until(
            started,
            lambda launched: launched == names,
            timeout=self.timeouts.driver_ready,
            what=f"supervisor started {sorted(names)}",
            describe=lambda launched: f"started: {sorted(launched)}",
            max_interval=STARTUP_POLL_CAP,
        )

    def _refuse_if_stopping(self, state: dict[str, Any], names: set[str]) -> None:
        """Raise at once when the supervisor will start nothing more: stopping, stopped, or gone."""
        if state.get("phase") in ("stopping", "stopped", "failed") or not self.supervisor_alive(state):
            wanted = ", ".join(sorted(names)) or "nothing"
            raise BackendError(f"start {wanted}: the cluster is stopping: {self.reason()}")

    def stop_supervisor(self) -> None:
        """SIGTERM the supervisor and wait for it (and so every component) to exit; no-op if none runs."""
        state = self.state()
        if state is None or not self.supervisor_alive(state):
            return
        pid = int(state["supervisor_pid"])
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        try:
            os.kill(pid, signal.SIGTERM)
            # Children get process_stop each, in two groups; one more for the supervisor's own bookkeeping.
            limit = 3 * self.timeouts.process_stop
            readable, _, _ = select.select([pidfd], [], [], limit)
            if not readable:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)  # its children die with it (PR_SET_PDEATHSIG)
                raise BackendError(f"stop local cluster: supervisor {pid} did not exit within {limit:g}s; killed")
        finally:
            os.close(pidfd)
