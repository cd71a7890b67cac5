"""One verdict from the parts of a split in-cluster run: the cluster-level part and one node-level part per node.

Each part's run wrote its own summary (`part-summary.json`) and its record (`part-record.json`, see
`sonobuoy/part.py`). The merge folds them into one list of check results and decides as a single run would
(`verdict.decide`, the engine every verdict comes from), over the whole selection:

- a check that ran on several nodes failed if it failed on any, errored if it errored on any; it passed only if it
  passed on every node where it ran (a node where it is not applicable ran nothing of it); it is not applicable
  only if it is not applicable everywhere;
- a check collected by a part that never finished it there did not run; the run was interrupted;
- the selection is whole only if the parts together selected every check: each part ran exactly its selection
  (`-m` of the split and nothing else), a cluster part ran, and a node part ran on at least one node;
- a part that ended without a summary (its pod could not start, its run crashed, Sonobuoy reported an error for
  it) leaves the run incomplete at best, with its reason;
- what a run decides beside the checks (advisories, cluster faults, unexpected driver exits) is the union of the
  parts'; the sections of the summary read elsewhere (canary gate, metrics verdict, rollback rehearsals, read
  exposure) are the cluster part's, which runs those suites.

The merged summary has the shape of a run's summary.json (the fleet report reads it as one), plus `parts`.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from dra_conformance.report.certification import suite_table
from dra_conformance.sonobuoy.part import Part, marker_expression, read_record
from dra_conformance.verdict import (
    CLUSTER_FAULT,
    CheckResult,
    Findings,
    Outcome,
    RunFacts,
    Selection,
    Verdict,
    capability_table,
    judge,
)

# Which outcome of a check on several nodes stands: the first of these it had anywhere. A skip with a reason that is
# no fault (not applicable, or skipped with its reason) means the check did not run there.
_STANDS = (Outcome.FAILED, Outcome.ERROR)
_NOT_RUN = (Outcome.SKIPPED, Outcome.NOT_APPLICABLE)
# A verdict the merge may lower to incomplete when a part is missing.
_CERTIFYING = (Verdict.CERTIFIED, Verdict.CERTIFIED_WITH_ADVISORIES)


@dataclass(frozen=True)
class PartRun:
    """One part as retrieved: its summary and record, or why it has none."""

    part: Part
    # The node a node part ran on (None for the cluster part).
    node: str | None = None
    summary: dict[str, Any] | None = None
    record: dict[str, Any] | None = None
    # Why the part has no summary (Sonobuoy's error for it, or the run's own last words); "" when it has one.
    problem: str = ""

    @property
    def label(self) -> str:
        """How reasons name the part: 'cluster' or 'node <name>'."""
        return f"node {self.node}" if self.part is Part.NODE else str(self.part)


@dataclass
class _Part:
    """A part's checks as the merge reads them."""

    run: PartRun
    collected: list[str] = field(default_factory=list)
    results: dict[str, CheckResult] = field(default_factory=dict)
    filters: dict[str, str] = field(default_factory=dict)
    stopped: str = ""


def _read(run: PartRun) -> _Part:
    """The part's checks: from its record; where it has none, its summary's outcomes without capabilities."""
    read = _Part(run)
    summary = run.summary or {}
    outcomes = {str(k): str(v) for k, v in (summary.get("tests") or {}).items()}
    if run.record is not None:
        read.collected, read.filters, read.stopped, read.results = read_record(run.record)
    else:
        read.collected = sorted(outcomes)
        read.results = {nodeid: CheckResult(nodeid, Outcome(outcome)) for nodeid, outcome in outcomes.items()}
    for nodeid, outcome in outcomes.items():
        # The summary has the last word: a failure while the control plane was unhealthy is the cluster's fault.
        result = read.results.get(nodeid)
        if result is not None and str(result.outcome) != outcome:
            read.results[nodeid] = dataclasses.replace(
                result,
                outcome=Outcome(outcome),
                obligation=CLUSTER_FAULT if outcome == Outcome.ERROR else result.obligation,
                obligation_capability="" if outcome == Outcome.ERROR else result.obligation_capability,
            )
    return read


