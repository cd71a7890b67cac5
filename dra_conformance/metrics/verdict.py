"""The run's Metrics API verdict as the run report keeps it: the decisions and the evidence behind them."""

from __future__ import annotations

import json
from typing import Any

from dra_conformance.metrics.api import Evidence
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


def summarize_verdict(entries: list[dict[str, Any]]) -> Section | None:
    """The last evaluation of the run (the metrics suite runs on one worker), for the terminal and a JSON file."""
    if not entries:
        return None
    document = entries[-1]
    evidence = document["evidence"]
    return Section(
        title="metrics API verdict",
        lines=[
            *(f"- {decision}" for decision in document["decisions"]),
            f"  available: {evidence['available']}; sample age p50/p95: {evidence['lag_p50']}/"
            f"{evidence['lag_p95']} s (SLO {evidence['slo']} s); v1beta1-only consumers: "
            f"{evidence['v1beta1_only_consumers']}; details: {VERDICT_JSON}, {VERDICT_MARKDOWN} in the run's reports",
            *(f"  {version} unavailable: {message}" for version, message in (evidence.get("messages") or {}).items()),
            *(f"  because {rule}" for rule in [document.get("rule")] if rule),
            *(f"  availability: {stability}" for stability in [document.get("stability")] if stability),
            *_watch_lines(evidence.get("watch")),
        ],
        artifact=VERDICT_JSON,
        document=document,
    )


def render_markdown(document: dict[str, Any]) -> str:
    """The verdict for people: the decisions, why, and the figures per version."""
    evidence = document["evidence"]
    watch = evidence.get("watch")
    lines = ["# Metrics API verdict", "", *(f"- **{decision}**" for decision in document["decisions"]), ""]
    if document.get("rule"):
        lines += [f"Keep serving v1beta1 because {document['rule']}.", ""]
    if document.get("stability"):
        lines += [f"Availability: {document['stability']}.", ""]
    lines += [
        f"At the verdict: APIServices {evidence['available']}; sample age p50 {evidence['lag_p50']} s, p95 "
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
