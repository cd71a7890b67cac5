"""The canary gate: may the DRA path take more traffic? Four rules, each with its figure, its threshold and pass/hold.

1. **Latency.** Allocation p95 and pod-ready p95 of the DRA path against the baseline path. Both paths are measured
   by the device-plugin rollback rehearsal's canary measurement (`suites/rollback/test_device_plugin_rollback.py`,
   phase `after_change`): the same workload (one unit of an extended resource) on the device-plugin path and on the
   DRA path, one pod at a time, in the same run on the same cluster. Pod-ready is creation to Ready as the
   rehearsal timed it; allocation is creation to bound, read from the audit log (the scheduler binds only after it
   has written the claim's allocation, so on the DRA path this includes the device decision). Without a baseline
   (no rehearsal in this run or its state file, or no baseline sample got there) the threshold is the configured
   SLO instead; allocation is then taken from every pod of this run the scheduler allocated claims for, pod-ready
   has no data (the suites' own pods include prepares delayed or failed on purpose, so only the canary measurement
   says how long a pod takes to get Ready).
   Tolerance: the DRA p95 may exceed the baseline p95 by 25 % or 0.25 s, whichever is larger. The relative part is
   what a canary may cost on real nodes, where pod-ready is seconds; the absolute part covers the DRA path's fixed
   extra API writes (the claim the scheduler creates, its allocation) and the noise of a p95 over 8 samples (the
   slowest sample), which on fake nodes is all there is: five rehearsals on 2 shared cores measured device-plugin
   p95 0.09-0.13 s and DRA p95 0.11-0.33 s for the same pods.
2. **Errors against a budget** (default 0): status-writer denials (403) and status update errors of the driver
   under test, and allocation timeouts. Counted over the whole run, but only the driver under test's own identity
   (its profile's ServiceAccount) in the audit log: the checks that provoke denials on purpose (the RBAC matrix,
   least privilege, private reference drivers with faults) all act as identities of their own, created per test,
   so nothing they provoke is counted, while everything the driver under test did in any check is. A narrower
   window (the canary measurement alone) would count nothing on fake nodes, where no kubelet makes the driver write
   status. Conflicts (409), writes to a claim already gone (404) and throttling (429) are the optimistic-concurrency
   and flow-control protocol every writer meets and retries, not errors. Faults the API fault proxy injects never
   reach the API server, so they are not in its audit log. Checks that make the driver under test itself meet a
   refusal on purpose (asking it to prepare a claim of another node, say) declare it (`provokes` marker): errors
   in their namespace within their window are excluded and listed as excluded; whether the driver turned the
   refusal into something worse is that check's own finding. Allocation timeouts are the scheduler's
   `FailedScheduling` events "timed out trying to allocate devices" seen during the run; no check provokes them.
3. **Job-start failures after successful allocation**, against the baseline: canary pods that were bound (allocated)
   but never got Ready, on the DRA path, no more than on the device-plugin path.
4. **Device-plugin rollback rehearsed**: yes with its date when the device-plugin rollback (DRA -> device plugin,
   `suites/rollback/test_device_plugin_rollback.py`) recorded all its phases and rolled back cleanly. The metrics
   API rollback (metrics.k8s.io v1 -> v1beta1) the same rollback report may hold is not this rule's: the summary
   reports it apart, under its own name.
5. **Kubelet-observed prepare p95**: the kubelets of the real nodes measure every NodePrepareResources call they
   make to the driver under test (`kubelet.dra_metrics`); its p95 over the run, against a fallback SLO of 2 s, is
   printed next to the suite's own client-side p95 of the calls it made playing the kubelet on fake nodes. 2 s: a
   pod's start has 5 s (the pod-ready SLO above), of which allocation takes up to 1 s, and the sandbox and
   container start need the rest; the kubelet's histogram has a bucket bound at 1.995 s, so the figure is not a
   bucket's rounding away from the threshold. Windows of checks that slow or fail calls on purpose (the kubelet-side
   interposer) are taken out.
6. **Kubelet gRPC errors**: the kubelet's calls to the driver under test that did not end OK, over the same window,
   against the error budget.

The gate passes only when every rule passes; a rule that holds holds the gate; a rule without data makes it
incomplete (do not widen either), never a silent pass. The rules are pure functions of `Inputs` (`canary.inputs`);
the plugin gathers those (the audit log through `canary.audit.gather_audit`, Events through the watch in
`canary.events`, the rehearsal's report or state file) and hands them to `evaluate`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from dra_conformance.canary.inputs import Inputs
from dra_conformance.kubelet.dra_metrics import PREPARE, KubeletRun, describe_seconds, figures
from dra_conformance.model.stats import percentile
from dra_conformance.rollback.extended_resource import DEVICE_PLUGIN, DRA

# Tolerances and defaults (see the module docstring for why).
TOLERANCE_RATIO = 0.25
TOLERANCE_SECONDS = 0.25
# Fallback SLOs, used only where no baseline was measured. Pod-ready: the Kubernetes scalability SLO for pod startup
# (5 s at p99 for stateless pods with images present), taken at p95 here. Allocation (creation to bound): 1 s at p95,
# a fifth of it, since everything after binding (prepare, container start) also has to fit in the 5 s.
ALLOCATION_SLO = 1.0
READY_SLO = 5.0
PREPARE_SLO = 2.0
ERROR_BUDGET = 0

# The device plugin <-> DRA rehearsal's name in a rollback report that holds several (rollback.state).
DRA_REHEARSAL = "device-plugin-dra"
# How reports name that rehearsal, apart from the metrics API rollback (v1 -> v1beta1) the same report may hold,
# and rule 4, which judges it alone.
DEVICE_PLUGIN_ROLLBACK = "device-plugin rollback (DRA -> device plugin)"
REHEARSAL_RULE = "device-plugin rollback rehearsed"
# How many examples of a counted error the report lists.
EXAMPLES = 5


class RuleResult(StrEnum):
    """One rule's outcome."""

    PASS = "pass"
    HOLD = "hold"
    NO_DATA = "no data"


