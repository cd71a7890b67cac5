"""The Metrics API's availability over the whole run, watched from the controller: outages, since when, noticed when.

The metrics checks read availability once, up front (`read_availability`): an adapter that freezes after that
read, or just before it while the aggregator still says Available, left the verdict saying "available". So the
controller (never an xdist worker) probes every registered version of metrics.k8s.io every RUN_WATCH_INTERVAL for
the run's whole duration: its APIService's Available condition and a real read of its resource list through the
aggregator. A version whose APIService is not Available, or whose read fails, at READ_FAILURES_CONFIRM consecutive
probes is in an outage, from the first of them (or from the condition's last transition, when the aggregator saw it
first) until a probe finds it available again. Any outage makes the metrics verdict "fix first: <version>
unavailable since <T>", whatever the one up-front read saw.

What is not an outage of the metrics API:
- a probe whose APIService could not be read at all: the API server did not answer (a control-plane fault, which the
  cluster health watch records);
- a version with no APIService: nothing is registered to be available over time (a v1 never registered is judged at
  the up-front read; the rollback checks delete v1 on purpose);
- a probe within a check that changes the metrics API on purpose (the rollback check and rehearsal, the adapter's
  fault switches), or within CHANGE_MARGIN after it.

`probe` does the reads; `outages`, `decisions_with_outages` and the JSON helpers are pure.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.kube.client import raw_request
from dra_conformance.metrics import availability as version_availability
from dra_conformance.metrics import decisions as metrics_decisions
from dra_conformance.metrics import reads as metrics_reads

# Cadence of the probes, not synchronization: a third of the 15 s collection interval of metrics-server and the
# reference adapter, and four small requests a tick. With READ_FAILURES_CONFIRM probes an outage is noticed within
# about 2 x (RUN_WATCH_INTERVAL + 2 x READ_TIMEOUT) = 30 s of its start, well within the two minutes the verdict
# promises.
RUN_WATCH_INTERVAL = 5.0
# One probe's request deadline: the APIService read is served by the API server itself (milliseconds), the resource
# list by the adapter through the aggregator (milliseconds when healthy). A frozen adapter never answers: the read
# then ends at this deadline, as the aggregator's own availability check (5 s) does.
READ_TIMEOUT = 5.0
# Consecutive unavailable probes that make an outage: one slow answer on a loaded machine, or one 503 while the
# aggregator's proxy catches up with a condition that just turned True, is not one; a frozen adapter fails every
# probe.
READ_FAILURES_CONFIRM = 2
# After a check that changes the metrics API on purpose ends, the aggregator, its proxy and discovery catch up
# asynchronously (the checks wait for Available, answering and discovered, but a probe can still race the last of
# them): two probe intervals.
CHANGE_MARGIN = timedelta(seconds=2 * RUN_WATCH_INTERVAL)

AVAILABLE, UNAVAILABLE, ABSENT, UNKNOWN = "available", "unavailable", "absent", "unknown"
# The record entry (of the metrics verdict's record kind) the controller adds at the end of the run.
RUN_WATCH_KEY = "run_watch"


@dataclass(frozen=True)
class Probe:
    """One version of metrics.k8s.io at one moment."""

    at: datetime
    version: str
    # AVAILABLE, UNAVAILABLE, ABSENT (no APIService) or UNKNOWN (the API server did not answer the APIService read).
    state: str
    # Why it is unavailable: the condition's reason ("FailedDiscoveryCheck") or the failed read ("read failed: 503").
    reason: str = ""
    # When the APIService's Available condition last changed, where it says the version is not Available.
    since: datetime | None = None


@dataclass
class Outage:
    """One version unavailable from `since` (None `until`: still when the run ended); `noticed` when confirmed."""

    version: str
    since: datetime
    noticed: datetime
    reason: str
    until: datetime | None = None

    def describe(self) -> str:
        """'v1 unavailable since 18:50:01 UTC (FailedDiscoveryCheck)', with 'until ...' once it ended."""
        until = f" until {self.until:%H:%M:%S} UTC" if self.until is not None else ""
        return f"{self.version} unavailable since {self.since:%H:%M:%S} UTC{until} ({self.reason})"

    def to_json(self) -> dict[str, Any]:
        """The outage as the run's record keeps it (ISO 8601 times)."""
        found = asdict(self)
        found.update({k: v.isoformat(timespec="seconds") for k, v in found.items() if isinstance(v, datetime)})
        found["describe"] = self.describe()
        return found


