"""The run's Metrics API verdict as the run report keeps it: the decisions and the evidence behind them."""

from __future__ import annotations

import json
from typing import Any

from dra_conformance.metrics.api import Evidence
from dra_conformance.report.writer import Section

RECORD_KIND = "metrics-verdict"


def verdict_record(evidence: Evidence, decisions: list[str]) -> dict[str, Any]:
    """One evaluation of the verdict."""
    return {"decisions": decisions, "rule": evidence.hpa_needs_v1beta1(), "evidence": json.loads(evidence.to_json())}


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
            f"{evidence['v1beta1_only_consumers']}; details: metrics-verdict.json in the run's reports",
            *(f"  because {rule}" for rule in [document.get("rule")] if rule),
        ],
        artifact="metrics-verdict.json",
        document=document,
    )
