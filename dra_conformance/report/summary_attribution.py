"""Which fault a check that failed or errored met: a control-plane fault or an unexpected exit of the driver.

Decided once the run ended, from the faults as finally recorded, never while reports arrive: the cluster health
watch notices a fault a probe after it began (and a driver's exit is read from the supervisor at the end), so a
check that failed at the fault's first moment reports before the fault is known. Deciding at the end, over each
fault's detection window (a lead before its detected start, a margin after its end), takes that race away.

- A check that failed or errored within a control-plane fault's window could not judge the driver: an error
  attributed to `CLUSTER_FAULT`, whatever it raised.
- A check that failed or errored within an unexpected exit's window met the driver's own failure: one that named no
  obligation (a harness error, a broken connection) fails on `run.driver-stays-up`; one that named its obligation
  keeps it, and cites the exit.

Only the failing phases' times count (setup, call or teardown that failed): a check that failed before a fault and
merely finished its teardown during it keeps its failure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from dra_conformance.kube.cluster_health import FAULT_MARGIN, POLL_INTERVAL, PROBE_TIMEOUT, Fault
from dra_conformance.verdict import CLUSTER_FAULT, DRIVER_STAYS_UP, HARNESS_ERROR, CheckResult, Outcome

# How long before a control-plane fault's detected start a failing check still counts as the fault's. The detected
# start is the last probe that found the component healthy, but a check meets a dying component before /readyz
# says so: an API server shutting down refuses or resets requests while its /readyz probe (every POLL_INTERVAL,
# PROBE_TIMEOUT each) is still in flight or answered from before the kill; and a check's report times come from
# another process's clock reading (an xdist worker's). Twice one poll plus one probe timeout (6 s) covers both.
FAULT_LEAD = timedelta(seconds=2 * (POLL_INTERVAL + PROBE_TIMEOUT))
# How long before an unexpected exit's recorded time a failing check still counts as the exit's. The supervisor
# records the time it reaped the process; the driver stopped answering before that: its gRPC server goes down at
# the first moment of a kill (sockets close) or of a crash's unwinding, and a check's report comes from another
# process's clock reading. Five seconds covers a crash that unwinds slowly (a Go panic printing its goroutines).
DRIVER_EXIT_LEAD = timedelta(seconds=5)


@dataclass(frozen=True)
class FaultWindow:
    """When a fault may have failed a check: from `lead` before its detected start to `margin` after its end."""

    kind: str
    start: datetime
    # None: it lasted until the end of the run.
    until: datetime | None
    describe: str
    lead: timedelta
    margin: timedelta

    def overlaps(self, start: datetime, stop: datetime) -> bool:
        """Whether [start, stop] touches the window."""
        if stop < self.start - self.lead:
            return False
        return self.until is None or start <= self.until + self.margin


def cluster_windows(faults: Iterable[Fault]) -> list[FaultWindow]:
    """The detection windows of control-plane faults."""
    return [FaultWindow(CLUSTER_FAULT, f.since, f.until, f.describe(), FAULT_LEAD, FAULT_MARGIN) for f in faults]


def exit_windows(exits: Iterable[dict[str, Any]]) -> list[FaultWindow]:
    """The windows of the driver's unexpected exits (`DriverExit` as JSON); the suite's own kills have none."""
    windows = []
    for found in exits:
        if found.get("caused_by_suite"):
            continue
        at = datetime.fromtimestamp(float(found["at"]), UTC)
        windows.append(FaultWindow(DRIVER_STAYS_UP, at, at, str(found["describe"]), DRIVER_EXIT_LEAD, FAULT_MARGIN))
    return windows


def attribute(
    results: list[CheckResult],
    failing_spans: dict[str, list[tuple[float, float]]],
    cluster: Iterable[FaultWindow] = (),
    exits: Iterable[FaultWindow] = (),
) -> list[CheckResult]:
    """`results` with each failure or error that met a fault attributed to it.

    `failing_spans` holds, per check, the (start, stop) epoch seconds of each phase that failed. A control-plane
    fault comes first: during it nothing could judge the driver, not even its exit.
    """
    cluster, exits = list(cluster), list(exits)
    attributed = []
    for result in results:
        spans = [
            (datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(stop, UTC))
            for start, stop in failing_spans.get(result.nodeid, [])
        ]
        if result.outcome not in (Outcome.FAILED, Outcome.ERROR) or not spans:
            attributed.append(result)
            continue
        fault = _met(cluster, spans)
        if fault is not None:
            attributed.append(
                replace(
                    result,
                    outcome=Outcome.ERROR,
                    reason=f"{CLUSTER_FAULT}: {fault.describe}",
                    obligation=CLUSTER_FAULT,
                    obligation_capability="",
                    traceback="",
                )
            )
            continue
        exited = _met(exits, spans)
        if exited is None:
            attributed.append(result)
        elif result.obligation in ("", HARNESS_ERROR):
            attributed.append(
                replace(
                    result,
                    outcome=Outcome.FAILED,
                    reason=f"{result.reason} [the driver exited unexpectedly: {exited.describe}]",
                    obligation=DRIVER_STAYS_UP,
                    obligation_capability="",
                    traceback="",
                )
            )
        else:
            attributed.append(replace(result, reason=f"{result.reason} [the driver exited: {exited.describe}]"))
    return attributed


def _met(windows: list[FaultWindow], spans: list[tuple[datetime, datetime]]) -> FaultWindow | None:
    return next((w for w in windows for start, stop in spans if w.overlaps(start, stop)), None)
