"""The certification summary: one verdict first, then why, per capability and per suite.

Every test ends passed, failed, not applicable (a skip whose reason starts "not applicable:") or skipped with a
reason; a skip without a reason is silent and blocks certification. A declared capability is certified only when
the checks that exercise it (tests marked `capability(...)`) ran and passed. Verdicts:

- certified: nothing failed, no silent skip, every declared capability exercised and passing;
- certified with advisories: the same, with defensive findings (what users want beyond the contract) listed first;
- not certified: a failure (a contract obligation, or a defensive one under strict), named by obligation id;
- incomplete: nothing the driver did wrong, but the run cannot certify it: collected checks that never finished
  (an interrupted run, `-x`, a crashed worker), a subset of the bundled suites (`-k`, a path), a check that errored
  (a harness precondition, a fixture that could not set up, a harness error: anything raised that names no
  obligation, see `report.harness_errors`), a declared capability no check exercised here (a limit of the suite
  or the backend), or a silent skip.

A failure counts against a declared capability when the obligation that broke is about that capability, or, for an
obligation about no capability in particular, when the check is marked with it.

Two contracts, two verdicts: the checks of the resource Metrics API (`suites/metrics`, and the metrics API rollback
rehearsal) judge the cluster's metrics pipeline, never the driver. Their outcomes feed the metrics verdict and the
summary's metrics section only; the driver's verdict, totals, capabilities and suites are decided without them.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from dra_conformance.canary import rules as canary_rules
from dra_conformance.canary import text as canary_text
from dra_conformance.driver.answers import DRIVER_ANSWERS
from dra_conformance.model.findings import RECORD_KIND as ADVISORY_RECORDS
from dra_conformance.model.read_exposure import RECORD_KIND as READ_EXPOSURE_RECORDS
from dra_conformance.model.read_exposure import markdown_line as read_exposure_line
from dra_conformance.model.read_exposure import summary_finding as read_exposure_finding
from dra_conformance.model.records import read_records
from dra_conformance.report import driver_answers, harness_errors, reports_space
from dra_conformance.report.exploration import exploration_markdown, exploration_terminal_line, explored_space
from dra_conformance.report.four_layers import four_layer_line, four_layer_markdown, four_layer_section
from dra_conformance.rollback.metrics_rehearsal import REHEARSAL as METRICS_REHEARSAL

NOT_APPLICABLE_PREFIX = "not applicable:"
# The skip reason of checks the suite's identity has no rights for (`--allow-partial`): never a certifying skip.
IDENTITY_LACKS = "the suite's identity cannot"
# The phases a check reports; anything else is the report xdist makes for the check a crashed worker was running.
PHASES = ("setup", "call", "teardown")
WORKER_CRASH = "worker crash"
# What a check that failed or errored while the control plane was unhealthy is attributed to.
CLUSTER_FAULT = "cluster fault"
# The registry obligation an unexpected exit of the driver under test breaks (model/registry/run.yaml).
DRIVER_STAYS_UP = "run.driver-stays-up"
SUMMARY_JSON = "summary.json"
SUMMARY_MARKDOWN = "summary.md"
# The verdict and the counts alone, written first: a few hundred bytes, where the whole summary may not fit.
VERDICT_JSON = "verdict.json"
# Artifacts of other parts of the run the summary quotes, when the run wrote them.
METRICS_VERDICT = "metrics-verdict.json"
ROLLBACK_REPORT = "rollback-report.json"
# The rollback report's two rehearsals, each under its own key and name: the metrics API rollback
# (suites/rollback/test_metrics_rollback.py) and the device-plugin rollback the canary gate's rule 4 judges
# (suites/rollback/test_device_plugin_rollback.py). Summaries written before held both, one verdict over them, under
# "rollback_rehearsal" (the fleet report still reads it).
METRICS_API_ROLLBACK_KEY = "metrics_api_rollback"
METRICS_API_ROLLBACK = "metrics API rollback (v1 -> v1beta1)"
DEVICE_PLUGIN_ROLLBACK_KEY = "device_plugin_rollback"
DEVICE_PLUGIN_ROLLBACK = canary_rules.DEVICE_PLUGIN_ROLLBACK
# The checks of the resource Metrics API contract, by path under suites/: the metrics suite, and the metrics API
# rollback rehearsal (v1 -> v1beta1 -> v1). They judge the metrics pipeline (its adapter, its APIServices), which
# the driver under test neither provides nor touches, so their outcomes decide the metrics verdict, never the
# driver's certificate.
METRICS_CHECKS = ("metrics/", "rollback/test_metrics_rollback.py")
# The summary's section for those checks, beside the metrics verdict (its whole document).
METRICS_SECTION = "metrics"
METRICS_VERDICT_KEY = "metrics_verdict"


def phase_reason(report: Any) -> str:
    """Why a pytest phase report ended as it did: a skip's reason, the first line a failure raised, else ""."""
    longrepr: Any = report.longrepr
    if report.skipped:
        if isinstance(longrepr, tuple) and len(longrepr) == 3:
            return str(longrepr[2])
        return str(longrepr or "")
    if report.failed:
        crash = getattr(longrepr, "reprcrash", None)
        message = str(getattr(crash, "message", "") or report.longreprtext)
        return message.splitlines()[0] if message else ""
    return ""