class GateVerdict(StrEnum):
    """The gate's outcome."""

    PASS = "pass"
    HOLD = "hold"
    INCOMPLETE = "incomplete"


@dataclass(frozen=True)
class Policy:
    """Tolerance, fallback SLOs and error budget."""

    tolerance_ratio: float = TOLERANCE_RATIO
    tolerance_seconds: float = TOLERANCE_SECONDS
    allocation_slo: float = ALLOCATION_SLO
    ready_slo: float = READY_SLO
    prepare_slo: float = PREPARE_SLO
    error_budget: int = ERROR_BUDGET

    def limit(self, baseline: float) -> float:
        """The highest DRA p95 the baseline p95 allows."""
        return round(max(baseline * (1 + self.tolerance_ratio), baseline + self.tolerance_seconds), 3)


@dataclass(frozen=True)
class Rule:
    """A rule's figure, its threshold, its result, and why when it has no data or a fallback applies."""

    rule: str
    figure: str
    threshold: str
    result: RuleResult
    why: str = ""


def p95(values: list[float]) -> float | None:
    """The nearest-rank p95 (`model.stats`), None for no values (over 8 samples, p95 is the slowest)."""
    return percentile(values, 0.95) if values else None


NO_REHEARSAL = (
    "no canary measurement (the device-plugin rollback rehearsal measures both paths: none in this run or "
    "--dra-rollback-state)"
)


def _canary(inputs: Inputs) -> dict[str, Any] | None:
    baseline = (inputs.rollback or {}).get("canary_baseline")
    return baseline if isinstance(baseline, dict) and DRA in baseline and DEVICE_PLUGIN in baseline else None


def _not_comparable(canary: dict[str, Any]) -> str:
    """Why the two paths' latencies cannot be compared (they ran on different kinds of kubelet), or ""."""
    kinds = {path: canary[path].get("kubelet") for path in (DEVICE_PLUGIN, DRA)}
    if None in kinds.values() or kinds[DEVICE_PLUGIN] == kinds[DRA]:
        return ""
    return f"device-plugin baseline on a {kinds[DEVICE_PLUGIN]} kubelet, DRA path on a {kinds[DRA]} one: not comparable"


