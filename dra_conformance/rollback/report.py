"""The rollback report: each phase's outcome and timing, the phase that failed, and what was left behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dra_conformance.rollback.state import DEFAULT_REHEARSAL, PHASES, Records, RehearsalState

REPORT_JSON = "rollback-report.json"
REPORT_MARKDOWN = "rollback-report.md"


def _phases(records: Records) -> list[dict[str, Any]]:
    phases: list[dict[str, Any]] = []
    for phase in PHASES:
        record = records.get(phase)
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
    return phases


def _one(records: Records) -> dict[str, Any]:
    phases = _phases(records)
    rollback = records.get(PHASES[-1])
    return {
        "verdict": "rolled back cleanly"
        if all(p["outcome"] == "passed" for p in phases)
        else "not rolled back cleanly",
        "failed_phase": next((p["phase"] for p in phases if p["outcome"] == "failed"), None),
        "rollback_seconds": rollback.seconds if rollback else None,
        "phases": phases,
    }


def summarize(state: RehearsalState) -> dict[str, Any]:
    """The report's content from the recorded phases.

    The top level is the device plugin <-> DRA rehearsal (its phases and canary baseline), with the verdict over
    every rehearsal that recorded a phase; `rehearsals` has each one's own verdict, failed phase and timings.
    """
    every = state.every_rehearsal()
    default = every.get(DEFAULT_REHEARSAL, {})
    recorded = {name: _one(records) for name, records in every.items() if records}
    main = _one(default)
    failed = next(
        (
            summary["failed_phase"] if name == DEFAULT_REHEARSAL else f"{name}: {summary['failed_phase']}"
            for name, summary in recorded.items()
            if summary["failed_phase"]
        ),
        None,
    )
    timings = [s["rollback_seconds"] for s in recorded.values() if s["rollback_seconds"] is not None]
    clean = bool(recorded) and all(s["verdict"] == "rolled back cleanly" for s in recorded.values())
    changed = default.get(PHASES[1])
    return {
        "canary_baseline": changed.facts.get("baseline") if changed else None,
        "state_file": str(state.path),
        "verdict": "rolled back cleanly" if clean else "not rolled back cleanly",
        "failed_phase": failed,
        "rollback_seconds": round(sum(timings), 3) if timings else None,
        "phases": main["phases"],
        "rehearsals": recorded,
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
    rehearsals = summary.get("rehearsals") or {DEFAULT_REHEARSAL: {"verdict": "", "phases": summary["phases"]}}
    for name, rehearsal in rehearsals.items():
        lines += ["", f"## {name}: {rehearsal['verdict']}".rstrip(": "), ""]
        lines += ["| phase | outcome | seconds |", "|---|---|---|"]
        lines += [f"| {p['phase']} | {p['outcome']} | {p.get('seconds', '')} |" for p in rehearsal["phases"]]
        for phase in rehearsal["phases"]:
            for heading, key in (("problems", "problems"), ("left behind", "left_behind")):
                if phase.get(key):
                    lines += ["", f"### {name}, {phase['phase']}: {heading}", *(f"- {item}" for item in phase[key])]
    return "\n".join(lines) + "\n"


def write_report(state: RehearsalState, run_dir: Path) -> dict[str, Any]:
    """Write the JSON and Markdown reports into the run's directory; the summary."""
    summary = summarize(state)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / REPORT_JSON).write_text(json.dumps(summary, indent=2))
    (run_dir / REPORT_MARKDOWN).write_text(render_markdown(summary))
    return summary