class Outcome(StrEnum):
    """How one test ended."""

    PASSED = "passed"
    FAILED = "failed"
    # The check could not judge the driver: a harness precondition broke or its setup failed.
    ERROR = "error"
    NOT_APPLICABLE = "not applicable"
    SKIPPED = "skipped"


class Verdict(StrEnum):
    """The run's decision about the driver."""

    CERTIFIED = "certified"
    CERTIFIED_WITH_ADVISORIES = "certified with advisories"
    NOT_CERTIFIED = "not certified"
    INCOMPLETE = "incomplete"


@dataclass
class CheckResult:
    """One test's outcome, with the reason for a skip and the capabilities it exercises."""

    nodeid: str
    outcome: Outcome
    reason: str = ""
    capabilities: tuple[str, ...] = ()
    # The registry obligation that decided a failure or an error, and the capability it is about ("" for none).
    obligation: str = ""
    obligation_capability: str = ""
    # A harness error's traceback (its end, `harness_errors.trimmed`): what the suite has to fix.
    traceback: str = ""

    @property
    def suite(self) -> str:
        """`suites/<name>/...` -> name; anything else by its top directory."""
        parts = self.nodeid.split("::", 1)[0].split("/")
        return parts[1] if parts[0] == "suites" and len(parts) > 1 else parts[0]

    @property
    def silent(self) -> bool:
        """A skip that gives no reason."""
        return self.outcome == Outcome.SKIPPED and not self.reason.strip()


def about_metrics(nodeid: str) -> bool:
    """Whether a check is one of the resource Metrics API's (`METRICS_CHECKS`), not about the driver."""
    path = nodeid.split("::", 1)[0]
    _, found, under = path.rpartition("suites/")
    return bool(found) and under.startswith(METRICS_CHECKS)


def split_contracts(results: list[CheckResult]) -> tuple[list[CheckResult], list[CheckResult]]:
    """(the driver's checks, the Metrics API's checks): each contract's results, for its own verdict."""
    driver = [r for r in results if not about_metrics(r.nodeid)]
    metrics = [r for r in results if about_metrics(r.nodeid)]
    return driver, metrics


def outcome_of(when: str, passed: bool, skipped: bool, reason: str, basis: str = "") -> tuple[Outcome, str] | None:
    """The outcome one report phase contributes (None: this phase says nothing new).

    `basis` is that of the registry obligation that broke, where one did. A broken harness obligation, or a phase
    that failed without any obligation breaking (a harness error), is an error: the check could not judge the driver.
    """
    if skipped:
        text = reason.removeprefix("Skipped: ").strip()
        return (Outcome.NOT_APPLICABLE if text.startswith(NOT_APPLICABLE_PREFIX) else Outcome.SKIPPED), text
    if not passed:
        if basis in ("harness", "") or when not in PHASES:
            # An xdist worker that crashed reports its running check with a phase of its own ("???").
            return Outcome.ERROR, reason
        return Outcome.FAILED, reason
    return (Outcome.PASSED, "") if when == "call" else None


# Which outcome of two phases stands: a failure in any phase (teardown included) wins, then an error.
_PRECEDENCE = {Outcome.FAILED: 2, Outcome.ERROR: 1}