def combine(nodeid: str, found: list[tuple[str, CheckResult | None]]) -> CheckResult | None:
    """One check's result over the parts that collected it ((label, result or None where it never finished)).

    None: it never finished somewhere, and failed nowhere.
    """
    present = [(label, r) for label, r in found if r is not None]
    capabilities = tuple(sorted({c for _, r in present for c in r.capabilities}))
    several = len(found) > 1

    def where(label: str, result: CheckResult) -> CheckResult:
        reason = f"{label}: {result.reason}" if several and result.reason else result.reason
        return dataclasses.replace(result, reason=reason, capabilities=capabilities)

    for outcome in _STANDS:
        deciding = [(label, r) for label, r in present if r.outcome == outcome]
        if deciding:
            return where(*deciding[0])
    if len(present) < len(found):
        return None
    silent = [(label, r) for label, r in present if r.silent]
    if silent:
        return where(*silent[0])
    if any(r.outcome == Outcome.PASSED for _, r in present):
        return CheckResult(nodeid, Outcome.PASSED, "", capabilities)
    for outcome in _NOT_RUN:
        skipped = [(label, r) for label, r in present if r.outcome == outcome]
        if skipped:
            return where(*skipped[0])
    return None


def _facts(summary: dict[str, Any]) -> RunFacts:
    """The run's facts as a summary records them (fields it lacks keep their defaults)."""
    run = dict(summary.get("run") or {})
    known = {f.name for f in dataclasses.fields(RunFacts)}
    values = {key: value for key, value in run.items() if key in known}
    values["declared"] = tuple(values.get("declared") or ())
    values["harness_capabilities"] = tuple(values.get("harness_capabilities") or RunFacts.harness_capabilities)
    return RunFacts(**values)


def _selection(parts: list[_Part], summaries: list[dict[str, Any]], node_part_expected: bool) -> Selection:
    """The merged selection: every check any part collected; what the parts together left out."""
    collected = sorted({nodeid for part in parts for nodeid in part.collected})
    left_out = []
    for part in parts:
        extra = []
        expected = marker_expression(part.run.part)
        if part.filters.get("-m", "") != (expected or ""):
            extra.append(f"-m {part.filters.get('-m')!r}")
        if part.filters.get("-k"):
            extra.append(f"-k {part.filters['-k']!r}")
        if extra:
            left_out.append(f"{part.run.label} ran {' '.join(extra)}")
    kinds = {part.run.part for part in parts}
    if Part.CLUSTER not in kinds and Part.WHOLE not in kinds:
        left_out.append("the cluster-level checks ran nowhere (no cluster part with a summary)")
    if node_part_expected and Part.NODE not in kinds and Part.WHOLE not in kinds:
        left_out.append("the node-level checks ran on no node (no node part with a summary)")
    not_run = [set((s.get("accounting") or {}).get("suites_not_run") or ()) for s in summaries]
    suites_not_run = tuple(sorted(set.intersection(*not_run))) if not_run else ()
    stopped = "; ".join(f"{part.run.label}: {part.stopped}" for part in parts if part.stopped)
    return Selection(
        collected=tuple(collected), suites_not_run=suites_not_run, stopped=stopped, filtered_by="; ".join(left_out)
    )


def _unique(items: list[Any]) -> list[Any]:
    kept: list[Any] = []
    for item in items:
        if item not in kept:
            kept.append(item)
    return kept


@dataclass(frozen=True)
class Merged:
    """The merged summary of a split run, and the findings its verdict was decided from.

    `findings` is None for a whole part's own summary: its run recorded its findings itself.
    """

    summary: dict[str, Any]
    findings: Findings | None


def merge_parts(runs: list[PartRun], node_part_expected: bool = True) -> dict[str, Any] | None:
    """The merged summary of `runs`; None when no part wrote a summary (then there is no verdict to give)."""
    merged = merge(runs, node_part_expected)
    return merged.summary if merged is not None else None


