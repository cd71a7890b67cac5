#!/usr/bin/env python3
"""Benchmark: the mutation score of the bundled suites against the reference driver's broken modes.

Each mutant (a realistic vendor bug: a `--broken-mode` of the reference driver, or a broken RBAC manifest) runs as
the driver under test on a private local cluster, one after the other (tests/mutants/harness.py, the same code the
tests/mutants tests use).

    python bench/mutants [--mutant NAME ...] [--all-checks [--workdir DIR]]

By default each mutant runs only its named check (about a minute each): prints the table mutant -> failing tests
(the check named for it marked `*`) and the score killed/total. A mutant is killed when its named check fails. Exit
1 if any mutant survived. This shows each check bites; it does not show a vendor with the bug would be refused.

`--all-checks` runs the WHOLE default suite (every bundled suite, no -k, -n 2) against each mutant, from its profile
with `strictness: contract` (the verdict a vendor gets), and reads the run's certification verdict
(tests/mutants/all_checks.py): a mode is killed when the verdict is "not certified". Prints per mode the verdict,
the obligation ids that decided it, the wall time and how the named check ended, then the score "N/M modes not
certified by the whole suite". A mode only defensive obligations catch is certified with advisories: it is flagged
DEFENSIVE-ONLY (under --dra-strictness strict it would not be certified), and expected for modes the contract allows
(all_checks.LEGITIMATE_UNDER_CONTRACT). Exit 1 if any other mode was certified, a run gave no verdict, or a mode the
contract allows was not certified. About 2-3 minutes per mutant on two cores.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from dra_conformance import paths
from dra_conformance.report.certification import Verdict

# The harness lives with its tests in the checkout (tests/mutants), not in the installed engine.
sys.path.insert(0, str(paths.CHECKOUT))
from tests.mutants.all_checks import LEGITIMATE_UNDER_CONTRACT, AllChecksRun, Result, run_all_checks
from tests.mutants.harness import MUTANTS, Mutant, MutantRun, mutant, run_mutant

NAMED_MARK = "*"
# Characters of the named check's failure message shown under each row (what it caught).
WHY_WIDTH = 200


def verdict(run: MutantRun) -> str:
    """killed, SURVIVED (the run failed other checks or none), or why the run gave no verdict."""
    if run.killed:
        return "killed"
    if run.returncode not in (0, 1):
        return f"no verdict (exit {run.returncode})"
    return "SURVIVED"


def failing(run: MutantRun) -> str:
    """The failing tests, the named one marked."""
    names = [f"{name}{NAMED_MARK if name == run.mutant.killed_by else ''}" for name in sorted(run.failed)]
    return ", ".join(names) or "(none)"


def named_checks(chosen: list[Mutant]) -> int:
    """The default mode: each mutant against its named check only."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="dra-bench-mutants-") as scratch:
        for index, each in enumerate(chosen, 1):
            run = run_mutant(each, Path(scratch) / each.name)
            runs.append(run)
            print(f"[{index}/{len(chosen)}] {each.name}: {verdict(run)} in {run.seconds:.0f} s", flush=True)
            if verdict(run).startswith("no verdict"):
                print(f"  output tail: {run.output[-600:]}", flush=True)
    width = max(len(run.mutant.name) for run in runs)
    print(f"\n{'mutant':<{width}}  {'verdict':<8}  failing tests ({NAMED_MARK} = the check named for the mutant)")
    for run in runs:
        print(f"{run.mutant.name:<{width}}  {verdict(run):<8}  {failing(run)}")
        why = run.failed.get(run.mutant.killed_by, "passed or did not run")[:WHY_WIDTH]
        print(f"{'':<{width}}  {'':<8}  {NAMED_MARK} {run.mutant.killed_by}: {why}")
    killed = sum(run.killed for run in runs)
    print(f"\nmutation score: {killed}/{len(runs)} killed ({100 * killed / len(runs):.0f}%)")
    return 0 if killed == len(runs) else 1


def notes(run: AllChecksRun) -> list[str]:
    """What to say under a mode's row besides its obligations."""
    result = run.result
    if result == Result.EXPECTED_DEFENSIVE_ONLY:
        return [f"expected: {LEGITIMATE_UNDER_CONTRACT[run.mutant.name]}"]
    if result == Result.DEFENSIVE_ONLY:
        return ["only defensive obligations caught it: under --dra-strictness strict it would be not certified"]
    if result == Result.SURVIVED:
        return ["certified: no check failed and no advisory was written"]
    if result == Result.REFUSES_LEGITIMATE:
        return [f"the contract allows this mode, the suite refuses it: {LEGITIMATE_UNDER_CONTRACT[run.mutant.name]}"]
    if result == Result.NO_VERDICT:
        reasons = list(run.summary.get("reasons", [])) if run.summary is not None else []
        why = "; ".join(reasons) or f"exit {run.returncode}, {'deadline passed, ' if run.timed_out else ''}no summary"
        return [f"no verdict: {why}"[: WHY_WIDTH * 2], f"output tail: {run.output[-600:]}"]
    return []


