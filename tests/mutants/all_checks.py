"""Every mutant against the WHOLE default suite, with the verdict a vendor would get.

`tests.mutants.harness.run_mutant` runs only the check written for a mutant: it proves that check bites, not that
the suite as a vendor runs it refuses the bug. Here each mutant runs as the driver under test against every bundled
suite (no `-k`, `-n 2`), from the reference profile broken as the mutant says, on a private local cluster, and what
counts is the run's certification verdict (reports/<run>/summary.json).

A mutant breaks one registry obligation (`Mutant.breaks`), whose basis says when a driver with that bug must be
refused:
- contract: under any profile's strictness, so the run uses `strictness: contract` (a vendor's default; the
  reference profile itself is strict) and must end "not certified";
- defensive: only under `strict`. Under contract strictness such a bug must be reported, not refused: the run must
  end "certified with advisories" naming that obligation (or "not certified" where the bug also breaks a contract
  obligation elsewhere); then the same mutant runs again under `strictness: strict`, which must end "not certified".

Used by bench/mutants --all-checks. The pure parts (reading the obligation ids out of a summary, classifying a
mutant's runs) are unit-tested in tests/unit/test_mutant_all_checks.py.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from dra_conformance.driver.answers import DRIVER_ANSWERS
from dra_conformance.driver.profile import Strictness
from dra_conformance.model.obligations import Basis, Registry
from dra_conformance.report.certification import SUMMARY_JSON
from dra_conformance.report.harness_errors import HARNESS_ERROR
from dra_conformance.verdict import DRIVER_STAYS_UP, Verdict
from tests.mutants.harness import OUTPUT_TAIL, Mutant, junit_results, mutant_profile

# The whole default suite takes 2-3 minutes on two cores, plus the cluster's start and stop; room for a busy machine.
ALL_CHECKS_DEADLINE = 1800.0
# After the deadline the run gets SIGINT (pytest tears its fixtures and the cluster down), then this long to stop.
STOP_GRACE = 120.0
WORKERS = 2

# "<obligation id> (<n> check(s))" or "advisory <id> (<n> finding(s))", as certification.decide words its reasons.
_COUNTED_ID = re.compile(r"(?<![\w./-])([a-z][a-z0-9]*\.[a-z0-9][a-z0-9-]*) \(\d+ (?:checks?|findings?)\)")


def basis_of(chosen: Mutant, registry: Registry) -> Basis:
    """The basis of the obligation the mutant breaks (a harness obligation is never a driver's bug)."""
    basis = registry[chosen.breaks].basis
    if basis == Basis.HARNESS:
        raise ValueError(f"mutant {chosen.name} names harness obligation {chosen.breaks}: a precondition, not a bug")
    return basis


class Result(StrEnum):
    """What the whole suite made of one mutant."""

    # Not certified under contract strictness: any vendor shipping this bug is refused.
    KILLED = "killed"
    # A defensive bug: certified with its advisory under contract strictness, not certified under strict.
    KILLED_UNDER_STRICT = "killed under strict"
    # Certified without a word under contract strictness, or a defensive bug strict did not refuse either.
    SURVIVED = "SURVIVED"
    # A bug that breaks a contract obligation was only an advisory: the suite let a contract violation pass.
    CONTRACT_BUG_CERTIFIED = "CONTRACT BUG CERTIFIED"
    # A defensive bug certified with advisories under contract strictness, but not with its own obligation's.
    ADVISORY_MISSING = "ADVISORY MISSING"
    # A run was incomplete, wrote no summary, or overran its deadline: it says nothing about the bug.
    NO_VERDICT = "NO VERDICT"

    @property
    def fails_the_bench(self) -> bool:
        """Whether this result makes bench/mutants --all-checks exit 1."""
        return self not in (Result.KILLED, Result.KILLED_UNDER_STRICT)


def classify(basis: Basis, contract: str | None, strict: str | None, advised: bool) -> Result:
    """The result of a mutant breaking a `basis` obligation from its runs' verdicts (None: no verdict, or not run).

    `contract` is the verdict under contract strictness, `strict` under strict (run only for a defensive bug that
    contract strictness certified), `advised` whether the contract run's advisories name the broken obligation.
    """
    if contract == Verdict.NOT_CERTIFIED:
        return Result.KILLED
    if contract == Verdict.CERTIFIED:
        return Result.SURVIVED
    if contract != Verdict.CERTIFIED_WITH_ADVISORIES:
        return Result.NO_VERDICT
    if basis == Basis.CONTRACT:
        return Result.CONTRACT_BUG_CERTIFIED
    if not advised:
        return Result.ADVISORY_MISSING
    if strict == Verdict.NOT_CERTIFIED:
        return Result.KILLED_UNDER_STRICT
    if strict in (Verdict.CERTIFIED, Verdict.CERTIFIED_WITH_ADVISORIES):
        return Result.SURVIVED
    return Result.NO_VERDICT


def obligations_in_reasons(reasons: list[str]) -> list[str]:
    """The registry obligation ids the summary's reasons name, in order, each once.

    decide() names them as "<id> (<n> checks)" in its failure and error lists, "advisory <id> (<n> findings)",
    "run.driver-stays-up: ..." for an unexpected exit of the driver and "run.driver-answers: ..." for a window in
    which it did not answer. Harness errors (run.harness-error) are the suite's, never a decision about the driver.
    """
    found: list[str] = []
    for reason in reasons:
        ids = [run for run in (DRIVER_STAYS_UP, DRIVER_ANSWERS) if reason.startswith(f"{run}:")]
        ids += [each for each in _COUNTED_ID.findall(reason) if each != HARNESS_ERROR]
        found += [each for each in ids if each not in found]
    return found


def failed_obligations(summary: dict[str, Any]) -> dict[str, str]:
    """Failed test nodeid -> the obligation that failed it ("" where the summary names none).

    The tests come from the summary's "tests" (nodeid -> outcome); their obligations from the suites' "failed"
    lists, whose entries read "<nodeid> (<obligation>)".
    """
    entries = [entry for row in (summary.get("suites") or {}).values() for entry in row.get("failed", [])]
    failed: dict[str, str] = {}
    for nodeid, outcome in sorted((summary.get("tests") or {}).items()):
        if outcome != "failed":
            continue
        prefix = f"{nodeid} ("
        named = [entry[len(prefix) : -1] for entry in entries if entry.startswith(prefix) and entry.endswith(")")]
        failed[nodeid] = named[0] if named else ""
    return failed


def deciding_obligations(summary: dict[str, Any]) -> list[str]:
    """The obligation ids that decided the verdict: those the reasons name, then any other a failed test names."""
    found = obligations_in_reasons(list(summary.get("reasons") or []))
    found += sorted({o for o in failed_obligations(summary).values() if o and o not in found})
    return found


def _check_name(nodeid: str) -> str:
    """`suites/x/test_y.py::test_z[p]` -> `test_z[p]`, the name the harness's JUnit (and Mutant.killed_by) use."""
    return nodeid.rsplit("::", 1)[-1]


def named_check_outcome(summary: dict[str, Any], killed_by: str) -> str:
    """How the check named for the mutant ended: its outcome, "passed with advisory <id>", or "did not run"."""
    outcomes = [outcome for nodeid, outcome in (summary.get("tests") or {}).items() if _check_name(nodeid) == killed_by]
    if not outcomes:
        return "did not run"
    outcome = "failed" if "failed" in outcomes else outcomes[0]
    advisories = sorted(
        {str(a.get("id")) for a in summary.get("advisories") or [] if _check_name(str(a.get("check"))) == killed_by}
    )
    if outcome == "passed" and advisories:
        return f"passed with advisory {', '.join(advisories)}"
    return outcome


@dataclass(frozen=True)
class AllChecksRun:
    """What one whole-suite run against a mutant, under one strictness, gave."""

    mutant: Mutant
    strictness: Strictness
    returncode: int
    # The run's summary.json, or None when it wrote none (or more than one).
    summary: dict[str, Any] | None
    # Test name -> failure (or error) message, from the run's JUnit (what the named check caught).
    failed: dict[str, str]
    output: str
    seconds: float
    timed_out: bool = False

    @property
    def verdict(self) -> str | None:
        """The summary's verdict; None without a summary or past the deadline."""
        if self.timed_out or self.summary is None:
            return None
        return str(self.summary["verdict"])

    @property
    def obligations(self) -> list[str]:
        """The obligation ids that decided the verdict."""
        return deciding_obligations(self.summary) if self.summary is not None else []

    @property
    def advisories(self) -> list[str]:
        """The obligation ids of the run's advisories."""
        found = {str(a.get("id")) for a in (self.summary or {}).get("advisories") or []}
        return sorted(found)

    @property
    def named_check(self) -> str:
        """How the check named for the mutant ended in this run."""
        return named_check_outcome(self.summary, self.mutant.killed_by) if self.summary is not None else "unknown"


@dataclass(frozen=True)
class MutantVerdicts:
    """A mutant's whole-suite run under contract strictness, and under strict where its bug is defensive."""

    mutant: Mutant
    basis: Basis
    contract: AllChecksRun
    strict: AllChecksRun | None = None

    @property
    def result(self) -> Result:
        """The mutant's classification."""
        return classify(
            self.basis,
            self.contract.verdict,
            self.strict.verdict if self.strict is not None else None,
            self.mutant.breaks in self.contract.advisories,
        )

    @property
    def deciding(self) -> AllChecksRun:
        """The run whose verdict refused the bug (strict's for a defensive bug contract strictness certified)."""
        return self.strict if self.strict is not None else self.contract

    @property
    def named_its_obligation(self) -> bool:
        """Whether the refusing run's verdict names the obligation the mutant breaks."""
        return self.mutant.breaks in self.deciding.obligations


def needs_strict_run(basis: Basis, contract: AllChecksRun) -> bool:
    """A defensive bug that contract strictness certified (with advisories) must also be refused under strict."""
    return basis == Basis.DEFENSIVE and contract.verdict == Verdict.CERTIFIED_WITH_ADVISORIES


def strictness_profile(chosen: Mutant, directory: Path, strictness: Strictness) -> Path:
    """The harness's mutant profile (`mutant_profile`) with the given strictness."""
    path = mutant_profile(chosen, directory)
    profile: dict[str, Any] = yaml.safe_load(path.read_text())
    profile["strictness"] = str(strictness)
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    return path


def command(chosen: Mutant, workdir: Path, strictness: Strictness) -> list[str]:
    """`dra-conformance run` of every bundled suite (no -k, no path) against `chosen` on a private local cluster."""
    return [
        sys.executable,
        "-m",
        "dra_conformance.cli",
        "run",
        "--no-html",
        "-n",
        str(WORKERS),
        "--nodes",
        "2",
        f"--profile={strictness_profile(chosen, workdir, strictness)}",
        f"--dra-state-dir={workdir / 'cluster'}",
        f"--dra-reports-dir={workdir / 'reports'}",
        "-p",
        "no:cacheprovider",
    ]


def read_summary(reports: Path) -> dict[str, Any] | None:
    """The one run's summary.json under `reports` (reports/<run>/summary.json), or None."""
    found = list(reports.glob(f"*/{SUMMARY_JSON}"))
    if len(found) != 1:
        return None
    document: dict[str, Any] = json.loads(found[0].read_text())
    return document


def run_all_checks(
    chosen: Mutant, workdir: Path, strictness: Strictness, deadline: float = ALL_CHECKS_DEADLINE
) -> AllChecksRun:
    """Run the whole default suite against `chosen`; past `deadline` the run is interrupted and has no verdict."""
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    process = subprocess.Popen(
        command(chosen, workdir, strictness), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    timed_out = False
    try:
        output, _ = process.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:
        timed_out = True
        output = _stop(process, interrupt=True)
    except KeyboardInterrupt:
        # Ctrl-C reached the run too (one process group): let it take its cluster down before going.
        _stop(process, interrupt=False)
        raise
    failed, _passed = junit_results(workdir / "reports")
    return AllChecksRun(
        chosen,
        strictness,
        process.returncode,
        read_summary(workdir / "reports"),
        failed,
        output[-OUTPUT_TAIL:],
        time.monotonic() - started,
        timed_out,
    )


def run_mutant_verdicts(chosen: Mutant, workdir: Path, registry: Registry) -> MutantVerdicts:
    """The whole suite against `chosen` under contract strictness, then under strict where its bug calls for it."""
    basis = basis_of(chosen, registry)
    contract = run_all_checks(chosen, workdir / str(Strictness.CONTRACT), Strictness.CONTRACT)
    strict = None
    if needs_strict_run(basis, contract):
        strict = run_all_checks(chosen, workdir / str(Strictness.STRICT), Strictness.STRICT)
    return MutantVerdicts(chosen, basis, contract, strict)


def _stop(process: subprocess.Popen[str], interrupt: bool) -> str:
    """SIGINT the run if `interrupt` (pytest then tears down its cluster), SIGKILL it if it does not stop in time."""
    if interrupt and process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        output, _ = process.communicate(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
    return output or ""