def _latency_rule(
    rule: str, dra: float | None, dra_source: str, baseline: float | None, slo: float, policy: Policy, why: str
) -> Rule:
    if baseline is not None:
        limit = policy.limit(baseline)
        threshold = (
            f"<= {limit} s (device-plugin p95 {baseline} s + max({policy.tolerance_ratio:.0%}, "
            f"{policy.tolerance_seconds} s))"
        )
    elif dra is None:
        limit, threshold = slo, f"<= {slo} s (configured SLO)"  # the rule's why already says what is missing
    else:
        limit, threshold = slo, f"<= {slo} s (configured SLO: {why or 'no baseline'})"
    if dra is None:
        return Rule(rule, "no data", threshold, RuleResult.NO_DATA, dra_source)
    result = RuleResult.PASS if dra <= limit else RuleResult.HOLD
    return Rule(rule, f"DRA p95 {dra} s ({dra_source})", threshold, result, why)


def allocation_rule(inputs: Inputs, policy: Policy) -> Rule:
    """Rule 1a: allocation (creation to bound) p95 of the DRA path."""
    name = "allocation p95"
    canary, audit = _canary(inputs), inputs.audit
    if audit is None:
        return Rule(
            name,
            "no data",
            f"<= {policy.allocation_slo} s (configured SLO) or the device-plugin baseline",
            RuleResult.NO_DATA,
            f"allocation is read from the audit log: {inputs.audit_missing}",
        )
    if canary is not None and audit.canary_allocation.get(DRA):
        dra_times = audit.canary_allocation[DRA]
        baseline = p95(audit.canary_allocation.get(DEVICE_PLUGIN, []))
        source = f"{len(dra_times)} canary pods"
        why = "no device-plugin canary pod was bound" if baseline is None else _not_comparable(canary)
        baseline = None if why else baseline
        return _latency_rule(name, p95(dra_times), source, baseline, policy.allocation_slo, policy, why)
    why = NO_REHEARSAL if canary is None else "the audit log holds no bound canary pod of the DRA path"
    times = audit.run_dra_allocation
    source = (
        f"{len(times)} pods of this run with claims the scheduler allocated"
        if times
        else ("no pod of this run had claims the scheduler allocated")
    )
    return _latency_rule(name, p95(times), source, None, policy.allocation_slo, policy, why)


def ready_rule(inputs: Inputs, policy: Policy) -> Rule:
    """Rule 1b: creation-to-Ready p95 of the DRA path (canary measurement only)."""
    name = "pod-ready p95"
    canary = _canary(inputs)
    if canary is None:
        return _latency_rule(name, None, NO_REHEARSAL, None, policy.ready_slo, policy, NO_REHEARSAL)
    dra, baseline = canary[DRA].get("ready_p95_seconds"), canary[DEVICE_PLUGIN].get("ready_p95_seconds")
    source = f"{canary[DRA].get('samples')} canary pods, {canary[DRA].get('failures')} never Ready"
    if dra is None:
        source = f"no DRA canary pod got Ready ({canary[DRA].get('samples')} tried)"
    why = "no device-plugin canary pod got Ready" if baseline is None else _not_comparable(canary)
    return _latency_rule(name, dra, source, None if why else baseline, policy.ready_slo, policy, why)


