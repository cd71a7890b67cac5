"""The run report's advisories section: the defensive findings the obligations checker recorded."""

from __future__ import annotations

from typing import Any

from dra_conformance.model.records import Section


def summarize_advisories(entries: list[dict[str, Any]]) -> Section | None:
    """Defensive findings of the run: what the driver does beyond the contract that users would want otherwise."""
    if not entries:
        return None
    return Section(
        title=f"advisories: {len(entries)} defensive finding(s) (they fail only with --dra-strictness strict)",
        lines=[
            f"{entry.get('id', '-')}: {entry['check']}: {entry['obligation']}; observed: {entry['observed']}"
            for entry in entries
        ],
        artifact="advisories.json",
        document=entries,
    )