def merge(runs: list[PartRun], node_part_expected: bool = True) -> Merged | None:
    """The merged summary of `runs` and its findings; None when no part wrote a summary (no verdict to give).

    A run of one whole part (the plugin of `sonobuoy-plugin` without --part) is its own summary.
    """
    with_summary = [run for run in runs if run.summary is not None]
    if not with_summary:
        return None
    if len(runs) == 1 and runs[0].part is Part.WHOLE and runs[0].summary is not None:
        return Merged(runs[0].summary, None)
    base_run = next((run for run in with_summary if run.part is not Part.NODE), with_summary[0])
    base = base_run.summary
    assert base is not None
    summaries = [run.summary for run in with_summary if run.summary is not None]
    parts = [_read(run) for run in with_summary]
    labels = {id(part): part.run.label for part in parts}

    results = []
    for nodeid in sorted({nodeid for part in parts for nodeid in [*part.collected, *part.results]}):
        found = [
            (labels[id(part)], part.results.get(nodeid))
            for part in parts
            if nodeid in part.collected or nodeid in part.results
        ]
        combined = combine(nodeid, found)
        if combined is not None:
            results.append(combined)

    facts = _facts(base)
    selection = _selection(parts, summaries, node_part_expected)
    advisories = _unique([a for s in summaries for a in s.get("advisories") or []])
    faults = [f"{r.label}: {fault}" for r in with_summary for fault in (r.summary or {}).get("cluster_faults") or []]
    exits = [e for s in summaries for e in (s.get("driver_exits") or {}).get("unexpected") or []]
    caused = [e for s in summaries for e in (s.get("driver_exits") or {}).get("caused_by_checks") or []]
    capabilities = capability_table(results, facts)
    # Each part's windows in which an instance of the driver did not answer (run.driver-answers), part by part.
    silent = [{**x, "describe": f"{r.label}: {x['describe']}"} for r in with_summary for x in _silences(r.summary)]
    unanswered = [str(x["describe"]) for x in silent]
    broken = [f"{run.label}: no verdict ({run.problem})" for run in runs if run.summary is None]
    # A part without a verdict leaves its checks out of the selection: recorded so, `dra-conformance verdict` on the
    # merged run decides as the merge does.
    recorded = dataclasses.replace(selection, filtered_by="; ".join(filter(None, [selection.filtered_by, *broken])))
    findings = Findings(
        checks=results,
        declared=facts.declared,
        harness_capabilities=facts.harness_capabilities,
        selection=recorded,
        advisories=advisories,
        cluster_faults=faults,
        driver_exits=exits,
        driver_silences=unanswered,
    )
    verdict, reasons = judge(dataclasses.replace(findings, selection=selection))
    if broken:
        if verdict in _CERTIFYING:
            verdict, reasons = Verdict.INCOMPLETE, broken
        else:
            reasons = [*reasons, *broken]
    finished = [str(s["run"]["finished_at"]) for s in summaries if (s.get("run") or {}).get("finished_at")]
    never = selection.never_run(results)
    run = {**(base.get("run") or {}), "finished_at": max(finished) if finished else None}
    summary = {
        **base,
        "verdict": str(verdict),
        "reasons": reasons,
        "cluster_faults": faults,
        "driver_exits": {"unexpected": exits, "caused_by_checks": caused},
        "driver_silences": silent,
        "advisories": advisories,
        "run": run,
        "totals": dict(Counter(str(r.outcome) for r in results)),
        "accounting": {
            "collected": len(selection.collected),
            "finished": len(selection.collected) - len(never),
            "never_run": len(never),
            "deselected": 0,
            "suites_not_run": list(selection.suites_not_run),
        },
        "tests": {r.nodeid: str(r.outcome) for r in results},
        "capabilities": capabilities,
        "suites": suite_table(results),
        "parts": [_part_line(run) for run in runs],
    }
    return Merged(summary, findings)


def _part_line(run: PartRun) -> dict[str, Any]:
    """What the merged summary says of one part."""
    summary = run.summary or {}
    return {
        "part": str(run.part),
        "node": run.node,
        "verdict": summary.get("verdict"),
        "totals": summary.get("totals") or {},
        "finished_at": (summary.get("run") or {}).get("finished_at"),
        "problem": run.problem,
    }


def _silences(summary: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A part's silences of the driver (none in summaries written before the driver's answers were watched)."""
    return [x for x in (summary or {}).get("driver_silences") or [] if isinstance(x, dict) and "describe" in x]
