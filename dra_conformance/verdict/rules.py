"""The verdict's rules, as data: the first rule of RULES that has reasons decides, and gives them.

- not certified: the driver exited unexpectedly or stopped answering (whatever else the run saw);
- incomplete: the control plane failed under the run (failures outside the fault's time are still listed);
- not certified: a failure (a contract obligation, or a defensive one under strict), named by obligation id, or a
  declared capability that failed its checks;
- incomplete: nothing the driver did wrong, but the run cannot certify it: collected checks that never finished
  (an interrupted run, `-x`, a crashed worker) or a subset of the bundled suites (`-k`, a path);
- incomplete: a check the suite's identity had no rights for, a check that errored (a harness precondition, a
  fixture that could not set up, a harness error: anything raised that names no obligation), a silent skip, or a
  declared capability no check exercised here (a limit of the suite or the backend);
- certified with advisories: nothing of the above, with defensive findings (what users want beyond the contract);
- certified: every check passed or is not applicable with its reason, every declared capability passed.

Two contracts, two verdicts: the checks of the resource Metrics API (`findings.about_metrics`) feed the metrics
verdict only; these rules decide the driver's without them. Which checks never ran is counted over the whole
selection: a run that stopped early cannot certify either way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dra_conformance.verdict.findings import (
    CLUSTER_FAULT,
    DRIVER_ANSWERS,
    DRIVER_STAYS_UP,
    HARNESS_ERROR,
    IDENTITY_LACKS,
    WORKER_CRASH,
    CheckResult,
    Findings,
    Outcome,
    Selection,
    Verdict,
    capability_states,
    every_failure_named,
    split_contracts,
)


@dataclass(frozen=True)
class Seen:
    """What the rules read of a run: its driver's checks, and what else happened to it."""

    # The driver's checks (every failure named), and every check of the run (the Metrics API's too).
    results: list[CheckResult]
    everything: list[CheckResult]
    capabilities: dict[str, dict[str, Any]]
    advisories: list[dict[str, Any]]
    selection: Selection | None
    cluster_faults: list[str]
    driver_exits: list[dict[str, Any]]
    driver_silences: list[str]

    def with_outcome(self, outcome: Outcome) -> list[CheckResult]:
        """The driver's checks that ended so."""
        return [r for r in self.results if r.outcome == outcome]


@dataclass(frozen=True)
class Rule:
    """One verdict and when it holds: `reasons` gives why, or [] when the rule does not apply to the run."""

    verdict: Verdict
    when: str
    reasons: Callable[[Seen], list[str]]


def _by_obligation(results: list[CheckResult]) -> list[str]:
    """'<id> (<n> checks)' per obligation that decided these results, most frequent first."""
    counted = Counter(r.obligation or "no registry obligation" for r in results)
    return [f"{obligation} ({n} check{'s' if n > 1 else ''})" for obligation, n in counted.most_common()]


def _failed(seen: Seen, where: str = "") -> list[str]:
    failed = seen.with_outcome(Outcome.FAILED)
    return [f"{len(failed)} check(s) failed{where}: " + ", ".join(_by_obligation(failed))] if failed else []


def _harness_error_reasons(seen: Seen) -> list[str]:
    """The harness errors, where another reason decided the verdict (they never decide "not certified")."""
    found = [r for r in seen.results if r.obligation == HARNESS_ERROR]
    return [f"{len(found)} harness error(s) ({HARNESS_ERROR}), e.g. {found[0].nodeid}"] if found else []


def _selection_reasons(seen: Seen) -> list[str]:
    """Why the selection cannot certify: checks that never ran, or a subset of the bundled suites."""
    selection = seen.selection
    if selection is None:
        return []
    reasons = []
    never = selection.never_run(seen.everything)
    if never:
        finished = len(selection.collected) - len(never)
        stopped = f" ({selection.stopped})" if selection.stopped else ""
        reasons.append(
            f"interrupted after {finished} of {len(selection.collected)} collected checks{stopped}: "
            f"{len(never)} never ran, e.g. {', '.join(never[:3])}"
        )
    if selection.deselected or selection.suites_not_run or selection.filtered_by:
        parts = [f"{selection.deselected} check(s) deselected"] if selection.deselected else []
        parts += [f"filtered by {selection.filtered_by}"] if selection.filtered_by else []
        parts += [f"suites not run: {', '.join(selection.suites_not_run)}"] if selection.suites_not_run else []
        reasons.append("a subset of the bundled suites (only a full selection certifies): " + "; ".join(parts))
    return reasons


def _driver_gone(seen: Seen) -> list[str]:
    unexpected = [e for e in seen.driver_exits if not e["caused_by_suite"]]
    exits = "; ".join(e["describe"] for e in unexpected)
    gone = [f"{DRIVER_STAYS_UP}: the driver exited unexpectedly {len(unexpected)} time(s): {exits}"] if exits else []
    gone += [f"{DRIVER_ANSWERS}: {silence}" for silence in seen.driver_silences]
    return gone + _failed(seen) + _harness_error_reasons(seen) if gone else []


