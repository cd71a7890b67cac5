"""One run of one cluster, as the fleet table shows it, read from the run's summary.json.

Summaries written before `run.cluster` and `run.finished_at` existed still load: the cluster is then the name of
the run's directory, and the time is the earliest of the run id's timestamp and the file's modification time (the
earlier, because a copy made without keeping times looks new, and a stale result must never pass for a fresh one).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dra_conformance.report.certification import DRIVER_STAYS_UP
from dra_conformance.report.fleet.sources import FleetInputError, FoundSummary

# `reports/<run-id>/`: `YYYYMMDD-HHMMSS-xxxx`, the time the run started (the machine's clock, read as UTC).
RUN_ID = re.compile(r"^(\d{8}-\d{6})-[0-9a-f]{4}$")
# certification.suite_table names a failed check `<nodeid> (<obligation id>)`; a node id ends in a name or `]`.
NAMED_OBLIGATION = re.compile(r" \(([^()]+)\)$")
NO_OBLIGATION = "no registry obligation"
# The canary gate's rule whose figure carries the rehearsal's times, for summaries without `rehearsed_at`.
REHEARSAL_RULE = "rollback rehearsed"
ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})?")


class TimeSource:
    """Where a run's time comes from."""

    SUMMARY = "run.finished_at"
    RUN_ID = "run id"
    FILE_TIME = "file time"


@dataclass(frozen=True)
class Rehearsal:
    """The rollback rehearsal the run's canary gate judged: when, and how it ended."""

    at: datetime | None
    verdict: str


@dataclass(frozen=True)
class ReadExposure:
    """Who can read claims beyond the platform team's allowlist (issue 25 item 6), where the run checked it."""

    state: str
    outside_allowlist: tuple[str, ...]


@dataclass(frozen=True)
class FleetRun:
    """What the fleet table shows of one run."""

    cluster: str
    # False: the summary names no cluster (written before run.cluster), so `cluster` is its run directory's name.
    cluster_named: bool
    kubernetes: str | None
    driver: str
    driver_version: str | None
    profile: str
    suite_version: str
    verdict: str
    # Obligation id -> how many checks broke it.
    failed_obligations: dict[str, int]
    canary_gate: str
    metrics_verdict: str
    rehearsal: Rehearsal
    read_exposure: ReadExposure | None
    finished_at: datetime
    time_source: str
    source: str


def run_of(found: FoundSummary) -> FleetRun:
    """The run `found` describes; a document that is no summary of ours raises FleetInputError."""
    summary = found.document
    run = summary.get("run")
    if not isinstance(run, dict) or not isinstance(summary.get("verdict"), str):
        raise FleetInputError(f"fleet input {found.source}: not a dra-conformance summary (no verdict or run)")
    driver = _text(run, "driver")
    if driver is None:
        raise FleetInputError(f"fleet input {found.source}: not a dra-conformance summary (run.driver missing)")
    cluster = _text(run, "cluster")
    finished_at, time_source = run_time(run, found)
    return FleetRun(
        cluster=cluster or found.run_dir or found.source,
        cluster_named=cluster is not None,
        kubernetes=_text(run, "cluster_version"),
        driver=driver,
        driver_version=_text(run, "driver_version"),
        profile=_text(run, "profile") or "",
        suite_version=_text(run, "suite_version") or "",
        verdict=str(summary["verdict"]),
        failed_obligations=failed_obligations(summary),
        canary_gate=_text(_mapping(summary.get("canary_gate")), "state") or "not evaluated",
        metrics_verdict=metrics_verdict(summary.get("metrics_verdict")),
        rehearsal=rehearsal(summary, found.source),
        read_exposure=read_exposure(summary.get("read_exposure")),
        finished_at=finished_at,
        time_source=time_source,
        source=found.source,
    )


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(document: dict[str, Any], key: str) -> str | None:
    """A non-empty value as text, else None."""
    value = document.get(key)
    return str(value) if value not in (None, "") and not isinstance(value, dict | list) else None


def parse_time(text: str, source: str, what: str) -> datetime:
    """An ISO 8601 time; one without a zone is UTC. A malformed one raises FleetInputError."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise FleetInputError(f"fleet input {source}: {what} {text!r} is not an ISO 8601 time") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def run_time(run: dict[str, Any], found: FoundSummary) -> tuple[datetime, str]:
    """When the run ended (run.finished_at), else the earliest evidence of when it ran."""
    finished = _text(run, "finished_at")
    if finished is not None:
        return parse_time(finished, found.source, "run.finished_at"), TimeSource.SUMMARY
    evidence = [(datetime.fromtimestamp(found.mtime, UTC), TimeSource.FILE_TIME)]
    matched = RUN_ID.match(found.run_dir)
    if matched:
        started = datetime.strptime(matched.group(1), "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
        evidence.append((started, TimeSource.RUN_ID))
    return min(evidence)


def failed_obligations(summary: dict[str, Any]) -> dict[str, int]:
    """The obligations the run's failed checks broke (most checks first), and an unexpected exit of the driver."""
    counted: Counter[str] = Counter()
    for row in _mapping(summary.get("suites")).values():
        for named in _mapping(row).get("failed") or []:
            matched = NAMED_OBLIGATION.search(str(named))
            counted[matched.group(1) if matched else NO_OBLIGATION] += 1
    unexpected = _mapping(summary.get("driver_exits")).get("unexpected") or []
    if unexpected:
        counted[DRIVER_STAYS_UP] += len(unexpected)
    return dict(sorted(counted.items(), key=lambda item: (-item[1], item[0])))


def metrics_verdict(document: Any) -> str:
    """The metrics verdict's decisions, else its state ('not run')."""
    verdict = _mapping(document)
    decisions = verdict.get("decisions")
    if isinstance(decisions, list) and decisions:
        return "; ".join(str(decision) for decision in decisions)
    return _text(verdict, "state") or "not run"


def rehearsal(summary: dict[str, Any], source: str) -> Rehearsal:
    """The rollback rehearsal: this run's (`rollback_rehearsal.rehearsed_at`), else the one the canary gate judged.

    The gate also judges a rehearsal of an earlier run (`--dra-rollback-state`); its figure reads
    'yes, <before started> to <after_rollback started>: <verdict>'.
    """
    own = _mapping(summary.get("rollback_rehearsal"))
    at = _text(own, "rehearsed_at")
    if at is not None:
        return Rehearsal(parse_time(at, source, "rollback_rehearsal.rehearsed_at"), _text(own, "verdict") or "")
    rules = _mapping(summary.get("canary_gate")).get("rules") or []
    for rule in rules:
        figure = str(_mapping(rule).get("figure") or "")
        if _mapping(rule).get("rule") != REHEARSAL_RULE or not figure.startswith("yes"):
            continue
        times = ISO_TIME.findall(figure)
        verdict = _text(own, "verdict") or (figure.split(": ", 1)[1] if ": " in figure else "")
        return Rehearsal(parse_time(times[-1], source, "the rehearsal's time") if times else None, verdict)
    return Rehearsal(None, _text(own, "verdict") or "not rehearsed")


def read_exposure(document: Any) -> ReadExposure | None:
    """`summary["read_exposure"]`, or None where the run did not check it."""
    if not isinstance(document, dict):
        return None
    outside = document.get("outside_allowlist") or []
    subjects = tuple(str(subject) for subject in outside) if isinstance(outside, list) else (str(outside),)
    return ReadExposure(_text(document, "state") or "unknown", subjects)