Window = tuple[datetime, datetime]


def _excused(windows: Sequence[Window], moment: datetime) -> bool:
    return any(start <= moment <= stop + CHANGE_MARGIN for start, stop in windows)


def outages(probes: Iterable[Probe], excused: Sequence[Window] = ()) -> list[Outage]:
    """Every outage the probes show, version by version in time order.

    A probe that is UNKNOWN, ABSENT or within an `excused` window (a check changing the metrics API on purpose,
    plus CHANGE_MARGIN) neither opens nor ends one. READ_FAILURES_CONFIRM consecutive unavailable probes open one,
    from the first of them, or from the APIService condition's last transition where that is earlier and not
    itself excused; the next available probe ends it.
    """
    found: list[Outage] = []
    by_version: dict[str, list[Probe]] = {}
    for probe in probes:
        by_version.setdefault(probe.version, []).append(probe)
    for version in sorted(by_version, key=lambda v: (v not in metrics_reads.VERSIONS, v)):
        open_outage: Outage | None = None
        streak: list[Probe] = []
        for probe in sorted(by_version[version], key=lambda p: p.at):
            if probe.state in (UNKNOWN, ABSENT) or _excused(excused, probe.at):
                continue
            if probe.state == AVAILABLE:
                if open_outage is not None:
                    open_outage.until = probe.at
                open_outage, streak = None, []
                continue
            if open_outage is not None:
                continue
            streak.append(probe)
            if len(streak) < READ_FAILURES_CONFIRM:
                continue
            since = streak[0].at
            transitions = [p.since for p in streak if p.since is not None and not _excused(excused, p.since)]
            if transitions and min(transitions) < since:
                since = min(transitions)
            open_outage = Outage(version, since, probe.at, streak[0].reason)
            found.append(open_outage)
    return found


def fix_first(found: Sequence[Outage]) -> str | None:
    """'fix first: v1 unavailable since 18:50:01 UTC (FailedDiscoveryCheck)' for the run's outages (None: none)."""
    if not found:
        return None
    return f"{metrics_decisions.FIX_FIRST}: " + "; ".join(outage.describe() for outage in found)


def decisions_with_outages(decisions: Sequence[str], found: Sequence[Outage], point_read_fix: str | None) -> list[str]:
    """The verdict's decisions once the run's outages are known: any outage makes "fix first ... since T" lead.

    It replaces the decisions about availability the one up-front read made ("fix first: v1 unavailable (...)",
    "fix the metrics implementation first"), and "safe to move consumers to v1"; a version that read found
    unavailable and the run's watch did not (never registered, say) is kept in the line, marked as that read's.
    """
    line = fix_first(found)
    if line is None:
        return list(decisions)
    outage_versions = {outage.version for outage in found}
    if point_read_fix is not None:
        kept = [
            f"{part} at the availability read"
            for part in point_read_fix.removeprefix(f"{metrics_decisions.FIX_FIRST}: ").split("; ")
            if part.split(" ", 1)[0] not in outage_versions
        ]
        line = "; ".join([line, *kept])
    availability = (metrics_decisions.DECISIONS[0], metrics_decisions.DECISIONS[4])
    rest = [d for d in decisions if d not in availability and not d.startswith(f"{metrics_decisions.FIX_FIRST}:")]
    return [line, *rest]


def outages_from_json(entries: Iterable[dict[str, Any]]) -> list[Outage]:
    """Outages as `Outage.to_json` wrote them."""

    def moment(text: Any) -> datetime | None:
        return datetime.fromisoformat(str(text)) if text else None

    return [
        Outage(
            str(e["version"]),
            datetime.fromisoformat(str(e["since"])),
            datetime.fromisoformat(str(e["noticed"])),
            str(e["reason"]),
            moment(e.get("until")),
        )
        for e in entries
    ]


