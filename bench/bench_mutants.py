#!/usr/bin/env python3
"""Benchmark: the mutation score of the bundled suites against the reference driver's broken modes.

Each mutant (a realistic vendor bug: a `--broken-mode` of the reference driver, or a broken RBAC manifest) runs as
the driver under test on a private local cluster, one after the other (tests/mutants/harness.py, the same code the
tests/mutants tests use). Prints the table mutant -> failing tests (the check named for it marked `*`) and the
score killed/total. A mutant is killed when its named check fails. Exit 1 if any mutant survived.

    python bench/mutants [--mutant NAME ...] [--all-checks]

By default each mutant runs only its named check (about a minute each); `--all-checks` runs every named check
against every mutant, which shows which other checks also catch it (much slower).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from dra_conformance import paths

# The harness lives with its tests in the checkout (tests/mutants), not in the installed engine.
sys.path.insert(0, str(paths.CHECKOUT))
from tests.mutants.harness import MUTANTS, MutantRun, mutant, run_mutant

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--mutant", action="append", choices=[m.name for m in MUTANTS], help="run only these (repeatable)"
    )
    parser.add_argument("--all-checks", action="store_true", help="run every named check against each mutant")
    args = parser.parse_args()
    chosen = [mutant(name) for name in args.mutant] if args.mutant else list(MUTANTS)
    checks = sorted({m.killed_by for m in MUTANTS}) if args.all_checks else None
    runs = []
    with tempfile.TemporaryDirectory(prefix="dra-bench-mutants-") as scratch:
        for index, each in enumerate(chosen, 1):
            run = run_mutant(each, Path(scratch) / each.name, checks)
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


if __name__ == "__main__":
    sys.exit(main())
