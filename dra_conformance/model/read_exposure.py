"""The read-exposure finding as the run's summary carries it: who reads ResourceClaims beyond their namespace.

The check (suites/rbac/test_read_exposure.py) records one entry of RECORD_KIND; the summary keeps three of its keys
under `read_exposure` (the fleet report reads exactly these): state, outside_allowlist, allowlist.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

RECORD_KIND = "read-exposure"
CLEAN = "clean"
EXPOSED = "exposed"
NOT_CHECKED = "not checked"
SUMMARY_KEYS = ("state", "outside_allowlist", "allowlist")


def summary_finding(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """`summary["read_exposure"]`: the run's last recorded finding, or "not checked" when the check did not run."""
    if not entries:
        return {"state": NOT_CHECKED, "outside_allowlist": [], "allowlist": "not read (the check did not run)"}
    return {key: entries[-1][key] for key in SUMMARY_KEYS}


def markdown_line(finding: dict[str, Any]) -> str:
    """The summary.md line: the state, and the subjects outside the allowlist."""
    state = finding["state"]
    if state == NOT_CHECKED:
        return f"- claim readers beyond their namespace: {state}"
    outside = finding["outside_allowlist"]
    named = f": {', '.join(outside)}" if outside else ""
    return (
        f"- claim readers beyond their namespace: {state}, {len(outside)} outside the allowlist "
        f"({finding['allowlist']}){named}"
    )
