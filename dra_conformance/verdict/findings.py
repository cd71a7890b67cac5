"""The verdict engine's typed inputs: one result per check, what the run set out to check, what happened to it.

Every check ends passed, failed, not applicable (a skip whose reason starts "not applicable:") or skipped with a
reason; a skip without a reason is silent and blocks certification. A failure names the registry obligation that
broke; one that names none is a harness error (HARNESS_ERROR), never the driver's.

`Findings` gathers everything `rules.judge` decides from, and is what a run records in `findings.json` beside its
summary, so that `dra-conformance verdict RUN` decides again from the record alone. Pure data: no pytest, no
cluster.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

# The file a run records its findings in, in its reports dir beside summary.json.
FINDINGS_JSON = "findings.json"
# Bumped when a field changes meaning; a record of another format is refused, never misread.
FINDINGS_FORMAT = 1
# The skip reason of checks the suite's identity has no rights for (`--allow-partial`): never a certifying skip.
IDENTITY_LACKS = "the suite's identity cannot"
# What a check xdist reports for a worker that crashed while running it is attributed to.
WORKER_CRASH = "worker crash"
# What a check that failed or errored while the control plane was unhealthy is attributed to.
CLUSTER_FAULT = "cluster fault"
# The registry obligations (model/registry/run.yaml) of the run itself: the harness obligation a phase that raised
# something no obligation names breaks; the one an unexpected exit of the driver under test breaks; the one an
# instance of the driver that stops answering breaks.
HARNESS_ERROR = "run.harness-error"
DRIVER_STAYS_UP = "run.driver-stays-up"
DRIVER_ANSWERS = "run.driver-answers"
# The checks of the resource Metrics API contract, by path under suites/: the metrics suite, and the metrics API
# rollback rehearsal (v1 -> v1beta1 -> v1). They judge the metrics pipeline (its adapter, its APIServices), which
# the driver under test neither provides nor touches, so their outcomes decide the metrics verdict, never the
# driver's certificate.
METRICS_CHECKS = ("metrics/", "rollback/test_metrics_rollback.py")


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


class FindingsError(ValueError):
    """A findings record that is missing, not JSON, or not of the shape this engine reads."""


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
    # A harness error's traceback (its end, `report.harness_errors.trimmed`): what the suite has to fix.
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

    @classmethod
    def from_json(cls, entry: dict[str, Any]) -> CheckResult:
        """One check as a record holds it (`asdict`); a missing optional field is empty."""
        return cls(
            str(entry["nodeid"]),
            Outcome(entry["outcome"]),
            str(entry.get("reason") or ""),
            tuple(entry.get("capabilities") or ()),
            str(entry.get("obligation") or ""),
            str(entry.get("obligation_capability") or ""),
            str(entry.get("traceback") or ""),
        )


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


def every_failure_named(results: list[CheckResult]) -> list[CheckResult]:
    """No failure without an obligation: a failure or error that names none is a harness error, never the driver's."""
    return [
        replace(r, outcome=Outcome.ERROR, obligation=HARNESS_ERROR, obligation_capability="")
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
    return capability_states(results, facts.declared, facts.harness_capabilities)


def capability_states(
    results: list[CheckResult], declared: tuple[str, ...], harness_capabilities: tuple[str, ...]
) -> dict[str, dict[str, Any]]:
    """Per declared capability but the harness's: its state, its checks by outcome, and why some did not run.

    A failure counts against a declared capability when the obligation that broke is about that capability, or, for
    an obligation about no capability in particular, when the check is marked with it.
    """
    results = every_failure_named(split_contracts(results)[0])
    table = {}
    for capability in declared:
        if capability in harness_capabilities:
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


@dataclass
class Findings:
    """Everything the verdict is decided from, typed: what the plugin collects and hands over at the end of a run.

    - `checks`: one result per check of the bundled suites (obligation results, harness errors, checks a cluster
      fault or a silence of the driver is cited on), the Metrics API's included (the rules leave them out);
    - `declared`, `harness_capabilities`: the profile's capabilities, and those no check certifies;
    - `selection`: what the run set out to check (its never-run checks follow from it; None: not known);
    - `advisories`: defensive findings (`id`, `check`, `obligation`, `observed`);
    - `cluster_faults`: the control plane's failures under the run, one line each;
    - `driver_exits`: exits of the driver under test (`describe`, `caused_by_suite`: the suite's own kills);
    - `driver_silences`: the windows an instance of the driver did not answer, one line each.
    """

    checks: list[CheckResult]
    declared: tuple[str, ...] = ()
    harness_capabilities: tuple[str, ...] = RunFacts.harness_capabilities
    selection: Selection | None = None
    advisories: list[dict[str, Any]] = field(default_factory=list)
    cluster_faults: list[str] = field(default_factory=list)
    driver_exits: list[dict[str, Any]] = field(default_factory=list)
    driver_silences: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The record `findings.json` holds."""
        return {"format": FINDINGS_FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, document: Any) -> Findings:
        """The findings a record holds; FindingsError when it is not one."""
        if not isinstance(document, dict) or document.get("format") != FINDINGS_FORMAT:
            found = document.get("format") if isinstance(document, dict) else type(document).__name__
            raise FindingsError(f"not a findings record of format {FINDINGS_FORMAT} (format: {found!r})")
        try:
            chosen = document.get("selection")
            selection = (
                Selection(
                    collected=tuple(str(n) for n in chosen.get("collected") or ()),
                    deselected=int(chosen.get("deselected") or 0),
                    suites_not_run=tuple(str(s) for s in chosen.get("suites_not_run") or ()),
                    stopped=str(chosen.get("stopped") or ""),
                    filtered_by=str(chosen.get("filtered_by") or ""),
                )
                if chosen is not None
                else None
            )
            return cls(
                checks=[CheckResult.from_json(entry) for entry in document["checks"]],
                declared=tuple(str(c) for c in document.get("declared") or ()),
                harness_capabilities=tuple(
                    str(c) for c in document.get("harness_capabilities", RunFacts.harness_capabilities)
                ),
                selection=selection,
                advisories=[dict(a) for a in document.get("advisories") or []],
                cluster_faults=[str(f) for f in document.get("cluster_faults") or []],
                driver_exits=[
                    {"describe": str(e.get("describe") or ""), "caused_by_suite": bool(e["caused_by_suite"])}
                    for e in document.get("driver_exits") or []
                ],
                driver_silences=[str(s) for s in document.get("driver_silences") or []],
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise FindingsError(f"a findings record with a bad field: {type(error).__name__}: {error}") from None

    @classmethod
    def load(cls, path: Path) -> Findings:
        """The findings recorded in `path`; FindingsError when it is missing or not a findings record."""
        try:
            document = json.loads(path.read_text())
        except FileNotFoundError:
            raise FindingsError(f"{path}: no such file (a run records its findings there)") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise FindingsError(f"{path}: not readable as JSON: {error}") from None
        try:
            return cls.from_json(document)
        except FindingsError as error:
            raise FindingsError(f"{path}: {error}") from None
