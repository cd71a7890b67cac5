"""Watching that each instance of the driver under test answers while the run goes on (`run.driver-answers`).

A daemon thread of the run's controller (never of an xdist worker) asks each instance of the driver under test
GetInfo on its registration socket every PROBE_INTERVAL, with the deadline the kubelet gives GetInfo when it
registers a plugin (PROBE_DEADLINE). A call that gets no answer by then opens a `Silence` on that node; the first
answer again closes it. A silence of at least SILENT_PROBES unanswered probes is a finding: the node and the
window go into the summary, and a check that failed within it (or within ANSWER_MARGIN after it) cites it.

Only a call that ends at its deadline is silence. A refused connection or a missing socket means the process is not
there: its exit is `run.driver-stays-up`'s (the supervisor records it, and tells the suite's own kills apart).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc

from dra_conformance.kubelet.client import DriverClient
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.verdict import DRIVER_ANSWERS as DRIVER_ANSWERS
from dra_wire.kubelet_api import BindingsError, KubeletAPI, load

# The kubelet gives GetInfo one second when it registers a plugin (operation_generator.go): a driver that does not
# answer within it then could not be registered again, by a restarted kubelet for one.
PROBE_DEADLINE = 1.0
# One probe per instance every two seconds: a few local socket round trips, nothing next to what the checks do.
PROBE_INTERVAL = 2.0
# Three unanswered probes in a row (at least ~5 s with no answer) before a silence is a finding: one late answer on
# a loaded machine is not a hung driver.
SILENT_PROBES = 3
# A check that failed up to this long after a silence ended still met it (a call pending since, a retry).
ANSWER_MARGIN = timedelta(seconds=10)

# Asks one endpoint GetInfo with a deadline: "" when it answered, else why not and whether it was the deadline.
Probe = Callable[[DriverEndpoint, float], tuple[str, bool]]


@dataclass
class Silence:
    """The driver on `node` did not answer from `since` (its last answer) until `until` (its next; None: never)."""

    node: str
    since: datetime
    detail: str
    until: datetime | None = None
    unanswered: int = 1

    @property
    def finding(self) -> bool:
        """Long enough to be the driver's: SILENT_PROBES unanswered probes in a row."""
        return self.unanswered >= SILENT_PROBES

    def overlaps(self, start: datetime, stop: datetime) -> bool:
        """Whether the silence (with its margin after) touches [start, stop]."""
        if self.since > stop:
            return False
        return self.until is None or start <= self.until + ANSWER_MARGIN

    def citation(self) -> str:
        """What a check that failed within the silence cites: stable once the silence began, ended or not."""
        return f"{DRIVER_ANSWERS}: the driver on {self.node} did not answer from {self.since:%H:%M:%S}"

    def to_json(self) -> dict[str, Any]:
        """The silence as the summary holds it."""
        return {
            "node": self.node,
            "from": self.since.isoformat(timespec="seconds"),
            "to": self.until.isoformat(timespec="seconds") if self.until else None,
            "unanswered": self.unanswered,
            "describe": self.describe(),
            "citation": self.citation(),
        }

    def describe(self) -> str:
        """'the driver on kwok-node-0 did not answer from 12:00:01 to 12:01:03 (31 probes, ...)'."""
        until = f"to {self.until:%H:%M:%S}" if self.until else "until the end of the run"
        return (
            f"the driver on {self.node} did not answer from {self.since:%H:%M:%S} {until} ({self.unanswered} "
            f"GetInfo probes unanswered within {PROBE_DEADLINE:g} s: {self.detail})"
        )


def get_info_probe(api: KubeletAPI) -> Probe:
    """GetInfo on an endpoint's registration socket, as the kubelet asks it, through the suites' own client."""

    def probe(endpoint: DriverEndpoint, deadline: float) -> tuple[str, bool]:
        with DriverClient(api, endpoint.registration_socket, endpoint.reachable, endpoint.relay_errors) as driver:
            try:
                driver.get_info(timeout=deadline)
            except grpc.RpcError as error:
                code = error.code() if callable(getattr(error, "code", None)) else None
                return f"{code.name if code else 'error'}: {error.details() or ''}"[:200], (
                    code == grpc.StatusCode.DEADLINE_EXCEEDED
                )
        return "", False

    return probe


