"""The run's Metrics API verdict as the run report keeps it: the decisions and the evidence behind them."""

from __future__ import annotations

import json
from typing import Any

from dra_conformance.metrics import decisions as metrics_decisions
from dra_conformance.metrics import run_watch
from dra_conformance.metrics.evidence import Evidence
from dra_conformance.model.records import Section

RECORD_KIND = "metrics-verdict"
VERDICT_JSON = "metrics-verdict.json"
VERDICT_MARKDOWN = "metrics-verdict.md"


def verdict_record(evidence: Evidence, decisions: list[str]) -> dict[str, Any]:
    """One evaluation of the verdict."""
    return {
        "decisions": decisions,
        "rule": evidence.hpa_needs_v1beta1(),
        "stability": evidence.stability(),
        "evidence": json.loads(evidence.to_json()),
    }


def _watch_lines(watch: dict[str, Any] | None) -> list[str]:
    if not watch:
        return []
    lines = [
        f"  watched {watch['watched_seconds']} s of {watch['requested_seconds']} s requested, every "
        f"{watch['interval']} s from {watch['started']}:"
    ]
    for version, figures in watch["versions"].items():
        ratio = "n/a" if figures["ratio"] is None else f"{figures['ratio']:.1%}"
        lines.append(
            f"    {version}: available {ratio} ({figures['available_ticks']}/{figures['ticks']} ticks), sample age "
            f"p50/p95/max {figures['lag_p50']}/{figures['lag_p95']}/{figures['lag_max']} s"
            + (f", unavailable: {figures['reasons']}" if figures["reasons"] else "")
        )
    return lines


def with_run_watch(evaluation: dict[str, Any] | None, watched: dict[str, Any] | None) -> dict[str, Any] | None:
    """The verdict once the controller's watch over the whole run is known (`run_watch`).

    Any outage it saw makes "fix first: <version> unavailable since <T>" the first decision, whatever the one
    up-front read saw; with no evaluation of the metrics checks (they did not run, or did not get that far) such an
    outage is the verdict on its own. None: nothing to decide from.
    """
    found = run_watch.outages_from_json((watched or {}).get("outages") or [])
    if evaluation is None:
        line = run_watch.fix_first(found)
        if line is None:
            return None
        return {
            "decisions": [line],
            "rule": None,
            "stability": None,
            "evidence": None,
            run_watch.RUN_WATCH_KEY: watched,
        }
    document = dict(evaluation)
    if watched is not None:
        point_read = metrics_decisions.fix_first(Evidence(available=dict(evaluation["evidence"]["available"])))
        document["decisions"] = run_watch.decisions_with_outages(evaluation["decisions"], found, point_read)
        document[run_watch.RUN_WATCH_KEY] = watched
    return document


def _run_watch_lines(watched: dict[str, Any] | None) -> list[str]:
    if not watched:
        return ["  over the run: not watched (no cluster named at the start of the run)"]
    outages = watched.get("outages") or []
    if watched.get("error"):
        head = f"  over the run: {watched['error']}"
    else:
        head = (
            f"  over the run (probed every {watched['interval']:g} s from the controller, {watched['started']} to "
            f"{watched['ended']}): " + ("unavailable" if outages else "no outage seen")
        )
    return [head, *(f"    {o['describe']}, noticed {o['noticed'][11:19]} UTC" for o in outages)]


def summarize_verdict(entries: list[dict[str, Any]]) -> Section | None:
    """The verdict for the terminal and a JSON file: the metrics checks' last evaluation, and the run's watch.

    The metrics suite runs on one worker; the controller's watch over the whole run (`run_watch`) is its own entry.
    """
    evaluations = [e for e in entries if "decisions" in e]
    watches = [e[run_watch.RUN_WATCH_KEY] for e in entries if run_watch.RUN_WATCH_KEY in e]
    document = with_run_watch(evaluations[-1] if evaluations else None, watches[-1] if watches else None)
    if document is None:
        return None
    evidence = document["evidence"]
    read = (
        [
            f"  at the availability read (one moment): {evidence['available']}; sample age p50/p95: "
            f"{evidence['lag_p50']}/{evidence['lag_p95']} s (SLO {evidence['slo']} s); v1beta1-only consumers: "
            f"{evidence['v1beta1_only_consumers']}",
            *(f"  {version} unavailable: {message}" for version, message in (evidence.get("messages") or {}).items()),
        ]
        if evidence is not None
        else ["  the metrics checks made no evaluation: the verdict is the watch's alone"]
    )
    return Section(
        title="metrics API verdict",
        lines=[
            *(f"- {decision}" for decision in document["decisions"]),
            *_run_watch_lines(document.get(run_watch.RUN_WATCH_KEY)),
            *read,
            f"  details: {VERDICT_JSON}, {VERDICT_MARKDOWN} in the run's reports",
            *(f"  because {rule}" for rule in [document.get("rule")] if rule),
            *(f"  availability: {stability}" for stability in [document.get("stability")] if stability),
            *_watch_lines(evidence.get("watch") if evidence is not None else None),
        ],
        artifact=VERDICT_JSON,
        document=document,
    )


def render_markdown(document: dict[str, Any]) -> str:
    """The verdict for people: the decisions, why, and the figures per version."""
    evidence = document["evidence"]
    lines = ["# Metrics API verdict", "", *(f"- **{decision}**" for decision in document["decisions"]), ""]
    if document.get("rule"):
        lines += [f"Keep serving v1beta1 because {document['rule']}.", ""]
    if document.get("stability"):
        lines += [f"Availability: {document['stability']}.", ""]
    if run_watch.RUN_WATCH_KEY in document:
        head, *outages = _run_watch_lines(document[run_watch.RUN_WATCH_KEY])
        head = head.strip()
        lines += [head[:1].upper() + head[1:], "", *(f"- {line.strip()}" for line in outages), ""]
    if evidence is None:
        return "\n".join(lines) + "\n"
    watch = evidence.get("watch")
    lines += [
        f"At the availability read (one moment): APIServices {evidence['available']}; sample age p50 "
        f"{evidence['lag_p50']} s, p95 "
        f"{evidence['lag_p95']} s (SLO {evidence['slo']} s); a newer sample seen: {evidence['new_sample_seen']}; "
        f"v1beta1-only consumers: {evidence['v1beta1_only_consumers'] or 'none seen'}; API server "
        f"{evidence['server_version']}.",
    ]
    messages = evidence.get("messages") or {}
    if messages:
        lines += ["", *(f"- {version} is unavailable: {message}" for version, message in messages.items())]
    if watch:
        lines += [
            "",
            f"## Watch: {watch['watched_seconds']} s of {watch['requested_seconds']} s requested, a tick every "
            f"{watch['interval']} s from {watch['started']}",
            "",
            "| version | available | ticks | sample age p50 s | p95 s | max s | ticks without a sample | unavailable |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for version, f in watch["versions"].items():
            ratio = "n/a" if f["ratio"] is None else f"{f['ratio']:.1%}"
            lines.append(
                f"| {version} | {ratio} | {f['available_ticks']}/{f['ticks']} | {f['lag_p50']} | {f['lag_p95']} | "
                f"{f['lag_max']} | {f['ticks_without_lag']} | {f['reasons'] or ''} |"
            )
    return "\n".join(lines) + "\n"
