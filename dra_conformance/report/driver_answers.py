"""The summary's part about a driver that stopped answering (`run.driver-answers`): each window and who cites it."""

from __future__ import annotations

from typing import Any, Protocol

from dra_conformance.driver.answers import DRIVER_ANSWERS


class _Cited(Protocol):
    nodeid: str
    reason: str


def section(silences: list[dict[str, Any]], results: list[Any]) -> list[dict[str, Any]]:
    """Each silence (`Silence.to_json`) with the checks that failed or errored within it, by their citation."""
    return [
        {**silence, "checks": sorted(r.nodeid for r in results if silence["citation"] in r.reason)}
        for silence in silences
    ]


def markdown_lines(silences: list[dict[str, Any]]) -> list[str]:
    """One heading per silence, then the checks that failed within it."""
    lines = []
    for silence in silences:
        lines += [f"## The driver did not answer ({DRIVER_ANSWERS}): {silence['describe']}", ""]
        checks = silence.get("checks") or []
        lines += [f"Checks that failed or errored within it ({len(checks)}):", ""] if checks else []
        lines += [*(f"- {nodeid}" for nodeid in checks), ""] if checks else []
    return lines
