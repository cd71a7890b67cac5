#!/usr/bin/env python3
"""Benchmark: the mutation score of the bundled suites against the reference driver's broken modes.

Each mutant (a realistic vendor bug: a `--broken-mode` of the reference driver, or a broken RBAC manifest) runs as
the driver under test, one after the other, on one local cluster whose driver each swaps (tests/mutants/harness.py,
the same code the tests/mutants tests use).

    python bench/mutants [--mutant NAME ...] [--all-checks [--workdir DIR]] [--json [PATH]]

By default each mutant runs only its named check (about a minute each): prints the table mutant -> failing tests
(the check named for it marked `*`) and the score killed/total. A mutant is killed when its named check fails. Exit
1 if any mutant survived. This shows each check bites; it does not show a vendor with the bug would be refused.

`--all-checks` runs the WHOLE default suite (every bundled suite, no -k, -n 2) against each mutant and reads the
run's certification verdict (tests/mutants/all_checks.py). Each mutant breaks one registry obligation, and its
basis says when the bug must be refused: a contract bug under a vendor's default `strictness: contract` ("not
certified"); a defensive bug only under `strict`, so under contract strictness it must be "certified with
advisories" naming that obligation, and a second run under strict must be "not certified". Prints per mutant the
obligation it breaks, the verdict under each strictness run, the obligation ids that decided it, the wall time and
how the named check ended; then the score "N/M mutants not certified under the strictness their obligation calls
for". Exit 1 if any mutant was not refused as its basis says or a run gave no verdict. About 2-3 minutes per run
on two cores.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import bench_record
from bench_record import Figure, higher, lower

from dra_conformance import paths
from dra_conformance.model.obligations import Basis, Registry

# The harness lives with its tests in the checkout (tests/mutants), not in the installed engine.
sys.path.insert(0, str(paths.CHECKOUT))
from tests.mutants.all_checks import AllChecksRun, MutantVerdicts, Result, run_mutant_verdicts
from tests.mutants.harness import MUTANTS, Mutant, MutantRun, mutant, run_mutant
from tests.shared_cluster import stop_shared_cluster

NAMED_MARK = "*"
# Characters of the named check's failure message shown under each row (what it caught).
WHY_WIDTH = 200


def verdict(run: MutantRun) -> str:
    """killed, SURVIVED (the run failed other checks or none), or why the run gave no verdict.

    A named check that failed on something else than the bug's obligation (its setup broke) gave no verdict.
    """
    if run.killed:
        return "killed"
    if run.returncode not in (0, 1):
        return f"no verdict (exit {run.returncode})"
    if run.mutant.killed_by in run.failed:
        return "no verdict (the named check failed on another obligation or its setup)"
    return "SURVIVED"


def failing(run: MutantRun) -> str:
    """The failing tests, the named one marked."""
    names = [f"{name}{NAMED_MARK if name == run.mutant.killed_by else ''}" for name in sorted(run.failed)]
    return ", ".join(names) or "(none)"


def named_figures(runs: list[MutantRun]) -> list[Figure]:
    """The record of the default mode (`--json`): the score, and per mutant whether it was killed and how fast."""
    killed = sum(run.killed for run in runs)
    return [
        higher("score_pct", 100 * killed / len(runs), "%"),
        lower("not_killed", len(runs) - killed, "count"),
        lower("seconds_total", sum(run.seconds for run in runs), "s"),
        *(higher(f"{run.mutant.name}.killed", run.killed, "bool") for run in runs),
        *(lower(f"{run.mutant.name}.seconds", run.seconds, "s") for run in runs),
    ]


def named_checks(chosen: list[Mutant], record: str | None, base: Path | None = None) -> int:
    """The default mode: each mutant against its named check only (`base`: the reference driver build's profile)."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="dra-bench-mutants-") as scratch:
        shared = Path(scratch) / "shared-cluster"  # one cluster, each mutant's driver swapped in
        try:
            for index, each in enumerate(chosen, 1):
                run = run_mutant(each, Path(scratch) / each.name, cluster=shared, base=base)
                runs.append(run)
                print(f"[{index}/{len(chosen)}] {each.name}: {verdict(run)} in {run.seconds:.0f} s", flush=True)
                if verdict(run).startswith("no verdict"):
                    print(f"  output tail: {run.output[-600:]}", flush=True)
        finally:
            stop_shared_cluster(shared)
    width = max(len(run.mutant.name) for run in runs)
    print(f"\n{'mutant':<{width}}  {'verdict':<8}  failing tests ({NAMED_MARK} = the check named for the mutant)")
    for run in runs:
        print(f"{run.mutant.name:<{width}}  {verdict(run):<8}  {failing(run)}")
        why = run.failed.get(run.mutant.killed_by, "passed or did not run")[:WHY_WIDTH]
        print(f"{'':<{width}}  {'':<8}  {NAMED_MARK} {run.mutant.killed_by}: {why}")
    killed = sum(run.killed for run in runs)
    print(f"\nmutation score: {killed}/{len(runs)} killed ({100 * killed / len(runs):.0f}%)")
    bench_record.save(record, "mutants", named_figures(runs))
    return 0 if killed == len(runs) else 1


def notes(verdicts: MutantVerdicts) -> list[str]:
    """What to say under a mutant's rows besides its obligations."""
    result, breaks = verdicts.result, verdicts.mutant.breaks
    if result == Result.KILLED_UNDER_STRICT:
        return [f"defensive: an advisory ({breaks}) under contract strictness, refused under strict"]
    if result == Result.SURVIVED:
        return ["certified: the suite let the bug through"]
    if result == Result.CONTRACT_BUG_CERTIFIED:
        return [f"{breaks} is a contract obligation: a driver breaking it must not be certified under any strictness"]
    if result == Result.ADVISORY_MISSING:
        return [f"certified with advisories, but none for {breaks}: {', '.join(verdicts.contract.advisories)}"]
    if result == Result.NO_VERDICT:
        return [no_verdict(run) for run in (verdicts.contract, verdicts.strict) if run is not None and not run.verdict]
    return []


def no_verdict(run: AllChecksRun) -> str:
    """Why a run gave no verdict, with its output's tail."""
    reasons = list(run.summary.get("reasons", [])) if run.summary is not None else []
    why = "; ".join(reasons) or f"exit {run.returncode}, {'deadline passed, ' if run.timed_out else ''}no summary"
    return f"{run.strictness}: no verdict: {why}"[: WHY_WIDTH * 2] + f"\n  output tail: {run.output[-600:]}"


def counts(run: AllChecksRun) -> str:
    """'<failed> failed, <errors> errors of <collected> checks' of the run, from its summary."""
    if run.summary is None:
        return "no summary"
    totals = run.summary.get("totals") or {}
    collected = (run.summary.get("accounting") or {}).get("collected", sum(totals.values()))
    return f"{totals.get('failed', 0)} failed, {totals.get('error', 0)} errors of {collected} checks"


def whole_suite_figures(done: list[MutantVerdicts]) -> list[Figure]:
    """The record of --all-checks (`--json`): the refusals by basis, and per mutant whether it was refused."""
    refused = [v for v in done if not v.result.fails_the_bench]

    def seconds(verdicts: MutantVerdicts) -> float:
        return sum(run.seconds for run in (verdicts.contract, verdicts.strict) if run is not None)

    return [
        higher("refused_pct", 100 * len(refused) / len(done), "%"),
        lower("not_refused", len(done) - len(refused), "count"),
        *(
            higher(f"{basis}_refused", sum(v.basis == basis for v in refused), "count")
            for basis in (Basis.CONTRACT, Basis.DEFENSIVE)
        ),
        higher("named_obligation_refusals", sum(v.named_its_obligation for v in refused), "count"),
        lower("seconds_total", sum(seconds(v) for v in done), "s"),
        *(higher(f"{v.mutant.name}.refused", not v.result.fails_the_bench, "bool") for v in done),
        *(lower(f"{v.mutant.name}.seconds", seconds(v), "s") for v in done),
    ]


def whole_suite(chosen: list[Mutant], workdir: Path | None, record: str | None) -> int:
    """--all-checks: each mutant against the whole default suite, refused under the strictness its bug calls for."""
    registry = Registry.load()
    done: list[MutantVerdicts] = []
    with tempfile.TemporaryDirectory(prefix="dra-bench-mutants-") as scratch:
        for index, each in enumerate(chosen, 1):
            verdicts = run_mutant_verdicts(each, (workdir or Path(scratch)) / each.name, registry)
            done.append(verdicts)
            runs = [r for r in (verdicts.contract, verdicts.strict) if r is not None]
            said = "; ".join(f"{r.strictness}: {r.verdict or 'no verdict'} in {r.seconds:.0f} s" for r in runs)
            print(f"[{index}/{len(chosen)}] {each.name} ({verdicts.basis}): {verdicts.result} ({said})", flush=True)
    width = max(len("mutant"), *(len(v.mutant.name) for v in done))
    print(f"\n{'mutant':<{width}}  {'breaks (basis)':<60}  result")
    indent = " " * (width + 2)
    for verdicts in done:
        breaks = f"{verdicts.mutant.breaks} ({verdicts.basis})"
        print(f"{verdicts.mutant.name:<{width}}  {breaks:<60}  {verdicts.result}")
        for run in (verdicts.contract, verdicts.strict):
            if run is None:
                continue
            obligations = ", ".join(run.obligations) or "(none named)"
            print(f"{indent}{run.strictness}: {run.verdict or 'no verdict'} in {run.seconds:.0f} s; {counts(run)}")
            print(f"{indent}  deciding obligations: {obligations}")
            if run.advisories and run.verdict != "not certified":
                print(f"{indent}  advisories: {', '.join(run.advisories)}")
        print(f"{indent}named check {verdicts.mutant.killed_by}: {verdicts.deciding.named_check}")
        for line in notes(verdicts):
            print(f"{indent}{line}")
    refused = [v for v in done if not v.result.fails_the_bench]
    print(f"\n{len(refused)}/{len(done)} mutants not certified under the strictness their obligation calls for")
    for basis in (Basis.CONTRACT, Basis.DEFENSIVE):
        of_basis = [v for v in done if v.basis == basis]
        killed = [v for v in of_basis if not v.result.fails_the_bench]
        strictness = "contract strictness" if basis == Basis.CONTRACT else "strict (advisory under contract)"
        print(f"  {basis} bugs: {len(killed)}/{len(of_basis)} not certified under {strictness}")
    named = [v.mutant.name for v in refused if not v.named_its_obligation]
    print(
        f"verdict named the broken obligation in {len(refused) - len(named)}/{len(refused)} refusals"
        + (f"; refused by other obligations: {', '.join(named)}" if named else "")
    )
    bench_record.save(record, "mutants_all_checks", whole_suite_figures(done))
    failing = [f"{v.mutant.name} ({v.result})" for v in done if v.result.fails_the_bench]
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
        help="run the whole default suite against each mutant, under the strictness its bug calls for, and "
        "score the verdicts",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="with --all-checks: keep each run's profile, cluster state and reports under DIR/<mutant> "
        "(default: a temporary directory, removed)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="the profile to break (default fixtures/profiles/reference-driver.yaml); named checks only",
    )
    bench_record.add_option(parser)
    args = parser.parse_args()
    if args.profile is not None and args.all_checks:
        parser.error("--profile: named checks only (not with --all-checks)")
    chosen = [mutant(name) for name in args.mutant] if args.mutant else list(MUTANTS)
    reused = [
        str(args.workdir / m.name) for m in chosen if args.workdir and (args.workdir / m.name / "reports").exists()
    ]
    if reused:
        parser.error(f"--workdir: earlier runs' reports in {', '.join(reused)} (one run per directory)")
    if args.all_checks:
        return whole_suite(chosen, args.workdir, args.json)
    return named_checks(chosen, args.json, args.profile.resolve() if args.profile else None)


if __name__ == "__main__":
    sys.exit(main())