def answer_watch(cluster: ClusterInfo, driver: str) -> DriverAnswerWatch | None:
    """A started watch of `driver`'s instances whose sockets this machine reaches in place (None: there are none).

    The set-aside nodes' instances are left out: disruption checks kill and hold them on purpose. Sockets behind a
    node agent's relay are too: the relay lives in the workers' fixtures, and its faults are its own obligation.
    """
    set_aside = (*cluster.set_aside_nodes, cluster.disruption_real_node(driver))
    endpoints = [
        e
        for e in cluster.drivers
        if e.driver == driver and e.node not in set_aside and (e.node_kubelet_root is None or e.bound)
    ]
    if not endpoints:
        return None
    try:
        api = load()
    except BindingsError:  # the workers' fixtures say so; the summary says the driver's answers were not watched
        return None
    return DriverAnswerWatch(endpoints, get_info_probe(api)).start()


class DriverAnswerWatch:
    """Records, per node, the windows in which the driver under test did not answer."""

    def __init__(self, endpoints: Iterable[DriverEndpoint], probe: Probe) -> None:
        """Probe `endpoints` (one per node) with `probe` once started."""
        self.endpoints = list(endpoints)
        self.probe = probe
        self.silences: list[Silence] = []
        self._open: dict[str, Silence] = {}
        self._last_answer: dict[str, datetime] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        # Why the watch stopped early, where it did (then silences after that moment went unseen).
        self.error = ""

    def start(self) -> DriverAnswerWatch:
        """Start probing now."""
        started = datetime.now(UTC)
        self._last_answer = {e.node: started for e in self.endpoints}
        self._thread = threading.Thread(target=self._run, name="driver-answer-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[Silence]:
        """Stop probing; the silences that are findings, the open ones without an end."""
        self._stopped.set()
        if self._thread is not None:
            # At most one round of probes is under way: each ends by its deadline.
            self._thread.join(timeout=PROBE_DEADLINE * (len(self.endpoints) + 1))
        return self.findings()

    def watching(self) -> str:
        """What the watch covered, for the summary: the nodes and the interval, or why it stopped."""
        nodes = ", ".join(e.node for e in self.endpoints)
        return self.error or f"GetInfo every {PROBE_INTERVAL:g} s, deadline {PROBE_DEADLINE:g} s: {nodes}"

    def findings(self) -> list[Silence]:
        """The silences long enough to be the driver's, in the order they began."""
        with self._lock:
            return [silence for silence in self.silences if silence.finding]

    def overlapping(self, start: datetime, stop: datetime) -> list[Silence]:
        """The silences that are findings and touch [start, stop]."""
        return [silence for silence in self.findings() if silence.overlaps(start, stop)]

    def _run(self) -> None:
        while not self._stopped.wait(PROBE_INTERVAL):
            try:
                for endpoint in self.endpoints:
                    problem, timed_out = self.probe(endpoint, PROBE_DEADLINE)
                    self.note(endpoint.node, datetime.now(UTC), problem, timed_out)
            except Exception as error:  # a bug of the watch itself says nothing of the driver: stop watching
                self.error = f"driver answers not watched after {datetime.now(UTC):%H:%M:%S}: {error!r}"
                return

    def note(self, node: str, now: datetime, problem: str = "", timed_out: bool = False) -> None:
        """One probe of `node` at `now`: answered (no `problem`), or not, by its deadline (`timed_out`) or otherwise.

        A probe that failed otherwise (nothing listening) leaves an open silence as it is: a driver restarting after
        it hung has not answered yet.
        """
        with self._lock:
            open_silence = self._open.get(node)
            if problem and timed_out:
                if open_silence is None:
                    open_silence = Silence(node, self._last_answer.get(node, now), problem, unanswered=0)
                    self._open[node] = open_silence
                    self.silences.append(open_silence)
                open_silence.unanswered += 1
            elif not problem:
                self._last_answer[node] = now
                if open_silence is not None:
                    open_silence.until = now
                    del self._open[node]
