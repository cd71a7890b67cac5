"""The metrics verdict's rules: the operator's decisions that the evidence makes, most urgent first."""

from __future__ import annotations

from collections.abc import Iterable

from dra_conformance.metrics.availability import MISSING, unavailable_reason
from dra_conformance.metrics.evidence import Evidence
from dra_conformance.metrics.reads import VERSIONS
from dra_conformance.metrics.watch import STABLE_AVAILABILITY_RATIO

DECISIONS = (
    # Over a watch; at the verdict's read the decision names what to fix: "fix first: v1 unavailable (<reason>)".
    "fix the metrics implementation first",
    "hold autoscaling changes and fix the pipeline",
    "keep serving v1beta1 alongside v1 (dual-serve)",
    "hold widening until 24 h of stable availability is shown",
    "safe to move consumers to v1",
)
# The decision an unavailable version makes at the verdict's read: "fix first: v1 unavailable (FailedDiscoveryCheck)".
FIX_FIRST = "fix first"


def unavailable_versions(evidence: Evidence) -> dict[str, str]:
    """Versions unavailable at the verdict's read, with the reason.

    v1 always counts (consumers move to it); another version once it is registered: a registered APIService that
    fails discovery breaks its readers, and namespace deletion cluster-wide.
    """
    found = {}
    for version in VERSIONS:
        condition = evidence.available.get(version, MISSING)
        reason = unavailable_reason(condition)
        if reason is not None and (version == "v1" or condition != MISSING):
            found[version] = reason
    return found


def fix_first(evidence: Evidence) -> str | None:
    """The first decision when a version is unavailable at the read, e.g. "fix first: v1 unavailable (<reason>)"."""
    unavailable = unavailable_versions(evidence)
    if not unavailable:
        return None
    return f"{FIX_FIRST}: " + "; ".join(f"{v} unavailable ({reason})" for v, reason in unavailable.items())


def asks_fix(decisions: Iterable[str]) -> bool:
    """Whether the verdict asks to fix the implementation first (at the read or over the watch)."""
    return any(d == DECISIONS[0] or d.startswith(f"{FIX_FIRST}:") for d in decisions)


def verdict(evidence: Evidence) -> list[str]:
    """The operator's decisions that apply, most urgent first (the last row only when nothing else applies).

    A version unavailable at the read makes the first decision "fix first: <version> unavailable (<reason>)".
    A watch adds its figures: a needed version available below the stable ratio over the watch needs a fix; lag
    p95 over the SLO at any version holds autoscaling. Widening needs 24 h of stable availability watched.
    """
    decisions = []
    watch = evidence.watch
    needed = evidence.watched_versions()
    unavailable_in_watch = watch is not None and any(watch.ratio(v) < STABLE_AVAILABILITY_RATIO for v in needed)
    fix = fix_first(evidence)
    if fix is not None:
        decisions.append(fix)
    elif unavailable_in_watch:
        decisions.append(DECISIONS[0])
    stale = evidence.lag_p95 is not None and evidence.lag_p95 > evidence.slo
    stale_in_watch = watch is not None and any(
        w.lag_p95 is not None and w.lag_p95 > evidence.slo for w in watch.versions.values()
    )
    if stale or stale_in_watch or evidence.new_sample_seen is False:
        decisions.append(DECISIONS[1])
    if evidence.needs_v1beta1():
        decisions.append(DECISIONS[2])
    if watch is None or not watch.stable(needed, evidence.slo):
        decisions.append(DECISIONS[3])
    return decisions or [DECISIONS[4]]
