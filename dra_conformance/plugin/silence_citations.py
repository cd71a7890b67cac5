"""Checks that failed while an instance of the driver under test did not answer cite that silence.

Applied once the run ended, to every check's whole span (setup to teardown): a silence becomes a finding only after
SILENT_PROBES unanswered probes, later than the first checks it broke reported. A check that failed or errored
within it gets the silence's citation in its reason; one that raised what no obligation names (a bare
DEADLINE_EXCEEDED, a cleanup that could not unprepare) fails on `run.driver-answers` instead of being a harness
error: the driver's silence explains it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from dra_conformance.driver.answers import Silence
from dra_conformance.verdict import DRIVER_ANSWERS, HARNESS_ERROR, CheckResult, Outcome


def cite_silences(
    results: list[CheckResult], silences: list[Silence], spans: dict[str, tuple[float, float]]
) -> list[CheckResult]:
    """`results` with those that failed or errored within a silence citing it; `spans`: (start, stop) per check."""
    cited = []
    for result in results:
        span = spans.get(result.nodeid)
        if result.outcome not in (Outcome.FAILED, Outcome.ERROR) or span is None:
            cited.append(result)
            continue
        start, stop = (datetime.fromtimestamp(moment, UTC) for moment in span)
        met = next((silence for silence in silences if silence.finding and silence.overlaps(start, stop)), None)
        if met is None:
            cited.append(result)
        elif result.obligation in (HARNESS_ERROR, ""):
            reason = f"{result.reason} [{met.citation()}]"
            cited.append(
                replace(result, outcome=Outcome.FAILED, reason=reason, obligation=DRIVER_ANSWERS, traceback="")
            )
        else:
            cited.append(replace(result, reason=f"{result.reason} [{met.citation()}]"))
    return cited
