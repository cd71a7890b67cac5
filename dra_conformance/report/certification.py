"""The certification summary: one verdict first, then why, per capability and per suite.

The verdict is the engine's (`dra_conformance.verdict`: typed findings, rules as data); this module gathers a run's
findings (`findings_of`), folds pytest's phase reports into one result per check for the plugin (`outcome_of`,
`merge`), and renders and writes the summary (summary.json, summary.md, verdict.json, findings.json).

Two contracts, two verdicts: the checks of the resource Metrics API (`suites/metrics`, and the metrics API rollback
rehearsal) judge the cluster's metrics pipeline, never the driver. Their outcomes feed the metrics verdict and the
summary's metrics section only; the driver's verdict, totals, capabilities and suites are decided without them.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dra_conformance.canary import rules as canary_rules
from dra_conformance.canary import text as canary_text
from dra_conformance.model.findings import RECORD_KIND as ADVISORY_RECORDS
from dra_conformance.model.read_exposure import RECORD_KIND as READ_EXPOSURE_RECORDS
from dra_conformance.model.read_exposure import markdown_line as read_exposure_line
from dra_conformance.model.read_exposure import summary_finding as read_exposure_finding
from dra_conformance.model.records import read_records
from dra_conformance.report import driver_answers, harness_errors, reports_space
from dra_conformance.report.exploration import exploration_markdown, exploration_terminal_line, explored_space
from dra_conformance.report.four_layers import four_layer_line, four_layer_markdown, four_layer_section
from dra_conformance.rollback.metrics_rehearsal import REHEARSAL as METRICS_REHEARSAL
from dra_conformance.verdict import (
    FINDINGS_JSON,
    HARNESS_ERROR,
    CheckResult,
    Findings,
    Outcome,
    RunFacts,
    Selection,
    capability_table,
    every_failure_named,
    judge,
    split_contracts,
)

NOT_APPLICABLE_PREFIX = "not applicable:"
# The phases a check reports; anything else is the report xdist makes for the check a crashed worker was running
# (its result is then attributed to verdict.WORKER_CRASH).
PHASES = ("setup", "call", "teardown")
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
# The summary's section for the Metrics API's checks (`verdict.METRICS_CHECKS`), beside the metrics verdict (its
# whole document).
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


def findings_of(
    results: list[CheckResult],
    facts: RunFacts,
    run_dir: Path,
    selection: Selection | None = None,
    cluster_faults: list[str] | None = None,
    driver_exits: list[dict[str, Any]] | None = None,
    driver_silences: list[dict[str, Any]] | None = None,
) -> Findings:
    """What the verdict engine decides this run from: the arguments of `summarize`, and the advisories recorded."""
    return Findings(
        checks=every_failure_named(results),
        declared=facts.declared,
        harness_capabilities=facts.harness_capabilities,
        selection=selection,
        advisories=[_advisory(a) for a in read_records(run_dir, ADVISORY_RECORDS)],
        cluster_faults=list(cluster_faults or []),
        driver_exits=[
            {"describe": str(e.get("describe") or ""), "caused_by_suite": bool(e["caused_by_suite"])}
            for e in driver_exits or []
        ],
        driver_silences=[str(silence["describe"]) for silence in driver_silences or []],
    )


def _advisory(record: dict[str, Any]) -> dict[str, Any]:
    """An advisory as the summary lists it."""
    return {k: record.get(k) for k in ("id", "check", "obligation", "observed")}


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
    findings: Findings | None = None,
) -> dict[str, Any]:
    """The whole summary as a document; `canary` is the canary gate evaluated for this run (`canary.rules.evaluate`).

    `driver_silences` are the windows in which an instance of the driver did not answer (`Silence.to_json`). The
    verdict is the engine's, from the run's findings: `findings` where the caller made them already (to write them
    too), else `findings_of` these arguments.
    """
    everything = every_failure_named(results)
    results, metrics_checks = split_contracts(everything)
    capabilities = capability_table(results, facts)
    if findings is None:
        findings = findings_of(everything, facts, run_dir, selection, cluster_faults, driver_exits, driver_silences)
    verdict, reasons = judge(findings)
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
        "advisories": findings.advisories,
        "harness_errors": [
            {"check": r.nodeid, "obligation": r.obligation, "error": r.reason, "traceback": r.traceback}
            for r in sorted(results, key=lambda r: r.nodeid)
            if r.obligation == HARNESS_ERROR
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


def write_summary(summary: dict[str, Any], run_dir: Path, findings: Findings | None = None) -> str | None:
    """Write verdict.json (verdict and counts, small), then summary.json, summary.md, findings.json, each whole or not.

    `findings` (where given) are what the verdict was decided from: `dra-conformance verdict RUN` decides again from
    findings.json.

    A full file system stops the writing: the one line saying so (the path, the space left) is returned for the
    terminal, which still gets the verdict; None once every file is written.
    """
    verdict = {"verdict": summary["verdict"], "totals": summary.get("totals", {})}
    files: tuple[tuple[str, Callable[[], str]], ...] = (
        (VERDICT_JSON, lambda: json.dumps(verdict, indent=2)),
        (SUMMARY_JSON, lambda: json.dumps(summary, indent=2, default=str)),
        (SUMMARY_MARKDOWN, lambda: render_markdown(summary)),
    )
    if findings is not None:
        recorded = findings.to_json()
        files += ((FINDINGS_JSON, lambda: json.dumps(recorded, indent=1, default=str)),)
    reports_space.release(run_dir)  # the space set aside at start: the verdict fits however full the disk is
    for name, render in files:
        problem = reports_space.write_or_say(run_dir / name, render())
        if problem is not None:
            return problem
    return None