def error_rule(inputs: Inputs, policy: Policy) -> Rule:
    """Rule 2: denials, status update errors and allocation timeouts against the error budget."""
    name = "errors against budget"
    parts, missing, total = [], [], 0
    if inputs.audit is not None:
        audit = inputs.audit
        total += len(audit.denials) + len(audit.errors)
        parts.append(
            f"status-writer denials {len(audit.denials)}, status update errors {len(audit.errors)} "
            f"(of {audit.status_writes} status writes by {inputs.driver_user})"
        )
        if audit.excluded:
            parts.append(
                f"excluded as provoked by checks {len(audit.excluded)}: {', '.join(audit.excluded[:EXAMPLES])}"
            )
    else:
        missing.append(f"denials and status update errors: {inputs.audit_missing}")
    if inputs.events is not None:
        total += len(inputs.events.allocation_timeouts)
        parts.append(f"allocation timeouts {len(inputs.events.allocation_timeouts)}")
    else:
        missing.append(f"allocation timeouts: {inputs.events_missing}")
    threshold = f"<= {policy.error_budget} in total (error budget)"
    figure = "; ".join(parts) or "no data"
    examples = [*(inputs.audit.denials if inputs.audit else []), *(inputs.audit.errors if inputs.audit else [])]
    examples += inputs.events.allocation_timeouts if inputs.events else []
    seen = f" e.g. {', '.join(examples[:EXAMPLES])}" if examples else ""
    if total > policy.error_budget:
        return Rule(name, figure + seen, threshold, RuleResult.HOLD, "; ".join(missing))
    if missing:
        return Rule(name, figure, threshold, RuleResult.NO_DATA, "; ".join(missing))
    return Rule(name, figure, threshold, RuleResult.PASS)


def _failed_after_allocation(measured: dict[str, Any], bound: int | None) -> tuple[int, str]:
    samples, failures = int(measured.get("samples") or 0), int(measured.get("failures") or 0)
    if bound is None:
        return failures, f"{failures} of {samples} never Ready (bound or not: no audit log to tell)"
    after = max(0, bound - (samples - failures))
    return after, f"{after} of {bound} bound never Ready"


def job_start_rule(inputs: Inputs) -> Rule:
    """Rule 3: canary pods allocated but never Ready, DRA path against the device-plugin path."""
    name = "job-start failures after allocation"
    canary = _canary(inputs)
    if canary is None:
        return Rule(name, "no data", "<= the device-plugin path's", RuleResult.NO_DATA, NO_REHEARSAL)
    audit = inputs.audit
    dra, dra_text = _failed_after_allocation(canary[DRA], audit.canary_bound.get(DRA, 0) if audit else None)
    base, base_text = _failed_after_allocation(
        canary[DEVICE_PLUGIN], audit.canary_bound.get(DEVICE_PLUGIN, 0) if audit else None
    )
    result = RuleResult.PASS if dra <= base else RuleResult.HOLD
    return Rule(name, f"DRA {dra_text}", f"<= device plugin's {base} ({base_text})", result)


def rehearsal_rule(inputs: Inputs) -> Rule:
    """Rule 4: the device-plugin rollback was rehearsed (every phase recorded) and rolled back cleanly; its date."""
    name = REHEARSAL_RULE
    threshold = "yes, every phase recorded, rolled back cleanly"
    report = inputs.rollback
    if report is None:
        return Rule(
            name,
            "no (no device-plugin rollback rehearsal in this run nor in --dra-rollback-state)",
            threshold,
            RuleResult.HOLD,
        )
    phases = {p["phase"]: p for p in report.get("phases", [])}
    recorded = [name for name, p in phases.items() if p.get("outcome") != "not run"]
    last = phases.get("after_rollback", {})
    if last.get("outcome", "not run") == "not run":
        return Rule(name, f"no (phases recorded: {', '.join(recorded) or 'none'})", threshold, RuleResult.HOLD)
    # A report of several rehearsals keeps each one's verdict; the top level's phases are this one's.
    own = (report.get("rehearsals") or {}).get(DRA_REHEARSAL) or report
    started = phases.get("before", {}).get("started") or last.get("started")
    figure = f"yes, {started} to {last.get('started')}: {own.get('verdict')}"
    if own.get("failed_phase"):
        figure += f" (first failed phase {own['failed_phase']})"
    clean = own.get("verdict") == "rolled back cleanly"
    return Rule(name, figure, threshold, RuleResult.PASS if clean else RuleResult.HOLD)