def _cluster_fault(seen: Seen) -> list[str]:
    # The control plane failed under the run: it cannot certify, whatever else it saw; failures outside the fault's
    # time still count and are listed.
    if not seen.cluster_faults:
        return []
    affected = sum(r.obligation == CLUSTER_FAULT for r in seen.results)
    reasons = [f"{CLUSTER_FAULT}: {fault}" for fault in seen.cluster_faults]
    reasons.append(f"{affected} check(s) failed or errored during it: not the driver's failures")
    return reasons + _failed(seen, " outside it")


def _failures(seen: Seen) -> list[str]:
    failing = [c for c, row in seen.capabilities.items() if row["state"] == "failed"]
    if not (seen.with_outcome(Outcome.FAILED) or failing):
        return []
    reasons = _failed(seen) + [f"declared capability {c} failed its checks" for c in failing]
    return reasons + _selection_reasons(seen) + _harness_error_reasons(seen)


def _unselected(seen: Seen) -> list[str]:
    unselected = _selection_reasons(seen)
    if not unselected:
        return []
    crashed = [r for r in seen.with_outcome(Outcome.ERROR) if r.obligation == WORKER_CRASH]
    crash = [f"{WORKER_CRASH}: {crashed[0].reason}"] if crashed else []
    return unselected + crash + _harness_error_reasons(seen)


def _unjudged(seen: Seen) -> list[str]:
    # Checks skipped because the suite's own identity lacks rights (--allow-partial): the run could not judge them.
    unauthorized = [r for r in seen.results if r.outcome == Outcome.NOT_APPLICABLE and IDENTITY_LACKS in r.reason]
    errors = seen.with_outcome(Outcome.ERROR)
    silent = [r.nodeid for r in seen.results if r.silent]
    unproven = [c for c, row in seen.capabilities.items() if row["state"] != "passed"]
    reasons = (
        [
            f"{len(unauthorized)} check(s) not run because the suite's identity lacks rights, e.g. "
            f"{Counter(r.reason for r in unauthorized).most_common(1)[0][0]}"
        ]
        if unauthorized
        else []
    )
    reasons += (
        [f"{len(errors)} check(s) could not judge the driver (errors): " + ", ".join(_by_obligation(errors))]
        if errors
        else []
    )
    reasons += [f"{len(silent)} test(s) skipped without a reason: {silent[:3]}"] if silent else []
    return reasons + [f"declared capability {c}: {seen.capabilities[c]['state']}" for c in unproven]


def _advisories(seen: Seen) -> list[str]:
    counted = Counter(str(a.get("id") or a.get("obligation")) for a in seen.advisories)
    return [f"advisory {obligation} ({n} finding{'s' if n > 1 else ''})" for obligation, n in counted.most_common()] + (
        ["no contract obligation broke; every declared capability was exercised and passed"] if counted else []
    )


def _certified(seen: Seen) -> list[str]:
    return [
        "every check passed or is not applicable with its reason; every declared capability was exercised and passed"
    ]


# The verdict's precedence, first to last: the first rule with reasons decides.
RULES: tuple[Rule, ...] = (
    Rule(Verdict.NOT_CERTIFIED, "the driver exited unexpectedly or stopped answering", _driver_gone),
    Rule(Verdict.INCOMPLETE, "the control plane failed under the run", _cluster_fault),
    Rule(Verdict.NOT_CERTIFIED, "a check failed, or a declared capability did", _failures),
    Rule(Verdict.INCOMPLETE, "checks never finished, or the run was a subset of the bundled suites", _unselected),
    Rule(Verdict.INCOMPLETE, "checks errored, were silent or unauthorized, or a capability went unproven", _unjudged),
    Rule(Verdict.CERTIFIED_WITH_ADVISORIES, "defensive findings", _advisories),
    Rule(Verdict.CERTIFIED, "anything else", _certified),
)


def decide(
    results: list[CheckResult],
    capabilities: dict[str, dict[str, Any]],
    advisories: list[dict[str, Any]] | None = None,
    selection: Selection | None = None,
    cluster_faults: list[str] | None = None,
    driver_exits: list[dict[str, Any]] | None = None,
    driver_silences: list[str] | None = None,
) -> tuple[Verdict, list[str]]:
    """The verdict and the reasons for it, naming the obligations that decided it (the first of RULES that holds).

    `capabilities` is the table `findings.capability_table` makes of the same results; `driver_silences` describe
    the windows in which an instance of the driver did not answer (`driver.answers`).
    """
    everything = every_failure_named(results)
    seen = Seen(
        results=split_contracts(everything)[0],
        everything=everything,
        capabilities=capabilities,
        advisories=list(advisories or []),
        selection=selection,
        cluster_faults=list(cluster_faults or []),
        driver_exits=list(driver_exits or []),
        driver_silences=list(driver_silences or []),
    )
    for rule in RULES:
        reasons = rule.reasons(seen)
        if reasons:
            return rule.verdict, reasons
    raise AssertionError("the last rule always holds")  # pragma: no cover


def judge(findings: Findings) -> tuple[Verdict, list[str]]:
    """The verdict of a run's findings, and why: what the run decided, and `dra-conformance verdict` decides again."""
    capabilities = capability_states(findings.checks, findings.declared, findings.harness_capabilities)
    return decide(
        findings.checks,
        capabilities,
        findings.advisories,
        findings.selection,
        findings.cluster_faults,
        findings.driver_exits,
        findings.driver_silences,
    )
