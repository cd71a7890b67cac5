"""One run of one cluster, as the fleet table shows it, read from the run's summary.json.

Summaries written before `run.cluster` and `run.finished_at` existed still load: the cluster is then the name of
the run's directory, and the time is the earliest of the run id's timestamp and the file's modification time (the
earlier, because a copy made without keeping times looks new, and a stale result must never pass for a fresh one).
So do summaries written before the metrics API rollback and the device-plugin rollback were told apart: they hold
one verdict over both (`rollback_rehearsal`), and the canary gate's figure (rule `rollback rehearsed`) is the
device-plugin one's alone.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dra_conformance.canary.rules import REHEARSAL_RULE
from dra_conformance.report.certification import DEVICE_PLUGIN_ROLLBACK_KEY, METRICS_API_ROLLBACK_KEY
from dra_conformance.report.fleet.sources import FleetInputError, FoundSummary
from dra_conformance.verdict import DRIVER_STAYS_UP

# `reports/<run-id>/`: `YYYYMMDD-HHMMSS-xxxx`, the time the run started (the machine's clock, read as UTC).
RUN_ID = re.compile(r"^(\d{8}-\d{6})-[0-9a-f]{4}$")
# certification.suite_table names a failed check `<nodeid> (<obligation id>)`; a node id ends in a name or `]`.
NAMED_OBLIGATION = re.compile(r" \(([^()]+)\)$")
NO_OBLIGATION = "no registry obligation"
# The canary gate's rule whose figure carries the device-plugin rollback's times and verdict, for summaries without
# them: REHEARSAL_RULE, named so in summaries written before the two rollbacks were told apart.
REHEARSAL_RULES = (REHEARSAL_RULE, "rollback rehearsed")
# Those older summaries' one section over every rehearsal of the rollback report, and the gate's figure there when
# the device-plugin rollback recorded no phase (the section's verdict is then the metrics API rollback's alone).
LEGACY_ROLLBACK_KEY = "rollback_rehearsal"
LEGACY_NO_DEVICE_PLUGIN_PHASE = "no (phases recorded: none)"
NOT_REHEARSED = "not rehearsed"
ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})?")


class TimeSource:
    """Where a run's time comes from."""

    SUMMARY = "run.finished_at"
    RUN_ID = "run id"
    FILE_TIME = "file time"


@dataclass(frozen=True)
class Rehearsal:
    """One rollback rehearsal of the run (the metrics API's, or the device-plugin one): when, and how it ended."""

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
    metrics_api_rollback: Rehearsal
    device_plugin_rollback: Rehearsal
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
        metrics_api_rollback=metrics_api_rollback(summary, found.source),
        device_plugin_rollback=device_plugin_rollback(summary, found.source),
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


def _section(summary: dict[str, Any], key: str, source: str) -> Rehearsal | None:
    """The rehearsal `summary[key]` records (`rehearsed_at`, `verdict`), None where it records none."""
    own = _mapping(summary.get(key))
    at, verdict = _text(own, "rehearsed_at"), _text(own, "verdict")
    if at is None and verdict is None:
        return None
    return Rehearsal(parse_time(at, source, f"{key}.rehearsed_at") if at is not None else None, verdict or "")


def _gate_figure(summary: dict[str, Any]) -> str | None:
    """The canary gate's figure for the device-plugin rollback (rule 4, under its name or its older one)."""
    for rule in _mapping(summary.get("canary_gate")).get("rules") or []:
        if _mapping(rule).get("rule") in REHEARSAL_RULES:
            return str(_mapping(rule).get("figure") or "")
    return None


def device_plugin_rollback(summary: dict[str, Any], source: str) -> Rehearsal:
    """The device-plugin rollback (DRA -> device plugin): this run's, else the one the canary gate judged.

    The gate also judges a rehearsal of an earlier run (`--dra-rollback-state`); its figure reads
    'yes, <before started> to <after_rollback started>: <verdict>', the verdict of this rehearsal alone. Else an
    older summary's one verdict over every rehearsal, with its `rehearsed_at` (this rehearsal's date), unless the
    gate's figure says this one recorded no phase: the gate then found it unfinished (not clean, as that verdict is)
    or was not evaluated.
    """
    own = _section(summary, DEVICE_PLUGIN_ROLLBACK_KEY, source)
    if own is not None and own.at is not None:
        return own
    figure = _gate_figure(summary) or ""
    if figure.startswith("yes"):
        times = ISO_TIME.findall(figure)
        verdict = figure.split(": ", 1)[1] if ": " in figure else ""
        return Rehearsal(parse_time(times[-1], source, "the rehearsal's time") if times else None, verdict)
    if own is not None:
        return own
    legacy = _section(summary, LEGACY_ROLLBACK_KEY, source)
    if legacy is not None and DEVICE_PLUGIN_ROLLBACK_KEY not in summary and figure != LEGACY_NO_DEVICE_PLUGIN_PHASE:
        return legacy
    return Rehearsal(None, NOT_REHEARSED)


def metrics_api_rollback(summary: dict[str, Any], source: str) -> Rehearsal:
    """The metrics API rollback (metrics.k8s.io v1 -> v1beta1) of this run.

    An older summary tells it apart only where the device-plugin rollback recorded no phase (the gate's figure says
    so): its one verdict is then this rehearsal's. Elsewhere it says what it holds: one verdict over both.
    """
    if METRICS_API_ROLLBACK_KEY in summary or LEGACY_ROLLBACK_KEY not in summary:
        return _section(summary, METRICS_API_ROLLBACK_KEY, source) or Rehearsal(None, NOT_REHEARSED)
    legacy = _section(summary, LEGACY_ROLLBACK_KEY, source)
    if legacy is None:
        return Rehearsal(None, NOT_REHEARSED)
    if _gate_figure(summary) == LEGACY_NO_DEVICE_PLUGIN_PHASE:
        return Rehearsal(None, legacy.verdict)
    return Rehearsal(None, f"not told apart (older summary; with the device-plugin rollback: {legacy.verdict})")


def read_exposure(document: Any) -> ReadExposure | None:
    """`summary["read_exposure"]`, or None where the run did not check it."""
    if not isinstance(document, dict):
        return None
    outside = document.get("outside_allowlist") or []
    subjects = tuple(str(subject) for subject in outside) if isinstance(outside, list) else (str(outside),)
    return ReadExposure(_text(document, "state") or "unknown", subjects)
