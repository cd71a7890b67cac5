"""One run as a point of the nightly history: its verdict and the figures the history plots, read from summary.json.

Every figure comes from a field the summary already holds; where a run has no figure (no data, an older summary,
a section that was not run) the field is None, which the plots draw as a gap, never as zero.

- allocation p95 and pod-ready p95: the canary gate's rules `allocation p95` and `pod-ready p95`: the figure
  ("DRA p95 0.028 s (...)"), its limit ("<= 1.0 s (...)"), and the device-plugin baseline p95 where the threshold
  was derived from one ("(device-plugin p95 0.12 s + ...)");
- kubelet prepare p95: rule `kubelet-observed prepare p95` ("kubelet p95 0.42 s", or "kubelet p95 <= 0.1 s" where
  every call fell in the histogram's lowest bucket: the bound is taken as the figure);
- error budget used: rule `errors against budget`, the sum of its counts (denials, status update errors,
  allocation timeouts), against the gate policy's `error_budget`;
- metrics freshness p95: the metrics verdict's `evidence.lag_p95` against its `evidence.slo`;
- flake rate: the share of tests that were flaky, where the summary's `flake_record` holds a record over repeated
  runs (`run --repeat N`); a summary of a single run says "one run" and has no rate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dra_conformance.report.fleet.runs import FleetRun
from dra_conformance.report.fleet.sources import FoundSummary

ALLOCATION_RULE = "allocation p95"
READY_RULE = "pod-ready p95"
PREPARE_RULE = "kubelet-observed prepare p95"
ERRORS_RULE = "errors against budget"
# "DRA p95 0.028 s", "kubelet p95 <= 0.1 s", "kubelet p95 0.42 s"
_P95 = re.compile(r"p95 (?:<= )?(\d+(?:\.\d+)?) s\b")
_LIMIT = re.compile(r"^<= (\d+(?:\.\d+)?) s\b")
_BASELINE = re.compile(r"device-plugin p95 (\d+(?:\.\d+)?) s")
_COUNTS = re.compile(r"(?:denials|errors|timeouts) (\d+)")
_BUDGET = re.compile(r"^<= (\d+(?:\.\d+)?) in total")


@dataclass(frozen=True)
class Figures:
    """A run's plotted figures; None where the run has none."""

    allocation_p95: float | None = None
    allocation_baseline: float | None = None
    allocation_limit: float | None = None
    ready_p95: float | None = None
    ready_baseline: float | None = None
    ready_limit: float | None = None
    prepare_p95: float | None = None
    prepare_limit: float | None = None
    errors_used: float | None = None
    error_budget: float | None = None
    freshness_p95: float | None = None
    freshness_slo: float | None = None
    flake_rate: float | None = None


@dataclass(frozen=True)
class Night:
    """One run of one cluster and driver, as the history stores it (keyed by run id and cluster)."""

    run_id: str
    cluster: str
    driver: str
    finished_at: datetime
    verdict: str
    canary_gate: str
    figures: Figures
    source: str


def night_of(found: FoundSummary, run: FleetRun) -> Night:
    """The history's point for one run: `run` is what the fleet table read from the same summary."""
    summary = found.document
    return Night(
        run_id=run_id(found),
        cluster=run.cluster,
        driver=run.driver,
        finished_at=run.finished_at,
        verdict=run.verdict,
        canary_gate=run.canary_gate,
        figures=figures_of(summary),
        source=found.source,
    )


def run_id(found: FoundSummary) -> str:
    """The run's id: the name of its directory (`reports/<run-id>/`), else `run.run_dir`'s, else where it was read."""
    if found.run_dir:
        return found.run_dir
    run_dir = _mapping(found.document).get("run_dir")
    if isinstance(run_dir, str) and run_dir.strip("/"):
        return run_dir.rstrip("/").rsplit("/", 1)[-1]
    return found.source


def figures_of(summary: dict[str, Any]) -> Figures:
    """Every figure the summary holds (see the module docstring for where each comes from)."""
    gate = _mapping(summary.get("canary_gate"))
    rules = {str(_mapping(rule).get("rule")): _mapping(rule) for rule in gate.get("rules") or []}
    policy = _mapping(gate.get("policy"))
    allocation, allocation_baseline, allocation_limit = _latency(rules.get(ALLOCATION_RULE))
    ready, ready_baseline, ready_limit = _latency(rules.get(READY_RULE))
    prepare, _, prepare_limit = _latency(rules.get(PREPARE_RULE))
    errors_used, budget = _errors(rules.get(ERRORS_RULE), policy)
    evidence = _mapping(_mapping(summary.get("metrics_verdict")).get("evidence"))
    return Figures(
        allocation_p95=allocation,
        allocation_baseline=allocation_baseline,
        allocation_limit=allocation_limit,
        ready_p95=ready,
        ready_baseline=ready_baseline,
        ready_limit=ready_limit,
        prepare_p95=prepare,
        prepare_limit=prepare_limit,
        errors_used=errors_used,
        error_budget=budget,
        freshness_p95=_number(evidence.get("lag_p95")),
        freshness_slo=_number(evidence.get("slo")),
        flake_rate=flake_rate(summary.get("flake_record")),
    )


def _latency(rule: dict[str, Any] | None) -> tuple[float | None, float | None, float | None]:
    """(figure, baseline, limit) of a latency rule; the figure is None where the rule had no data."""
    if not rule:
        return None, None, None
    figure, threshold = str(rule.get("figure") or ""), str(rule.get("threshold") or "")
    value = _P95.search(figure) if rule.get("result") != "no data" else None
    limit, baseline = _LIMIT.search(threshold), _BASELINE.search(threshold)
    return (
        float(value.group(1)) if value else None,
        float(baseline.group(1)) if baseline else None,
        float(limit.group(1)) if limit else None,
    )


def _errors(rule: dict[str, Any] | None, policy: dict[str, Any]) -> tuple[float | None, float | None]:
    """(errors counted against the budget, the budget); no count where the rule read none of its inputs."""
    budget = _number(policy.get("error_budget"))
    if not rule:
        return None, budget
    if budget is None:
        found = _BUDGET.search(str(rule.get("threshold") or ""))
        budget = float(found.group(1)) if found else None
    counts = _COUNTS.findall(str(rule.get("figure") or ""))
    return (float(sum(int(n) for n in counts)) if counts else None), budget


def flake_rate(record: Any) -> float | None:
    """Flaky tests over the tests that passed or failed, where the record spans repeated runs; else None."""
    found = _mapping(record)
    flaky, failing, stable = found.get("flaky"), found.get("failing"), found.get("stable")
    if not isinstance(flaky, list) or not isinstance(failing, list) or not isinstance(stable, int):
        return None
    counted = len(flaky) + len(failing) + stable
    return round(len(flaky) / counted, 4) if counted else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
