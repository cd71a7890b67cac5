"""Obligations a check verifies, each with its source: contract obligations fail, defensive ones are advisories.

*Contract*: what the API, its comments or the kubelet's documented behaviour require (a violation fails the check).
*Defensive*: behaviour beyond the contract that users want, e.g. refusing a claim of another node, which a kubelet
never sends. A violation is recorded as an advisory and fails the check only under the `strict` level.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dra_conformance.report.records import RunRecords
from dra_conformance.report.writer import Section

RECORD_KIND = "advisories"


class Basis(StrEnum):
    """Where an obligation comes from."""

    CONTRACT = "contract"
    DEFENSIVE = "defensive"


class ObligationFailed(AssertionError):
    """An obligation did not hold (a contract one, or a defensive one under strict)."""


@dataclass
class Obligations:
    """The obligations one check verifies; advisories go to the run report."""

    check: str
    strict: bool
    records: RunRecords

    def contract(self, holds: bool, obligation: str, observed: Any, source: str) -> None:
        """Fail the check unless `obligation` holds; `source` cites the contract (file:line upstream)."""
        if not holds:
            raise ObligationFailed(f"contract: {obligation} [{source}]; observed: {observed}")

    def defensive(self, holds: bool, obligation: str, observed: Any, source: str) -> None:
        """Record an advisory unless `obligation` holds; under strict, fail the check as well."""
        if holds:
            return
        self.records.add(
            RECORD_KIND,
            {"check": self.check, "obligation": obligation, "source": source, "observed": str(observed)},
        )
        if self.strict:
            raise ObligationFailed(f"defensive (strict): {obligation} [{source}]; observed: {observed}")


def summarize_advisories(entries: list[dict[str, Any]]) -> Section | None:
    """Defensive findings of the run: what the driver does beyond the contract that users would want otherwise."""
    if not entries:
        return None
    return Section(
        title=f"advisories: {len(entries)} defensive finding(s) (they fail only with --strictness strict)",
        lines=[f"{entry['check']}: {entry['obligation']}; observed: {entry['observed']}" for entry in entries],
        artifact="advisories.json",
        document=entries,
    )
