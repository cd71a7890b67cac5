"""Every mutant against the WHOLE default suite, with the verdict a vendor would get.

`tests.mutants.harness.run_mutant` runs only the check written for a mutant: it proves that check bites, not that
the suite as a vendor runs it refuses the bug. Here each mutant runs as the driver under test against every bundled
suite (no `-k`, `-n 2`), from the reference profile broken as the mutant says with `strictness: contract` (the
reference profile itself is strict; a vendor's default is contract), on a private local cluster. What counts is the
run's certification verdict (reports/<run>/summary.json): a mutant is killed when the verdict is "not certified".
A bug that breaks only defensive obligations gets "certified with advisories" under contract strictness; the table
flags it DEFENSIVE-ONLY (under strict it would not be certified) instead of counting it either way.

Used by bench/mutants --all-checks. The pure parts (reading the obligation ids out of a summary, classifying a run)
are unit-tested in tests/unit/test_mutant_all_checks.py.
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

from dra_conformance.driver.profile import Strictness
from dra_conformance.report.certification import DRIVER_STAYS_UP, SUMMARY_JSON, Verdict
from fake_dra.broken import BrokenMode
from tests.mutants.harness import OUTPUT_TAIL, Mutant, junit_results, mutant_profile

# The whole default suite takes 2-3 minutes on two cores, plus the cluster's start and stop; room for a busy machine.
ALL_CHECKS_DEADLINE = 1800.0
# After the deadline the run gets SIGINT (pytest tears its fixtures and the cluster down), then this long to stop.
STOP_GRACE = 120.0
WORKERS = 2

# Broken modes whose behaviour the contract allows: only a defensive obligation can flag them, so "certified with
# advisories" is the right verdict under contract strictness (they are expected DEFENSIVE-ONLY).
LEGITIMATE_UNDER_CONTRACT: dict[str, str] = {
    str(BrokenMode.FAILS_WHOLE_CALL): (
        "the contract allows a whole-call error: the upstream kubeletplugin helper answers unknown claims with one, "
        'and the proto says "If an error is returned, the response is ignored. Failures for individual claims can '
        'be reported inside NodePrepareResourcesResponse." (can, not must)'
    ),
}

# "<obligation id> (<n> check(s))" or "advisory <id> (<n> finding(s))", as certification.decide words its reasons.
_COUNTED_ID = re.compile(r"(?<![\w./-])([a-z][a-z0-9]*\.[a-z0-9][a-z0-9-]*) \(\d+ (?:checks?|findings?)\)")


class Result(StrEnum):
    """What the whole suite made of one mutant."""

    # Not certified: a vendor shipping this bug would be refused.
    KILLED = "killed"
    # Certified with advisories: only defensive obligations broke; under strict it would not be certified.
    DEFENSIVE_ONLY = "DEFENSIVE-ONLY"
    # The same, for a mode the contract allows (LEGITIMATE_UNDER_CONTRACT): the right verdict.
    EXPECTED_DEFENSIVE_ONLY = "DEFENSIVE-ONLY (expected)"
    # Certified without a word: the whole suite let the bug through.
    SURVIVED = "SURVIVED"
    # Not certified although the contract allows the behaviour: the suite refuses a legitimate driver.
    REFUSES_LEGITIMATE = "REFUSES LEGITIMATE"
    # Incomplete, no summary, or the run overran its deadline: the run says nothing about the bug.
    NO_VERDICT = "NO VERDICT"

    @property
    def fails_the_bench(self) -> bool:
        """Whether this result makes bench/mutants --all-checks exit 1."""
        return self in (Result.SURVIVED, Result.REFUSES_LEGITIMATE, Result.NO_VERDICT)


def classify(mode: str, verdict: str | None) -> Result:
    """The result for mutant `mode` whose whole-suite run gave `verdict` (None: the run wrote no summary)."""
    legitimate = mode in LEGITIMATE_UNDER_CONTRACT
    if verdict == Verdict.NOT_CERTIFIED:
        return Result.REFUSES_LEGITIMATE if legitimate else Result.KILLED
    if verdict == Verdict.CERTIFIED_WITH_ADVISORIES:
        return Result.EXPECTED_DEFENSIVE_ONLY if legitimate else Result.DEFENSIVE_ONLY
    if verdict == Verdict.CERTIFIED:
        return Result.SURVIVED
    return Result.NO_VERDICT


def obligations_in_reasons(reasons: list[str]) -> list[str]:
    """The registry obligation ids the summary's reasons name, in order, each once.

    decide() names them as "<id> (<n> checks)" in its failure and error lists, "advisory <id> (<n> findings)",
    and "run.driver-stays-up: ..." for an unexpected exit of the driver.
    """
    found: list[str] = []
    for reason in reasons:
        ids = [DRIVER_STAYS_UP] if reason.startswith(f"{DRIVER_STAYS_UP}:") else []
        ids += _COUNTED_ID.findall(reason)
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
    """What one whole-suite run against a mutant gave."""

    mutant: Mutant
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
        """The summary's verdict; None without a summary."""
        return str(self.summary["verdict"]) if self.summary is not None else None

    @property
    def result(self) -> Result:
        """The run's classification."""
        return Result.NO_VERDICT if self.timed_out else classify(self.mutant.name, self.verdict)

    @property
    def obligations(self) -> list[str]:
        """The obligation ids that decided the verdict."""
        return deciding_obligations(self.summary) if self.summary is not None else []

    @property
    def named_check(self) -> str:
        """How the check named for the mutant ended in this run."""
        return named_check_outcome(self.summary, self.mutant.killed_by) if self.summary is not None else "unknown"

    @property
    def named_check_failed(self) -> bool:
        """Whether the check named for the mutant failed."""
        return self.named_check == "failed"


def contract_profile(chosen: Mutant, directory: Path) -> Path:
    """The harness's mutant profile (`mutant_profile`) with `strictness: contract`: the verdict a vendor gets."""
    path = mutant_profile(chosen, directory)
    profile: dict[str, Any] = yaml.safe_load(path.read_text())
    profile["strictness"] = str(Strictness.CONTRACT)
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    return path


def command(chosen: Mutant, workdir: Path) -> list[str]:
    """`dra-conformance run` of every bundled suite (no -k, no path) against `chosen` on a private local cluster."""
    return [
        sys.executable,
        "-m",
        "dra_conformance.cli",
        "run",
        "-n",
        str(WORKERS),
        "--nodes",
        "2",
        f"--profile={contract_profile(chosen, workdir)}",
        f"--dra-cluster-state-dir={workdir / 'cluster'}",
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


def run_all_checks(chosen: Mutant, workdir: Path, deadline: float = ALL_CHECKS_DEADLINE) -> AllChecksRun:
    """Run the whole default suite against `chosen`; past `deadline` the run is interrupted and has no verdict."""
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    process = subprocess.Popen(command(chosen, workdir), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
        process.returncode,
        read_summary(workdir / "reports"),
        failed,
        output[-OUTPUT_TAIL:],
        time.monotonic() - started,
        timed_out,
    )


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
