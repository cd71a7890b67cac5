"""The explored space in the run's summary: what the model-based explorer (suites/explore) did, from its records.

The explorer's check records one exploration each time it runs (`dra_conformance.explore.RECORD_KIND`); the summary
says how much was explored (examples, steps, operations drawn by kind, claim shapes, shrinking, invariants checked,
what was not explored and why) and with which seed: what a verdict that rests on the exploration rests on.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from dra_conformance.explore import RECORD_KIND
from dra_conformance.model.records import read_records


def explored_space(run_dir: Path) -> dict[str, Any]:
    """The summary's `exploration` entry: each exploration of the run, and the figures of them all ("not run")."""
    records = read_records(run_dir, RECORD_KIND)
    if not records:
        return {"state": "not run"}
    operations: Counter[str] = Counter()
    shapes: Counter[str] = Counter()
    for record in records:
        operations.update(record.get("operations") or {})
        shapes.update(record.get("shapes") or {})
    return {
        "state": "ran",
        "examples": sum(int(r.get("examples", 0)) for r in records),
        "steps": sum(int(r.get("steps", 0)) for r in records),
        "shrink_examples": sum(int(r.get("shrink_examples", 0)) for r in records),
        "shrink_steps": sum(int(r.get("shrink_steps", 0)) for r in records),
        "invariant_checks": sum(int(r.get("invariant_checks", 0)) for r in records),
        "verdicts": sum(int(r.get("stated", 0)) for r in records),
        "operations": dict(operations.most_common()),
        "shapes": dict(shapes.most_common()),
        "explorations": [
            {
                "check": r.get("check"),
                "node": r.get("node"),
                "seed": r.get("seed"),
                "budget": r.get("budget"),
                "seconds": r.get("seconds"),
                "obligations_checked": len(r.get("exercised") or []),
                "not_explored": r.get("not_explored") or {},
                "finding": (r.get("finding") or {}).get("obligation"),
                "reproduce": r.get("reproduce"),
            }
            for r in records
        ],
    }


def _figures(space: dict[str, Any]) -> str:
    shrinking = (
        f", shrinking {space['shrink_examples']} examples ({space['shrink_steps']} steps)"
        if space.get("shrink_examples")
        else ""
    )
    seeds = ", ".join(str(e["seed"]) for e in space["explorations"])
    return (
        f"{space['examples']} sequences, {space['steps']} steps{shrinking}, {len(space['operations'])} operation "
        f"kinds, {len(space['shapes'])} claim shapes, {space['invariant_checks']} invariant checks; seed {seeds}"
    )


def exploration_markdown(space: dict[str, Any] | None) -> list[str]:
    """The summary.md section: the figures, operations drawn by kind, shapes, what was not explored, how to replay."""
    if not space or space.get("state") != "ran":
        return []
    lines = ["## Explored space (suites/explore)", "", f"- {_figures(space)}"]
    lines.append("- operations: " + ", ".join(f"{name} {n}" for name, n in space["operations"].items()))
    lines.append(
        "- claim shapes (devices per request; a: admin access, o: the other driver's): "
        + ", ".join(f"{shape} x{n}" for shape, n in space["shapes"].items())
    )
    for exploration in space["explorations"]:
        lines += [f"- not explored: {what}: {why}" for what, why in exploration["not_explored"].items()]
        found = f"finding {exploration['finding']}" if exploration["finding"] else "no finding"
        lines.append(
            f"- {exploration['node']}: {exploration['seconds']} s, {exploration['obligations_checked']} obligations "
            f"checked, {found}; replay: `{exploration['reproduce']}`"
        )
    return [*lines, ""]


def exploration_terminal_line(space: dict[str, Any] | None) -> list[str]:
    """One line for the end of the run, where the explorer ran."""
    if not space or space.get("state") != "ran":
        return []
    return [f"  explored: {_figures(space)}"]
