"""The rollback report: each phase's outcome and timing, the phase that failed, and what was left behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dra_conformance.rollback.state import PHASES, RehearsalState

REPORT_JSON = "rollback-report.json"
REPORT_MARKDOWN = "rollback-report.md"


def summarize(state: RehearsalState) -> dict[str, Any]:
    """The report's content from the recorded phases."""
    phases: list[dict[str, Any]] = []
    for phase in PHASES:
        record = state.records.get(phase)
        if record is None:
            phases.append({"phase": str(phase), "outcome": "not run"})
            continue
        phases.append(
            {
                "phase": str(phase),
                "outcome": "passed" if record.passed else "failed",
                "started": record.started,
                "seconds": record.seconds,
                "problems": record.problems,
                "left_behind": record.left_behind,
            }
        )
    failed = next((p["phase"] for p in phases if p["outcome"] == "failed"), None)
    rollback = state.records.get(PHASES[-1])
    changed = state.records.get(PHASES[1])
    return {
        "canary_baseline": changed.facts.get("baseline") if changed else None,
        "state_file": str(state.path),
        "verdict": "rolled back cleanly"
        if all(p["outcome"] == "passed" for p in phases)
        else "not rolled back cleanly",
        "failed_phase": failed,
        "rollback_seconds": rollback.seconds if rollback else None,
        "phases": phases,
    }


def render_markdown(summary: dict[str, Any]) -> str:
    """The report as Markdown, for people."""
    lines = [f"# Rollback rehearsal: {summary['verdict']}", ""]
    if summary["failed_phase"]:
        lines.append(f"First failed phase: **{summary['failed_phase']}**.")
    if summary["rollback_seconds"] is not None:
        lines.append(f"The rollback phase took {summary['rollback_seconds']} s.")
    baseline = summary.get("canary_baseline")
    if baseline:
        lines += ["", "Canary baseline, the same workload on both paths (creation to Ready):", ""]
        lines += ["| path | node | samples | p50 s | p95 s | failures |", "|---|---|---|---|---|---|"]
        lines += [
            f"| {path} | {m['node']} | {m['samples']} | {m['ready_p50_seconds']} | {m['ready_p95_seconds']} | "
            f"{m['failures']} |"
            for path, m in baseline.items()
        ]
    lines += ["", "| phase | outcome | seconds |", "|---|---|---|"]
    lines += [f"| {p['phase']} | {p['outcome']} | {p.get('seconds', '')} |" for p in summary["phases"]]
    for phase in summary["phases"]:
        for heading, key in (("problems", "problems"), ("left behind", "left_behind")):
            if phase.get(key):
                lines += ["", f"## {phase['phase']}: {heading}", *(f"- {item}" for item in phase[key])]
    return "\n".join(lines) + "\n"


def write_report(state: RehearsalState, run_dir: Path) -> dict[str, Any]:
    """Write the JSON and Markdown reports into the run's directory; the summary."""
    summary = summarize(state)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / REPORT_JSON).write_text(json.dumps(summary, indent=2))
    (run_dir / REPORT_MARKDOWN).write_text(render_markdown(summary))
    return summary