def _suite_prepare(inputs: Inputs) -> str:
    measured = inputs.client_latency.get(PREPARE)
    if not measured:
        return "suite client-side: no prepare in this run"
    return f"suite client-side p95 {measured['p95'] * 1000:.1f} ms (n={measured['count']:.0f}, fake nodes)"


def _kubelet_excluded(run: KubeletRun) -> str:
    return f"; excluded: {len(run.excluded)} faulted checks' windows" if run.excluded else ""


def kubelet_prepare_rule(inputs: Inputs, policy: Policy) -> Rule:
    """Rule 5: the kubelets' own p95 of NodePrepareResources to the driver under test, beside the suite's."""
    name = "kubelet-observed prepare p95"
    threshold = f"<= {policy.prepare_slo} s (configured SLO)"
    suite = _suite_prepare(inputs)
    run = inputs.kubelet
    if run is None:
        return Rule(name, f"no data; {suite}", threshold, RuleResult.NO_DATA, inputs.kubelet_missing)
    found = figures(run.calls, inputs.driver).get(PREPARE)
    if found is None or found.p95 is None:
        why = f"the kubelets of {', '.join(run.nodes)} prepared no claim of {inputs.driver} in this run"
        return Rule(name, f"no data; {suite}", threshold, RuleResult.NO_DATA, why)
    figure = (
        f"kubelet p95 {describe_seconds(found.p95)} (n={found.count} on {', '.join(run.nodes)}"
        f"{_kubelet_excluded(run)}); {suite}"
    )
    return Rule(name, figure, threshold, RuleResult.PASS if found.p95 <= policy.prepare_slo else RuleResult.HOLD)


def kubelet_error_rule(inputs: Inputs, policy: Policy) -> Rule:
    """Rule 6: the kubelets' calls to the driver under test that did not end OK, against the error budget."""
    name = "kubelet gRPC errors"
    threshold = f"<= {policy.error_budget} (error budget)"
    run = inputs.kubelet
    if run is None:
        return Rule(name, "no data", threshold, RuleResult.NO_DATA, inputs.kubelet_missing)
    methods = figures(run.calls, inputs.driver)
    errors = sum(m.errors for m in methods.values())
    calls = "; ".join(f"{method}: {_codes(m.codes)}" for method, m in methods.items()) or "no call"
    figure = f"{errors} not OK of {sum(m.count for m in methods.values())} calls ({calls}{_kubelet_excluded(run)})"
    return Rule(name, figure, threshold, RuleResult.PASS if errors <= policy.error_budget else RuleResult.HOLD)


def _codes(codes: Mapping[str, float]) -> str:
    """`{'OK': 18.0, 'Unavailable': 1.0}` as "18 OK, 1 Unavailable"."""
    return ", ".join(f"{round(count)} {code}" for code, count in sorted(codes.items())) or "none"


def evaluate(inputs: Inputs, policy: Policy) -> dict[str, Any]:
    """The gate as a document: verdict, reasons, every rule, the policy it was judged by."""
    rules = [
        allocation_rule(inputs, policy),
        ready_rule(inputs, policy),
        error_rule(inputs, policy),
        job_start_rule(inputs),
        rehearsal_rule(inputs),
        kubelet_prepare_rule(inputs, policy),
        kubelet_error_rule(inputs, policy),
    ]
    holding = [r for r in rules if r.result == RuleResult.HOLD]
    lacking = [r for r in rules if r.result == RuleResult.NO_DATA]
    if holding:
        verdict, reasons = GateVerdict.HOLD, [f"{r.rule}: {r.figure} (threshold {r.threshold})" for r in holding]
    elif lacking:
        verdict, reasons = GateVerdict.INCOMPLETE, [f"{r.rule}: no data ({r.why})" for r in lacking]
    else:
        verdict, reasons = GateVerdict.PASS, ["every rule passed"]
    return {
        "state": str(verdict),
        "reasons": reasons,
        "rules": [{**asdict(r), "result": str(r.result)} for r in rules],
        "excluded": list(inputs.audit.excluded) if inputs.audit is not None else [],
        "policy": asdict(policy),
    }