def merge(
    earlier: CheckResult | None,
    nodeid: str,
    found: tuple[Outcome, str],
    capabilities: tuple[str, ...],
    obligation: tuple[str, str] = ("", ""),
    traceback: str = "",
) -> CheckResult:
    """A test's result after one more report phase; `obligation` is (id, capability) of what broke in it."""
    outcome, reason = found
    if earlier is not None and _PRECEDENCE.get(earlier.outcome, 0) >= max(_PRECEDENCE.get(outcome, 0), 1):
        return earlier
    capabilities = capabilities or (earlier.capabilities if earlier else ())
    return CheckResult(nodeid, outcome, reason, capabilities, *obligation, harness_errors.trimmed(traceback))


def every_failure_named(results: list[CheckResult]) -> list[CheckResult]:
    """No failure without an obligation: a failure or error that names none is a harness error, never the driver's."""
    return [
        replace(r, outcome=Outcome.ERROR, obligation=harness_errors.HARNESS_ERROR, obligation_capability="")
        if r.outcome in (Outcome.FAILED, Outcome.ERROR) and not r.obligation
        else r
        for r in results
    ]


@dataclass
class RunFacts:
    """What the summary says about the run itself."""

    suite_version: str
    backend: str
    # The API server's gitVersion; None where it could not be read.
    cluster_version: str | None
    driver: str
    profile: str
    profile_digest: str
    driver_version: str | None
    declared: tuple[str, ...]
    # Capabilities no check certifies, because they are about the harness, not the driver.
    harness_capabilities: tuple[str, ...] = ("referenceFaults", "faultSwitches")
    extra: dict[str, Any] = field(default_factory=dict)
    # Which cluster ran it (`--dra-cluster-name`, the kubeconfig context, the local cluster's name) and when it
    # ended (ISO 8601 UTC): the fleet report's row and freshness. None in summaries written before them.
    cluster: str | None = None
    finished_at: str | None = None
    # The changes the backend made to the driver's manifests before installing them (a profile's
    # `install.transform`, `ClusterInfo.install_transforms`), one line each as printed at start: the run certifies
    # the driver as shipped plus exactly these. Empty where it installed nothing or changed nothing.
    install_transforms: list[str] = field(default_factory=list)


@dataclass
class Selection:
    """What the run set out to check: every collected check of the bundled suites, and what it left out."""

    collected: tuple[str, ...] = ()
    # Checks `-k`/`-m` deselected, and bundled suites the run collected nothing of (a path subset).
    deselected: int = 0
    suites_not_run: tuple[str, ...] = ()
    # Why the run ended early (an interrupt, -x, a crashed worker), or "" when it ran to its end.
    stopped: str = ""
    # The `-k`/`-m` expressions that filtered the run (with xdist the workers deselect, and only these tell).
    filtered_by: str = ""

    def never_run(self, results: list[CheckResult]) -> list[str]:
        """Collected checks that have no outcome: they never finished."""
        finished = {r.nodeid for r in results}
        return [nodeid for nodeid in self.collected if nodeid not in finished]


def capability_table(results: list[CheckResult], facts: RunFacts) -> dict[str, dict[str, Any]]:
    """Per declared capability: its outcome and the checks behind it (the driver's checks only)."""
    results = every_failure_named(split_contracts(results)[0])
    table = {}
    for capability in facts.declared:
        if capability in facts.harness_capabilities:
            continue
        checks = [r for r in results if capability in r.capabilities or r.obligation_capability == capability]
        counts = Counter(str(r.outcome) for r in checks)
        if any(_fails_capability(r, capability) for r in checks):
            state = "failed"
        elif counts[Outcome.PASSED]:
            state = "passed"
        elif checks:
            state = "not exercised here"
        else:
            state = "no check in this suite"
        reasons = sorted({r.reason for r in checks if r.outcome in (Outcome.NOT_APPLICABLE, Outcome.SKIPPED)})
        table[capability] = {"state": state, "checks": dict(counts), "reasons": reasons[:5]}
    return table


def _fails_capability(result: CheckResult, capability: str) -> bool:
    """A failed check counts against `capability` if what broke is about it, or about no capability in particular."""
    if result.outcome != Outcome.FAILED:
        return False
    return result.obligation_capability == capability or (
        not result.obligation_capability and capability in result.capabilities
    )


