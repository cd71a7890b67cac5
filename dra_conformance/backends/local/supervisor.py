"""The process that owns a local cluster's components: starts them in order, stops them all together.

Run as `python -m dra_conformance.backends.local.supervisor <state-dir>` in its own session (the backend does
this). It stops every component, in reverse start order, when it receives SIGTERM/SIGINT/SIGHUP, when one
component exits unexpectedly, or when the last of its owners (the runs holding it, see owners.py) is gone.
Components get PR_SET_PDEATHSIG, so even a SIGKILL of the supervisor does not leave them behind. It holds the
machine-wide locks of the cluster's ports (inherited from the backend, see ports.py) until it exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from filelock import FileLock
from filelock import Timeout as LockTimeout

from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.backends.local.owners import Owners
from dra_conformance.backends.local.process_plan import Plan, ProcessSpec
from dra_conformance.processes import die_with

# How often the readiness probe of a `wait_for` URL is repeated; also bounds how late a signal is noticed then.
PROBE_INTERVAL = 0.05
# Per-request timeout of that probe: loopback, so anything slower means "not ready yet".
PROBE_REQUEST_TIMEOUT = 2.0
# A teardown kills a few processes, unmounts, removes cgroups and files: seconds; this guards a hung umount.
TEARDOWN_TIMEOUT = 60.0
# The signals that stop the cluster: `down`, Ctrl-C at `cluster up`'s terminal, a closed terminal.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class StopRequested(Exception):
    """Raised inside the start sequence when the supervisor must stop instead."""


class Supervisor:
    """Starts the processes of a plan and watches them, the owner and signals."""

    def __init__(self, layout: ClusterLayout, plan: Plan) -> None:
        """Supervise `plan`, reporting through `layout.state`."""
        self.layout = layout
        self.plan = plan
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.critical: dict[str, bool] = {}
        self.selector = selectors.DefaultSelector()
        self.stop_reason: str | None = None
        self.phase = "starting"
        self.failed = False
        self.reload_requested = False
        # A run joined the owners (SIGUSR2): watch it too.
        self.owners_changed = False
        # Owners that exited since the owners were last settled under the lock (`_settle_owners`).
        self.owner_exits: list[int] = []
        # Non-critical processes that exited, with their exit codes.
        self.exited: dict[str, int] = {}
        # Every exit of a non-critical process, in order: {"name", "code", "at" (epoch seconds)}; a restart clears
        # `exited` but never this, so a run can count every exit of the driver under test.
        self.exit_history: list[dict[str, Any]] = []
        # The start request (`ProcessSpec.request`) each extra process was last started for.
        self.served_requests: dict[str, str] = {}
        # Seconds since the supervisor started at which each process was started or each probe passed.
        self.timeline: dict[str, float] = {}
        self.started = time.monotonic()
        wake_read, self.wake_write = os.pipe()
        os.set_blocking(wake_read, False)
        os.set_blocking(self.wake_write, False)
        self.selector.register(wake_read, selectors.EVENT_READ, ("signal", None))
        # Owner pid -> its pidfd, for every owner being watched.
        self.watched_owners: dict[int, int] = {}
        self.lock = FileLock(str(layout.lock))
        owners = self._recorded_owners()
        self._watch_owners(owners)
        if not owners.kept and not self.watched_owners:
            self.stop_reason = f"owner process {plan.owner_pid} was already gone"

    def _recorded_owners(self) -> Owners:
        """The live owners of the owners file; a plan without one (written before owners existed) names its own."""
        recorded = Owners.read(self.layout.owners)
        if recorded is None:
            recorded = Owners().joined(self.plan.owner_pid)
        return recorded.live()

    def _watch_owners(self, owners: Owners) -> None:
        """Watch every owner not watched yet (none at all once the cluster is kept)."""
        if owners.kept:
            for fd in self.watched_owners.values():
                self.selector.unregister(fd)
                os.close(fd)
            self.watched_owners.clear()
            return
        for pid in owners.pids:
            if pid in self.watched_owners:
                continue
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue  # gone since `live`: the next owner exit (or the check below) sees it
            self.watched_owners[pid] = fd
            self.selector.register(fd, selectors.EVENT_READ, ("owner", pid))

    def _owner_exited(self, pid: int, fd: int) -> None:
        """An owner is gone: unwatch it; whether the cluster stops is settled under the lock (`_settle_owners`)."""
        self.selector.unregister(fd)
        os.close(fd)
        del self.watched_owners[pid]
        self.owner_exits.append(pid)
        self.write_state(self.phase)  # the owners it still watches, before the lock is had

    def _settle_owners(self) -> None:
        """After owners exited: stop if no live owner is left, else watch whoever joined since.

        Under the cluster's lock, as the backend attaches and releases under it: a run that attaches either is in
        the file read here, or finds the cluster stopping and starts its own. The lock is only tried, never waited
        for: its holder may be waiting on this loop meanwhile (a driver swap waits for its kill of the old driver to
        be recorded), so the loop goes on handling events and tries again every PROBE_INTERVAL.
        """
        if not self.owner_exits or not self._lock_taken():
            return
        try:
            owners = self._recorded_owners()
            self._watch_owners(owners)
            if not owners.kept and not self.watched_owners:  # also when the last ones exited since `live`
                pids = ", ".join(map(str, self.owner_exits))
                gone = f"owner process{'es' if len(self.owner_exits) > 1 else ''} {pids}"
                self.stop_reason = self.stop_reason or f"{gone} exited (no other run holds the cluster)"
                self.write_state("stopping")  # before the lock is free: a run attaching now sees it going
            else:
                if self.layout.owners.exists():
                    owners.write(self.layout.owners)  # the dead ones pruned
                self.write_state(self.phase)  # the owners it now watches
            self.owner_exits.clear()
        finally:
            self.lock.release()

    def _lock_taken(self) -> bool:
        try:
            self.lock.acquire(blocking=False)
        except LockTimeout:
            return False
        return True

    def write_state(self, phase: str) -> None:
        """Publish the phase and pids atomically for `status`, `down` and the backend's waits."""
        self.phase = phase
        state: dict[str, Any] = {
            "supervisor_pid": os.getpid(),
            "phase": phase,
            "owners": sorted(self.watched_owners),
            "server": self.plan.server,
            "processes": {name: child.pid for name, child in self.children.items()},
            "reason": self.stop_reason,
            "exited": self.exited,
            "exit_history": self.exit_history,
            "timeline": self.timeline,
            "updated": time.time(),
        }
        partial = self.layout.state.with_suffix(".partial")
        partial.write_text(json.dumps(state, indent=2))
        partial.replace(self.layout.state)

    def run(self) -> int:
        """Start, watch, stop; the exit code is 0 for a requested stop and 1 for a failure."""
        # The C-level handler writes each signal's number to the wakeup fd at once. A Python handler alone runs only
        # between bytecodes, so a signal landing just before the loop blocks in select() with no timeout would sit
        # unhandled until some other event: a driver added by SIGUSR1 then never starts.
        signal.set_wakeup_fd(self.wake_write, warn_on_full_buffer=False)
        for signum in (*STOP_SIGNALS, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(signum, self._on_signal)
        try:
            if self.stop_reason is None:
                self.write_state("starting")
                for spec in self.plan.processes:
                    if spec.wait_for:
                        self._wait_ready(spec)
                    self._start(spec)
                    self.write_state("starting")
                self.write_state("running")
                self._watch()
        except StopRequested:
            pass
        except Exception as error:  # anything unexpected must still stop the children
            self._fail(f"supervisor error: {type(error).__name__}: {error}")
        self.write_state("stopping")
        self._stop_all()
        self._run_teardown()
        for path in self.plan.cleanup_paths:
            shutil.rmtree(path, ignore_errors=True)
        self.write_state("failed" if self.failed else "stopped")
        return 1 if self.failed else 0

    def _fail(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            self.failed = True

    def _on_signal(self, signum: int, _frame: object) -> None:
        """Record what `signum` asks for; the wakeup fd (see `run`) has already woken the event loop."""
        if signum == signal.SIGUSR1:
            self.reload_requested = True
        elif signum == signal.SIGUSR2:
            self.owners_changed = True
        elif signum in STOP_SIGNALS and self.stop_reason is None:
            self.stop_reason = f"received {signal.Signals(signum).name}"

    def _start_extra_processes(self) -> None:
        """Start the processes listed in the extra-processes file that are not running yet."""
        self.reload_requested = False
        try:
            raw = json.loads(self.layout.extra_processes.read_text())
        except (OSError, ValueError):
            return
        for item in raw:
            spec = ProcessSpec(**item)
            if spec.name not in self.children or (
                spec.name in self.exited and spec.request != self.served_requests.get(spec.name)
            ):
                self.exited.pop(spec.name, None)
                self.served_requests[spec.name] = spec.request
                self._start(spec)
        self.write_state("running")

    def _start(self, spec: ProcessSpec) -> None:
        log = open(spec.log, "ab")
        log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(spec.argv)}\n".encode())
        log.flush()
        child = subprocess.Popen(
            spec.argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with(os.getpid()),
            close_fds=True,
            env={**os.environ, **spec.env} if spec.env else None,
        )
        log.close()
        self.children[spec.name] = child
        self.critical[spec.name] = spec.critical
        self.timeline[f"{spec.name}_started"] = time.monotonic() - self.started
        self.selector.register(os.pidfd_open(child.pid), selectors.EVENT_READ, ("child", spec.name))

    def _poll_events(self, timeout: float | None) -> None:
        """Wait for an event; raise StopRequested when a signal, owner exit or child exit demands a stop."""
        for key, _ in self.selector.select(timeout):
            kind, name = key.data
            if kind == "child":
                code = self.children[name].wait()
                if self.critical[name]:
                    self._fail(f"{name} exited with code {code}; see {self.layout.component_log(name)}")
                else:
                    self.selector.unregister(key.fileobj)
                    os.close(key.fd)
                    self.exited[name] = code
                    self.exit_history.append({"name": name, "code": code, "at": time.time()})
                    self.write_state("running")
            elif kind == "owner":
                self._owner_exited(name, key.fd)
            elif kind == "signal":
                with contextlib.suppress(BlockingIOError):
                    for signum in os.read(key.fd, 1024):  # the signal numbers the wakeup fd received
                        self._on_signal(signum, None)
        self._settle_owners()
        if self.stop_reason is not None:
            raise StopRequested
        if self.reload_requested:
            self._start_extra_processes()
        if self.owners_changed:
            self.owners_changed = False
            self._watch_owners(self._recorded_owners())
            self.write_state(self.phase)

    def _watch(self) -> None:
        while True:
            self._poll_events(PROBE_INTERVAL if self.owner_exits else None)

    def _wait_ready(self, spec: ProcessSpec) -> None:
        assert spec.wait_for is not None
        context = ssl.create_default_context(cafile=self.plan.ca_file)
        context.load_cert_chain(self.plan.client_cert_file, self.plan.client_key_file)
        deadline = time.monotonic() + self.plan.ready_timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(spec.wait_for, context=context, timeout=PROBE_REQUEST_TIMEOUT) as reply:
                    if reply.status == 200:
                        self.timeline.setdefault(spec.awaited, time.monotonic() - self.started)
                        return
                    last = f"HTTP {reply.status}"
            except urllib.error.HTTPError as error:
                last = f"HTTP {error.code}"
            except (OSError, ssl.SSLError) as error:
                last = str(error)
            self._poll_events(PROBE_INTERVAL)
        self._fail(
            f"{spec.wait_for} not ready within {self.plan.ready_timeout:g}s (before starting {spec.name}): {last}"
        )
        raise StopRequested

    def _run_teardown(self) -> None:
        """Run the teardown commands a component registered (see ClusterLayout.teardown); log their failures."""
        try:
            commands = json.loads(self.layout.teardown.read_text())
        except (OSError, ValueError):
            return
        for argv in commands:
            with self.layout.component_log("teardown").open("ab") as log:
                try:
                    subprocess.run(
                        argv,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        timeout=TEARDOWN_TIMEOUT,
                        check=False,
                    )
                except subprocess.TimeoutExpired:
                    log.write(f"teardown {argv} timed out after {TEARDOWN_TIMEOUT:g}s\n".encode())

    def _stop_all(self) -> None:
        """SIGTERM everything but etcd together, then etcd (the API server needs it while draining)."""
        stores = [c for name, c in self.children.items() if name == "etcd"]
        others = [c for name, c in reversed(self.children.items()) if name != "etcd"]
        for group in (others, stores):
            for child in group:
                if child.poll() is None:
                    child.terminate()
            deadline = time.monotonic() + self.plan.stop_timeout
            for child in group:
                try:
                    child.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()


def main(argv: list[str]) -> int:
    """Entry point: `supervisor <state-dir>`."""
    if len(argv) != 2:
        print("usage: python -m dra_conformance.backends.local.supervisor <state-dir>", file=sys.stderr)
        return 2
    layout = ClusterLayout(Path(argv[1]))
    return Supervisor(layout, Plan.read(layout.plan)).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