_READ_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError)


def probe(api: client.ApiClient, version: str, now: Callable[[], datetime] = metrics_reads.utc_now) -> Probe:
    """One version now: its APIService's Available condition, then (where True) a read of its resource list."""
    at = now()
    try:
        state = version_availability.apiservice_state(api, version, timeout=READ_TIMEOUT)
    except _READ_ERRORS as error:
        return Probe(at, version, UNKNOWN, f"APIService unreadable: {type(error).__name__}")
    if not state.registered:
        return Probe(at, version, ABSENT, version_availability.NO_APISERVICE)
    if not state.available:
        return Probe(at, version, UNAVAILABLE, state.reason, state.since)
    try:
        status, _ = raw_request(api, "GET", f"/apis/{metrics_reads.GROUP}/{version}", timeout=READ_TIMEOUT)
    except _READ_ERRORS as error:
        return Probe(at, version, UNAVAILABLE, f"read failed: {type(error).__name__}")
    if status != 200:
        return Probe(at, version, UNAVAILABLE, f"read failed: {status}")
    return Probe(at, version, AVAILABLE)


class RunAvailabilityWatch:
    """Probes every version every RUN_WATCH_INTERVAL on a daemon thread, from `start` to `stop`.

    `excused()` gives the windows of checks that change the metrics API on purpose, as known so far; `notice` is
    called once per outage, when it is confirmed outside them (the live line of the run).
    """

    def __init__(
        self,
        api: client.ApiClient,
        excused: Callable[[], list[Window]],
        notice: Callable[[Outage], None],
        *,
        interval: float = RUN_WATCH_INTERVAL,
    ) -> None:
        """Probe through `api` once started."""
        self.api, self.excused, self.notice, self.interval = api, excused, notice, interval
        self.probes: list[Probe] = []
        self.started: datetime | None = None
        # Why the watch stopped early, where it did (then later outages went unseen).
        self.error = ""
        self._noticed: set[tuple[str, datetime]] = set()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start probing now (a first probe at once)."""
        self.started = metrics_reads.utc_now()
        self._thread = threading.Thread(target=self._run, name="metrics-availability-watch", daemon=True)
        self._thread.start()

    def stop(self) -> list[Probe]:
        """Stop probing (waiting at most one probe's reads for the one in flight); every probe taken."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * READ_TIMEOUT * len(metrics_reads.VERSIONS))
        with self._lock:
            return list(self.probes)

    def _run(self) -> None:
        while True:
            try:
                taken = [probe(self.api, version) for version in metrics_reads.VERSIONS]
                with self._lock:
                    self.probes.extend(taken)
                    found = outages(self.probes, self.excused())
                for outage in found:
                    key = (outage.version, outage.since)
                    if key not in self._noticed:
                        self._noticed.add(key)
                        self.notice(outage)
            except Exception as error:  # a bug of the watch itself is no outage: stop watching and say so
                self.error = f"metrics availability not watched after {datetime.now(UTC):%H:%M:%S}: {error!r}"
                return
            if self._stopped.wait(self.interval):
                return


def run_watch_entry(
    probes: Sequence[Probe], excused: Sequence[Window], started: datetime | None, error: str
) -> dict[str, Any]:
    """The controller's record entry at the end of the run: the outages and what the watch covered."""
    counted = {
        version: {
            state: sum(1 for p in probes if p.version == version and p.state == state)
            for state in (AVAILABLE, UNAVAILABLE, ABSENT, UNKNOWN)
        }
        for version in metrics_reads.VERSIONS
    }
    return {
        RUN_WATCH_KEY: {
            "started": started.isoformat(timespec="seconds") if started else None,
            "ended": probes[-1].at.isoformat(timespec="seconds") if probes else None,
            "interval": RUN_WATCH_INTERVAL,
            "confirm": READ_FAILURES_CONFIRM,
            "probes": counted,
            "excused": [[a.isoformat(timespec="seconds"), b.isoformat(timespec="seconds")] for a, b in excused],
            "outages": [outage.to_json() for outage in outages(probes, excused)],
            "error": error,
        }
    }