def suite_table(results: list[CheckResult]) -> dict[str, dict[str, Any]]:
    """Per suite: counts by outcome and the reasons of skips, most frequent first."""
    by_suite: dict[str, list[CheckResult]] = defaultdict(list)
    for result in results:
        by_suite[result.suite].append(result)
    table = {}
    for suite, found in sorted(by_suite.items()):
        reasons = Counter(r.reason for r in found if r.outcome in (Outcome.NOT_APPLICABLE, Outcome.SKIPPED))
        table[suite] = {
            "counts": dict(Counter(str(r.outcome) for r in found)),
            "reasons": [{"reason": reason, "tests": n} for reason, n in reasons.most_common()],
            "failed": [_named(r) for r in found if r.outcome == Outcome.FAILED],
            "errors": [_named(r) for r in found if r.outcome == Outcome.ERROR],
        }
    return table


def _named(result: CheckResult) -> str:
    return f"{result.nodeid} ({result.obligation})" if result.obligation else result.nodeid


def _by_obligation(results: list[CheckResult]) -> list[str]:
    """'<id> (<n> checks)' per obligation that decided these results, most frequent first."""
    counted = Counter(r.obligation or "no registry obligation" for r in results)
    return [f"{obligation} ({n} check{'s' if n > 1 else ''})" for obligation, n in counted.most_common()]


def _selection_reasons(selection: Selection, results: list[CheckResult]) -> list[str]:
    """Why the selection cannot certify: checks that never ran, or a subset of the bundled suites."""
    reasons = []
    never = selection.never_run(results)
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


def decide(
    results: list[CheckResult],
    capabilities: dict[str, dict[str, Any]],
    advisories: list[dict[str, Any]] | None = None,
    selection: Selection | None = None,
    cluster_faults: list[str] | None = None,
    driver_exits: list[dict[str, Any]] | None = None,
    driver_silences: list[str] | None = None,
) -> tuple[Verdict, list[str]]:
    """The verdict and the reasons for it, naming the obligations that decided it.

    `driver_silences` describe the windows in which an instance of the driver did not answer (`driver.answers`).
    Only the driver's checks decide it: the Metrics API's (`about_metrics`) feed the metrics verdict. Which checks
    never ran is counted over the whole selection: a run that stopped early cannot certify either way.
    """
    everything = every_failure_named(results)
    results = split_contracts(everything)[0]
    failed = [r for r in results if r.outcome == Outcome.FAILED]
    unexpected = [e for e in driver_exits or [] if not e["caused_by_suite"]]
    exits = "; ".join(e["describe"] for e in unexpected)
    exited = [f"{DRIVER_STAYS_UP}: the driver exited unexpectedly {len(unexpected)} time(s): {exits}"] if exits else []
    exited += [f"{DRIVER_ANSWERS}: {silence}" for silence in driver_silences or []]
    if exited:
        reasons = [f"{len(failed)} check(s) failed: " + ", ".join(_by_obligation(failed))] if failed else []
        return Verdict.NOT_CERTIFIED, exited + reasons + _harness_error_reasons(results)
    if cluster_faults:
        # The control plane failed under the run: it cannot certify, whatever else it saw; failures outside the
        # fault's time still count and are listed.
        affected = sum(r.obligation == CLUSTER_FAULT for r in results)
        reasons = [f"{CLUSTER_FAULT}: {fault}" for fault in cluster_faults]
        reasons.append(f"{affected} check(s) failed or errored during it: not the driver's failures")
        if failed:
            reasons.append(f"{len(failed)} check(s) failed outside it: " + ", ".join(_by_obligation(failed)))
        return Verdict.INCOMPLETE, reasons
    failing = [c for c, row in capabilities.items() if row["state"] == "failed"]
    unselected = _selection_reasons(selection, everything) if selection is not None else []
    if failed or failing:
        reasons = [f"{len(failed)} check(s) failed: " + ", ".join(_by_obligation(failed))] if failed else []
        reasons += [f"declared capability {c} failed its checks" for c in failing]
        return Verdict.NOT_CERTIFIED, reasons + unselected + _harness_error_reasons(results)
    errors = [r for r in results if r.outcome == Outcome.ERROR]
    if unselected:
        crashed = [r for r in errors if r.obligation == WORKER_CRASH]
        crash = [f"{WORKER_CRASH}: {crashed[0].reason}"] if crashed else []
        return Verdict.INCOMPLETE, unselected + crash + _harness_error_reasons(results)
    # Checks skipped because the suite's own identity lacks rights (--allow-partial): the run could not judge them.
    unauthorized = [r for r in results if r.outcome == Outcome.NOT_APPLICABLE and IDENTITY_LACKS in r.reason]
    silent = [r.nodeid for r in results if r.silent]
    unproven = [c for c, row in capabilities.items() if row["state"] != "passed"]
    if errors or silent or unproven or unauthorized:
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
        reasons += [f"declared capability {c}: {capabilities[c]['state']}" for c in unproven]
        return Verdict.INCOMPLETE, reasons
    if advisories:
        counted = Counter(str(a.get("id") or a.get("obligation")) for a in advisories)
        return Verdict.CERTIFIED_WITH_ADVISORIES, [
            f"advisory {obligation} ({n} finding{'s' if n > 1 else ''})" for obligation, n in counted.most_common()
        ] + ["no contract obligation broke; every declared capability was exercised and passed"]
    return Verdict.CERTIFIED, [
        "every check passed or is not applicable with its reason; every declared capability was exercised and passed"
    ]


