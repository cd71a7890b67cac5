"""What the canary gate decides from (`Inputs`), each input's facts, and the checks' declared provocations.

The plugin fills these: the audit log's facts through `canary.audit`, the Events' through `canary.events`, the
kubelets' view through `kubelet.dra_metrics`; `canary.rules` judges them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dra_conformance.kubelet.dra_metrics import KubeletRun

# Run records of checks that provoke refusals on purpose (see `Provoked`).
PROVOKED_RECORDS = "provoked"


@dataclass
class AuditFacts:
    """What the gate reads from the audit log."""

    # Canary pods per path: creation-to-bound seconds, and how many were bound.
    canary_allocation: dict[str, list[float]] = field(default_factory=dict)
    canary_bound: dict[str, int] = field(default_factory=dict)
    # Every pod of the run the scheduler allocated claims for: creation-to-bound seconds.
    run_dra_allocation: list[float] = field(default_factory=list)
    # Status writes by the driver under test in the run, and those denied or failed ("ns/claim verb -> code").
    status_writes: int = 0
    denials: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # Denials and errors within a window a check declared it provokes: "attempt (provoked by check: what)".
    excluded: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Provoked:
    """A check's declaration that it makes the driver under test meet refusals in `namespace` between two times."""

    check: str
    what: str
    namespace: str
    since: datetime
    until: datetime

    def covers(self, namespace: str, when: datetime) -> bool:
        """Whether a write to `namespace` at `when` is one this check provoked."""
        return namespace == self.namespace and self.since <= when <= self.until


@dataclass
class EventFacts:
    """What the gate counted from events during the run."""

    # "namespace/pod" per occurrence of an allocation timeout.
    allocation_timeouts: list[str] = field(default_factory=list)


@dataclass
class Inputs:
    """Everything the gate decides from; a missing input comes with why it is missing."""

    driver_user: str
    rollback: dict[str, Any] | None = None
    audit: AuditFacts | None = None
    audit_missing: str = ""
    events: EventFacts | None = None
    events_missing: str = ""
    # The driver under test's name (the kubelet labels its calls with it), the kubelets' view of the run, and the
    # suite's own client-side latencies per method (`kubelet.latency.latency_figures`).
    driver: str = ""
    kubelet: KubeletRun | None = None
    kubelet_missing: str = "the kubelets were not read"
    client_latency: dict[str, dict[str, float]] = field(default_factory=dict)


def provocations(entries: Iterable[dict[str, Any]]) -> list[Provoked]:
    """The checks' declarations of what they provoke, from the run's records."""
    return [
        Provoked(
            e["check"],
            e["what"],
            e["namespace"],
            datetime.fromisoformat(e["since"]),
            datetime.fromisoformat(e["until"]),
        )
        for e in entries
    ]