def counts(run: AllChecksRun) -> str:
    """'<failed> failed, <errors> errors of <collected> checks' of the run, from its summary."""
    if run.summary is None:
        return "no summary"
    totals = run.summary.get("totals") or {}
    collected = (run.summary.get("accounting") or {}).get("collected", sum(totals.values()))
    return f"{totals.get('failed', 0)} failed, {totals.get('error', 0)} errors of {collected} checks"


def whole_suite(chosen: list[Mutant], workdir: Path | None) -> int:
    """--all-checks: each mutant against the whole default suite, with the verdict a vendor would get."""
    runs: list[AllChecksRun] = []
    with tempfile.TemporaryDirectory(prefix="dra-bench-mutants-") as scratch:
        for index, each in enumerate(chosen, 1):
            run = run_all_checks(each, (workdir or Path(scratch)) / each.name)
            runs.append(run)
            print(
                f"[{index}/{len(chosen)}] {each.name}: {run.result} ({run.verdict or 'no summary'}) in "
                f"{run.seconds:.0f} s",
                flush=True,
            )
    width = max(len("mode"), *(len(run.mutant.name) for run in runs))
    result_width = max(len(str(result)) for result in Result)
    verdict_header = "verdict (contract strictness)"
    verdict_width = max(len(verdict_header), *(len(str(verdict)) for verdict in Verdict))
    print(
        f"\n{'mode':<{width}}  {'result':<{result_width}}  {verdict_header:<{verdict_width}}  {'time':>6}  "
        "named check: how it ended"
    )
    indent = " " * (width + 2)
    for run in runs:
        verdict = run.verdict or "no summary"
        print(
            f"{run.mutant.name:<{width}}  {run.result:<{result_width}}  {verdict:<{verdict_width}}  "
            f"{run.seconds:>4.0f} s  {run.mutant.killed_by}: {run.named_check}"
        )
        print(f"{indent}{counts(run)}; obligations: {', '.join(run.obligations) or '(none named)'}")
        for line in notes(run):
            print(f"{indent}{line}")
    not_certified = sum(run.verdict == Verdict.NOT_CERTIFIED for run in runs)
    print(f"\n{not_certified}/{len(runs)} modes not certified by the whole suite")
    defensive = [run.mutant.name for run in runs if run.result == Result.DEFENSIVE_ONLY]
    expected = [run.mutant.name for run in runs if run.result == Result.EXPECTED_DEFENSIVE_ONLY]
    if defensive or expected:
        print(
            f"DEFENSIVE-ONLY (certified with advisories; not certified under --dra-strictness strict): "
            f"{len(defensive) + len(expected)}"
            + (f"; unexpected: {', '.join(defensive)}" if defensive else "")
            + (f"; expected, the contract allows them: {', '.join(expected)}" if expected else "")
        )
    named = sum(run.named_check_failed for run in runs)
    print(f"named check failed in {named}/{len(runs)} runs")
    failing = [f"{run.mutant.name} ({run.result})" for run in runs if run.result.fails_the_bench]
    if failing:
        print(f"FAILED: {', '.join(failing)}")
    return 1 if failing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--mutant", action="append", choices=[m.name for m in MUTANTS], help="run only these (repeatable)"
    )
    parser.add_argument(
        "--all-checks",
        action="store_true",
        help="run the whole default suite against each mutant (contract strictness) and score its verdicts",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="with --all-checks: keep each run's profile, cluster state and reports under DIR/<mutant> "
        "(default: a temporary directory, removed)",
    )
    args = parser.parse_args()
    chosen = [mutant(name) for name in args.mutant] if args.mutant else list(MUTANTS)
    reused = [
        str(args.workdir / m.name) for m in chosen if args.workdir and (args.workdir / m.name / "reports").exists()
    ]
    if reused:
        parser.error(f"--workdir: earlier runs' reports in {', '.join(reused)} (one run per directory)")
    return whole_suite(chosen, args.workdir) if args.all_checks else named_checks(chosen)


if __name__ == "__main__":
    sys.exit(main())