def _harness_error_reasons(results: list[CheckResult]) -> list[str]:
    """The harness errors, where another reason decided the verdict (they never decide "not certified")."""
    found = [r for r in results if r.obligation == harness_errors.HARNESS_ERROR]
    return [f"{len(found)} harness error(s) ({harness_errors.HARNESS_ERROR}), e.g. {found[0].nodeid}"] if found else []


def _artifact(run_dir: Path, name: str) -> Any:
    path = run_dir / name
    return json.loads(path.read_text()) if path.exists() else None


def summarize(
    results: list[CheckResult],
    facts: RunFacts,
    run_dir: Path,
    canary: dict[str, Any] | None = None,
    selection: Selection | None = None,
    cluster_faults: list[str] | None = None,
    driver_exits: list[dict[str, Any]] | None = None,
    driver_silences: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The whole summary as a document; `canary` is the canary gate evaluated for this run (`canary.rules.evaluate`).

    `driver_silences` are the windows in which an instance of the driver did not answer (`Silence.to_json`).
    """
    everything = every_failure_named(results)
    results, metrics_checks = split_contracts(everything)
    capabilities = capability_table(results, facts)
    advisories = read_records(run_dir, ADVISORY_RECORDS)
    silences = [str(silence["describe"]) for silence in driver_silences or []]
    verdict, reasons = decide(everything, capabilities, advisories, selection, cluster_faults, driver_exits, silences)
    never = selection.never_run(everything) if selection is not None else []
    metrics = _artifact(run_dir, METRICS_VERDICT)
    rollback = _artifact(run_dir, ROLLBACK_REPORT)
    return {
        "verdict": str(verdict),
        "run_dir": str(run_dir),
        "reasons": reasons,
        "cluster_faults": list(cluster_faults or []),
        "driver_exits": {
            "unexpected": [e for e in driver_exits or [] if not e["caused_by_suite"]],
            "caused_by_checks": [e for e in driver_exits or [] if e["caused_by_suite"]],
        },
        "driver_silences": driver_answers.section(driver_silences or [], results),
        "advisories": [{k: a.get(k) for k in ("id", "check", "obligation", "observed")} for a in advisories],
        "harness_errors": [
            {"check": r.nodeid, "obligation": r.obligation, "error": r.reason, "traceback": r.traceback}
            for r in sorted(results, key=lambda r: r.nodeid)
            if r.obligation == harness_errors.HARNESS_ERROR
        ],
        "run": asdict(facts),
        "totals": dict(Counter(str(r.outcome) for r in results)),
        "accounting": {
            "collected": len(selection.collected) if selection is not None else len(everything),
            "finished": (len(selection.collected) - len(never)) if selection is not None else len(everything),
            "never_run": len(never),
            "deselected": selection.deselected if selection is not None else 0,
            "suites_not_run": list(selection.suites_not_run) if selection is not None else [],
        },
        "tests": {r.nodeid: str(r.outcome) for r in sorted(everything, key=lambda r: r.nodeid)},
        "capabilities": capabilities,
        "suites": suite_table(results),
        "canary_gate": canary
        if canary is not None
        else {"state": "not evaluated", "why": "no canary inputs were given to the summary"},
        METRICS_VERDICT_KEY: metrics if metrics is not None else {"state": "not run"},
        METRICS_SECTION: metrics_section(metrics_checks, metrics),
        METRICS_API_ROLLBACK_KEY: _rollback(rollback, METRICS_REHEARSAL),
        DEVICE_PLUGIN_ROLLBACK_KEY: _rollback(rollback, canary_rules.DRA_REHEARSAL),
        "flake_record": {"state": "one run", "why": "pass rates per test come from `dra-conformance run --repeat N`"},
        "read_exposure": read_exposure_finding(read_records(run_dir, READ_EXPOSURE_RECORDS)),
        "exploration": explored_space(run_dir),
        "four_layers": four_layer_section(run_dir, {r.nodeid: str(r.outcome) for r in everything}),
    }


def metrics_section(checks: list[CheckResult], verdict: dict[str, Any] | None) -> dict[str, Any]:
    """The Metrics API's own part of the summary: its verdict and its checks, which never decide the driver's."""
    return {
        "verdict": _short(verdict) if verdict is not None else "not run",
        "checks": dict(Counter(str(r.outcome) for r in checks)),
        "failed": [_named(r) for r in sorted(checks, key=lambda r: r.nodeid) if r.outcome == Outcome.FAILED],
        "errors": [_named(r) for r in sorted(checks, key=lambda r: r.nodeid) if r.outcome == Outcome.ERROR],
        "decides": "the metrics verdict only, never the driver's certificate",
    }


def metrics_line(summary: dict[str, Any]) -> str | None:
    """One line: the Metrics API's verdict and its checks, apart from the driver's (None without either)."""
    section = summary.get(METRICS_SECTION)
    if not section or (section["verdict"] == "not run" and not section["checks"]):
        return None
    failing = [*section["failed"], *section["errors"]]
    named = f" ({', '.join(failing[:3])}{', ...' if len(failing) > 3 else ''})" if failing else ""
    return (
        f"metrics API (its own verdict, never the driver's): {section['verdict']}; its checks: "
        f"{spell_counts(section['checks'])}{named}"
    )


def _rollback(report: dict[str, Any] | None, name: str) -> dict[str, Any]:
    """One rehearsal of the rollback report: its verdict, first failed phase, rollback time and date, or not run.

    A report without `rehearsals` (written before the metrics API rollback existed) is the device-plugin one alone.
    """
    rehearsals = (report or {}).get("rehearsals")
    if isinstance(rehearsals, dict):
        own = rehearsals.get(name)
    else:
        own = report if name == canary_rules.DRA_REHEARSAL else None
    if not own:
        return {"state": "not run"}
    return {k: own.get(k) for k in ("verdict", "failed_phase", "rollback_seconds")} | {
        "rehearsed_at": _rehearsed_at(own)
    }


def _rehearsed_at(rollback: dict[str, Any]) -> str | None:
    """When the rehearsal checked the rolled-back state (its last phase's start), else when it began."""
    phases = {p.get("phase"): p for p in rollback.get("phases", [])}
    started = phases.get("after_rollback", {}).get("started") or phases.get("before", {}).get("started")
    return str(started) if started else None


def render_markdown(summary: dict[str, Any]) -> str:
    """The summary for people."""
    run = summary["run"]
    lines = [
        f"# {run['driver']}: {summary['verdict']}",
        "",
        *(f"- {reason}" for reason in summary["reasons"]),
        "",
        *([f"- {line}", ""] if (line := real_node_line(summary)) else []),
        *_exit_lines(summary.get("driver_exits") or {}),
        *driver_answers.markdown_lines(summary.get("driver_silences") or []),
        *_advisory_lines(summary.get("advisories") or []),
        *harness_errors.markdown_lines(summary.get("harness_errors") or []),
        *_install_transform_lines(run.get("install_transforms") or []),
        f"Suite dra-conformance {run['suite_version']}, backend {run['backend']} (Kubernetes "
        f"{run.get('cluster_version') or 'version not read'}), profile {run['profile']} "
        f"(sha256 {run['profile_digest']}), driver version {run['driver_version'] or 'not stated'}.",
        "",
        "| outcome | tests |",
        "|---|---|",
        *(f"| {outcome} | {n} |" for outcome, n in sorted(summary["totals"].items())),
        *_accounting_rows(summary.get("accounting")),
        "",
        "## Declared capabilities",
        "",
        "| capability | state | checks |",
        "|---|---|---|",
        *(f"| {c} | {row['state']} | {spell_counts(row['checks'])} |" for c, row in summary["capabilities"].items()),
        "",
        *four_layer_markdown(summary.get("four_layers")),
        "## Suites",
        "",
        "| suite | checks |",
        "|---|---|",
        *(f"| {suite} | {spell_counts(row['counts'])} |" for suite, row in summary["suites"].items()),
    ]
    for suite, row in summary["suites"].items():
        listed = [f"- failed: {nodeid}" for nodeid in row["failed"]]
        listed += [f"- error: {nodeid}" for nodeid in row.get("errors", [])]
        listed += [f"- {r['tests']} not applicable: {_reason(r['reason'])}" for r in row["reasons"]]
        lines += ["", f"### {suite}", "", *listed] if listed else []
    lines += [
        "",
        *exploration_markdown(summary.get("exploration")),
        *canary_text.markdown_lines(summary["canary_gate"]),
        "",
        "## Other decisions",
        "",
        f"- {metrics_line(summary) or f'metrics verdict: {_short(summary[METRICS_VERDICT_KEY])}'}",
        f"- {METRICS_API_ROLLBACK}: {rehearsal_text(summary[METRICS_API_ROLLBACK_KEY])}",
        f"- {DEVICE_PLUGIN_ROLLBACK}: {rehearsal_text(summary[DEVICE_PLUGIN_ROLLBACK_KEY])}",
        f"- flake record: {state_text(summary['flake_record'])}",
        read_exposure_line(summary.get("read_exposure") or read_exposure_finding([])),
        "",
        *(f"{line}  " for line in where_and_next(summary)),
    ]
    return "\n".join(lines) + "\n"


def _reason(reason: str) -> str:
    # A skip's reason says "not applicable: ..." itself; the line already does.
    return reason.removeprefix(f"{Outcome.NOT_APPLICABLE}: ")


def spell_counts(counted: dict[str, int]) -> str:
    """`{'passed': 18, 'not applicable': 1}` as people write it: "18 passed, 1 not applicable"."""
    return ", ".join(f"{n} {outcome}" for outcome, n in sorted(counted.items())) or "none"


def state_text(document: dict[str, Any]) -> str:
    """A `{"state": ..., "why": ...}` section as one phrase: "one run (pass rates per test come from ...)"."""
    why = document.get("why")
    return f"{document.get('state', 'unknown')}" + (f" ({why})" if why else "")


def rehearsal_text(rehearsal: dict[str, Any]) -> str:
    """One rollback rehearsal of the summary as a phrase: its verdict, failed phase, rollback time and date."""
    if "verdict" not in rehearsal:
        return state_text(rehearsal)
    parts = [str(rehearsal["verdict"])]
    if rehearsal.get("failed_phase"):
        parts.append(f"failed in phase {rehearsal['failed_phase']}")
    if rehearsal.get("rollback_seconds") is not None:
        parts.append(f"rollback took {float(rehearsal['rollback_seconds']):.1f} s")
    if rehearsal.get("rehearsed_at"):
        parts.append(f"rehearsed {rehearsal['rehearsed_at']}")
    return ", ".join(parts)


def where_and_next(summary: dict[str, Any]) -> list[str]:
    """The run's directory, then what to run next: the HTML report, the failures again, a strict certification."""
    run_dir = summary.get("run_dir")
    if not run_dir:
        return []
    extra = summary["run"].get("extra") or {}
    rerun = str(extra.get("rerun") or "dra-conformance run")
    lines = [
        f"run: {run_dir} (summary.md, summary.json, junit.xml)",
        f"next: the HTML report: dra-conformance report {run_dir} --serve",
    ]
    totals = summary.get("totals") or {}
    if totals.get(str(Outcome.FAILED)) or totals.get(str(Outcome.ERROR)):
        lines.append(f"next: only the failed checks again: {rerun} --lf")
    if extra.get("strictness") != "strict":
        lines.append(f"next: certify strictly (defensive findings fail): {rerun} --dra-strictness strict")
    return lines


def _accounting_rows(accounting: dict[str, Any] | None) -> list[str]:
    if not accounting:
        return []
    return [
        f"| collected | {accounting['collected']} |",
        f"| finished | {accounting['finished']} |",
        f"| never ran | {accounting['never_run']} |",
        f"| deselected | {accounting['deselected']} |",
    ]


def _exit_lines(exits: dict[str, Any]) -> list[str]:
    """Exits of the driver under test: the unexpected ones with their log, then the suite's own kills."""
    lines = []
    for exit_ in exits.get("unexpected", []):
        lines += [f"## The driver exited unexpectedly: {exit_['describe']}", "", "```", exit_["log_tail"], "```", ""]
    caused = exits.get("caused_by_checks", [])
    if caused:
        lines += [f"Driver exits the suite caused on purpose (disruption checks): {len(caused)}", ""]
    return lines


def _advisory_lines(advisories: list[dict[str, Any]]) -> list[str]:
    """Defensive findings, first thing after the verdict: what users want that the contract does not require."""
    if not advisories:
        return []
    lines = ["## Advisories (defensive obligations; they fail only with --dra-strictness strict)", ""]
    lines += [f"- `{a.get('id')}` {a['check']}: {a['obligation']}; observed: {a['observed']}" for a in advisories]
    return [*lines, ""]


def _install_transform_lines(transforms: list[str]) -> list[str]:
    """The changes made to the driver's manifests before they were installed, as printed at start."""
    if not transforms:
        return []
    return ["## Changes made to the driver's manifests (install.transform)", "", *(f"- {t}" for t in transforms), ""]


def _short(document: Any) -> str:
    if isinstance(document, dict) and "decisions" in document:
        because = f" (because {document['rule']})" if document.get("rule") else ""
        return "; ".join(document["decisions"]) + because
    if isinstance(document, dict) and "state" in document:
        return state_text(document)
    return json.dumps(document)[:300]


def terminal_lines(summary: dict[str, Any]) -> list[str]:
    """The short form printed at the end of the run."""
    lines = [f"verdict: {summary['verdict']} ({summary['run']['driver']}, profile {summary['run']['profile']})"]
    lines += [f"  {reason}" for reason in summary["reasons"]]
    lines.append("  tests: " + ", ".join(f"{n} {o}" for o, n in sorted(summary["totals"].items())))
    accounting = summary.get("accounting")
    if accounting:
        lines.append(
            f"  checks: {accounting['collected']} collected, {accounting['finished']} finished, "
            f"{accounting['never_run']} never ran, {accounting['deselected']} deselected"
        )
    states = ", ".join(f"{c} {row['state']}" for c, row in summary["capabilities"].items())
    lines.append(f"  capabilities: {states or 'none declared'}")
    lines += canary_text.terminal_lines(summary["canary_gate"])
    lines += exploration_terminal_line(summary.get("exploration"))
    four_layers = four_layer_line(summary.get("four_layers"))
    lines += [f"  {four_layers}"] if four_layers else []
    metrics = metrics_line(summary)
    lines += [f"  {metrics}"] if metrics else []
    real_node = real_node_line(summary)
    lines += [f"  {real_node}"] if real_node else []
    transforms = summary["run"].get("install_transforms") or []
    lines += [f"  install: {len(transforms)} declared change(s) to the driver's manifests"] if transforms else []
    lines += [f"  {line}" for line in where_and_next(summary)] or ["  details: summary.md and summary.json"]
    return lines


def real_node_line(summary: dict[str, Any]) -> str | None:
    """Where the kubelet suite ran without a real node: one line with why, and what runs it."""
    why = (summary["run"].get("extra") or {}).get("real_node_absent")
    if not why or "kubelet" not in summary["suites"]:
        return None
    remedy = (
        "dra-conformance run --real-node as root on a machine with writable cgroups"
        if summary["run"]["backend"] == "local"
        else "a node served by a real kubelet with the driver installed"
    )
    return (
        f"real node: none ({why}); the kubelet-mode checks, the four-layer cross-check among them, were not "
        f"applicable; to run them: {remedy}"
    )


def write_summary(summary: dict[str, Any], run_dir: Path) -> str | None:
    """Write verdict.json (verdict and counts, small), then summary.json and summary.md, each whole or not at all.

    A full file system stops the writing: the one line saying so (the path, the space left) is returned for the
    terminal, which still gets the verdict; None once every file is written.
    """
    verdict = {"verdict": summary["verdict"], "totals": summary.get("totals", {})}
    files: tuple[tuple[str, Callable[[], str]], ...] = (
        (VERDICT_JSON, lambda: json.dumps(verdict, indent=2)),
        (SUMMARY_JSON, lambda: json.dumps(summary, indent=2, default=str)),
        (SUMMARY_MARKDOWN, lambda: render_markdown(summary)),
    )
    reports_space.release(run_dir)  # the space set aside at start: the verdict fits however full the disk is
    for name, render in files:
        problem = reports_space.write_or_say(run_dir / name, render())
        if problem is not None:
            return problem
    return None
