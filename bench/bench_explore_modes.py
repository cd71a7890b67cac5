#!/usr/bin/env python3
"""Benchmark: the explorer alone against each broken mode of the reference driver (issue 43's acceptance table).

    bench/explore_modes [--mode NAME ...] [--seed N] [--budget-seconds S] [--shrink-seconds S] [--json [PATH]]
                        [--state-dir DIR]

Each mutant of tests/mutants/harness.py that is a broken mode of the driver (a `--broken-mode`, given as a mode or
as an argument) runs as the driver under test of `dra-conformance explore`, which runs the explorer's suite only (no
named check), with the explorer's default budget unless told otherwise. The reference driver with no broken mode
comes first (expected: no finding). They run one after another on one local cluster this bench holds, each swapping
its driver in (tests/shared_cluster.swap_in, as bench/mutants), from profiles written by the harness's own
mutant_profile to reports/explore-modes/profiles/ (kept: the replay commands name them). The mutant of the RBAC
the driver ships is skipped: it is no mode of the driver. The modes run as shipped by bench/mutants (a rolling update
on the real node) run here as the local build, like every other mode: the explorer uses kwok nodes only.

Prints per mode: found (the run failed on the explorer's finding), not found (it passed), or no verdict (neither,
or the exploration could not go on and found nothing; where it could not go on beside a finding, the row says so);
the obligation found, the examples and steps explored (shrinking not counted: exploring stops at the first failure),
the shrunk sequence's length, the operation kinds covered (shrinking included) and the wall time (driver swap
included). Then "found N of M", the shrunk sequence and the replay command of the first three found as the explorer
printed them, and each run's operations as the explorer printed them. Exit 1 if a run gave no verdict (a mode not
found is a figure, not a failure).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bench_record
import yaml
from bench_record import Figure, higher, lower

from dra_conformance import paths
from dra_conformance.cli import EXPLORE_SLACK
from dra_conformance.driver.profile import Strictness
from dra_conformance.explore import RECORD_KIND
from dra_conformance.explore.runner import DEFAULT_SECONDS, DEFAULT_SHRINK_SECONDS
from dra_conformance.model.obligations import Basis, Registry
from dra_conformance.model.records import read_records

# The harness lives with its tests in the checkout (tests/mutants), not in the installed engine.
sys.path.insert(0, str(paths.CHECKOUT))
from tests.mutants.harness import MUTANT_NODES, MUTANTS, Mutant, mutant_profile
from tests.shared_cluster import stop_shared_cluster, swap_in

REFERENCE = "reference (no broken mode)"
PROFILES = paths.CHECKOUT / "reports" / "explore-modes" / "profiles"
# `dra-conformance explore` exits 0 when the exploration found nothing, 1 when its check failed.
EXIT_PASSED, EXIT_FAILED = 0, 1
# The run's directory, as the certification summary names it.
RUN_LINE = re.compile(r"^\s*run: (\S+) \(", re.MULTILINE)
# Beyond the explorer's own deadline (budget, shrinking, slack): pytest's start and the certification summary.
DEADLINE_MARGIN = 120.0
# Found modes whose shrunk sequence is printed in full.
SHOWN_FOUND = 3
OUTPUT_TAIL = 600
# Characters of a note under a row.
NOTE_WIDTH = 300


@dataclass(frozen=True)
class ModeRun:
    """One exploration of a driver: the CLI's exit code, the explorer's record (None: it wrote none), the output."""

    name: str
    returncode: int
    seconds: float
    record: dict[str, Any] | None
    output: str
    # Said under the row (how the mode ran, why there was no run).
    note: str = ""

    @property
    def finding(self) -> dict[str, Any] | None:
        """The explorer's finding, if it reported one."""
        return None if self.record is None else self.record.get("finding")

    @property
    def verdict(self) -> str:
        """found, not found, or no verdict and why."""
        if self.returncode == EXIT_FAILED and self.finding is not None:
            return "found"
        if self.record is not None and self.record.get("harness"):
            return f"no verdict (exit {self.returncode}, the exploration could not go on)"
        if self.returncode == EXIT_PASSED and self.record is not None:
            return "not found"
        return f"no verdict (exit {self.returncode}{', no exploration recorded' if self.record is None else ''})"

    @property
    def found(self) -> bool:
        """The explorer found the mode's bug (or, for the reference driver, reported a finding)."""
        return self.verdict == "found"


def run_dir_of(output: str) -> Path | None:
    """The run's report directory, as the certification summary at the end of `output` names it."""
    matches = RUN_LINE.findall(output)
    return Path(matches[-1]) if matches else None


def record_of(output: str) -> dict[str, Any] | None:
    """The explorer's record of the run whose output this is (None when it wrote none)."""
    run_dir = run_dir_of(output)
    records = read_records(run_dir, RECORD_KIND) if run_dir is not None and run_dir.is_dir() else []
    return records[-1] if records else None


def explored_mutants() -> tuple[list[Mutant], list[str]]:
    """The mutants that are broken modes of the driver (a shipped one as the local build), and those skipped, why."""
    chosen, skipped = [], []
    for each in MUTANTS:
        if each.rbac is not None or not (each.modes or any(a.startswith("--broken-mode=") for a in each.args)):
            why = "the RBAC the driver ships, broken" if each.rbac is not None else "no broken mode"
            skipped.append(f"{each.name} ({why}: no mode of the driver to explore)")
        else:
            chosen.append(dataclasses.replace(each, shipped=False))
    return chosen, skipped


@functools.cache
def _registry() -> Registry:
    return Registry.load()


def note_of(name: str) -> str:
    """How a mode runs here unlike in bench/mutants."""
    shipped = {each.name for each in MUTANTS if each.shipped}
    defensive = {each.name for each in MUTANTS if _registry()[each.breaks].basis is Basis.DEFENSIVE}
    said = []
    if name in shipped:
        said.append(
            "run as the local build on kwok nodes, its profile declaring rollingUpdate (bench/mutants: as shipped, on"
            " the real node)"
        )
    if name in defensive:
        said.append("its obligation is defensive: explored under strictness strict")
    return "; ".join(said)


def explore(profile: Path, name: str, state_dir: Path, args: argparse.Namespace) -> ModeRun:
    """Swap `profile`'s driver into the cluster of `state_dir` and run `dra-conformance explore` against it."""
    started = time.monotonic()
    refused = swap_in(profile, state_dir, MUTANT_NODES)
    if refused is not None:
        return ModeRun(name, -1, time.monotonic() - started, None, refused, note="driver did not start")
    command = [
        sys.executable,
        "-m",
        "dra_conformance.cli",
        "explore",
        f"--profile={profile}",
        f"--state-dir={state_dir}",
        f"--nodes={MUTANT_NODES}",
        "--replace-driver",
        f"--budget-seconds={args.budget_seconds:g}",
        f"--shrink-seconds={args.shrink_seconds:g}",
        *([f"--seed={args.seed}"] if args.seed is not None else []),
    ]
    deadline = args.budget_seconds + args.shrink_seconds + EXPLORE_SLACK + DEADLINE_MARGIN
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=deadline, check=False)
    except subprocess.TimeoutExpired as expired:
        output = expired.stdout if isinstance(expired.stdout, str) else ""
        return ModeRun(name, -1, time.monotonic() - started, None, output, note=f"deadline {deadline:g} s passed")
    output = result.stdout + result.stderr
    return ModeRun(name, result.returncode, time.monotonic() - started, record_of(output), output, note_of(name))


def columns(run: ModeRun) -> list[str]:
    """The row of `run`: mode, verdict, obligation, examples, steps, shrunk, op kinds, seconds."""
    record, finding = run.record or {}, run.finding or {}
    explored = (
        record.get("examples", 0) - record.get("shrink_examples", 0),
        record.get("steps", 0) - record.get("shrink_steps", 0),
    )
    return [
        run.name,
        run.verdict,
        finding.get("obligation", "-"),
        str(explored[0]) if run.record else "-",
        str(explored[1]) if run.record else "-",
        str(len(finding["steps"])) if finding else "-",
        str(len(record.get("operations", {}))) if run.record else "-",
        f"{run.seconds:.0f}",
    ]


HEADER = ["mode", "verdict", "obligation found", "examples", "steps", "shrunk", "op kinds", "s"]


def table(runs: list[ModeRun]) -> list[str]:
    """The rows of `runs` under the header, columns aligned, each note under its row."""
    rows = [HEADER, *(columns(run) for run in runs)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        lines += [f"{'':<{widths[0]}}  {note}" for note in (notes(runs[index - 1]) if index else [])]
    return lines


def notes(run: ModeRun) -> list[str]:
    """What to say under `run`'s row: how it ran, and why the exploration stopped short (also beside a finding)."""
    harness = (run.record or {}).get("harness")
    said = [f"the exploration could not go on: {harness}"[:NOTE_WIDTH]] if harness else []
    return [run.note, *said] if run.note else said


def finding_lines(run: ModeRun) -> list[str]:
    """The explorer's lines from its finding on: the obligation, the shrunk sequence, the replay command."""
    lines: list[str] = list((run.record or {}).get("lines", []))
    start = next((i for i, line in enumerate(lines) if line.startswith("finding: ")), len(lines))
    return lines[start:]


def coverage_line(run: ModeRun) -> str:
    """The explorer's operations line of `run` (what it covered), or why there is none."""
    lines: list[str] = list((run.record or {}).get("lines", []))
    return next((line for line in lines if line.startswith("operations: ")), "operations: (no exploration recorded)")


def score(runs: list[ModeRun]) -> str:
    """'found N of M broken modes' (the reference driver's row not counted)."""
    modes = [run for run in runs if run.name != REFERENCE]
    return f"found {sum(run.found for run in modes)} of {len(modes)} broken modes"


def report(runs: list[ModeRun], skipped: list[str]) -> list[str]:
    """The table, the score, the first found modes' sequences, and each run's coverage."""
    lines = ["", *table(runs), "", score(runs)]
    lines += [f"skipped: {why}" for why in skipped]
    found = [run for run in runs if run.found and run.name != REFERENCE][:SHOWN_FOUND]
    for run in found:
        lines += ["", f"{run.name}:", *(f"  {line}" for line in finding_lines(run))]
    lines += ["", "coverage (the explorer's operations per run):"]
    lines += [f"  {run.name}: {coverage_line(run).removeprefix('operations: ')}" for run in runs]
    return lines


def figures(runs: list[ModeRun]) -> list[Figure]:
    """The record (`--json`): how many modes were found, and per mode whether it was and in how many steps."""
    modes = [run for run in runs if run.name != REFERENCE]
    found = sum(run.found for run in modes)
    return [
        higher("found", found, "count"),
        higher("found_pct", 100 * found / len(modes) if modes else 0, "%"),
        lower("seconds_total", sum(run.seconds for run in runs), "s"),
        *(higher(f"{run.name.split(' ')[0]}.found", run.found, "bool") for run in runs),
        *(lower(f"{run.name.split(' ')[0]}.seconds", run.seconds, "s") for run in runs),
    ]


def _as_explored(each: Mutant, profile: Path) -> Path:
    """`profile` as the explorer runs the mode: rollingUpdate declared where shipped for it, strict where defensive.

    The explorer draws a rolling update only where the profile declares one (as the shipped profile does); the
    bundled profile, which the local build's mutant profiles copy, declares none. A defensive finding is an advisory
    under a profile's default strictness (contract) and the exploration goes on: a mode breaking a defensive
    obligation is found under strict, as bench/mutants --all-checks refuses it.
    """
    shipped = any(m.name == each.name and m.shipped for m in MUTANTS)
    defensive = _registry()[each.breaks].basis is Basis.DEFENSIVE
    if not shipped and not defensive:
        return profile
    document = yaml.safe_load(profile.read_text())
    if shipped:
        document.setdefault("capabilities", {})["rollingUpdate"] = True
    if defensive:
        document["strictness"] = str(Strictness.STRICT)
    profile.write_text(yaml.safe_dump(document, sort_keys=False))
    return profile


def run_all(chosen: list[Mutant], state_dir: Path, args: argparse.Namespace) -> list[ModeRun]:
    """The reference driver, then each mode, on the cluster of `state_dir` (stopped at the end)."""
    PROFILES.mkdir(parents=True, exist_ok=True)
    drivers = [(REFERENCE, paths.reference_driver_profile())]
    drivers += [(each.name, _as_explored(each, mutant_profile(each, PROFILES))) for each in chosen]
    runs = []
    try:
        for index, (name, profile) in enumerate(drivers, 1):
            run = explore(profile, name, state_dir, args)
            runs.append(run)
            print(f"[{index}/{len(drivers)}] {name}: {run.verdict} in {run.seconds:.0f} s", flush=True)
            if not run.found and run.verdict != "not found":
                print(f"  output tail: {run.output[-OUTPUT_TAIL:]}", flush=True)
    finally:
        stop_shared_cluster(state_dir)
    return runs


def main() -> int:
    chosen, skipped = explored_mutants()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--mode", action="append", choices=[m.name for m in chosen], metavar="NAME", help="run only these (repeatable)"
    )
    parser.add_argument("--seed", type=int, help="the seed of every exploration (default: the explorer's, per run)")
    parser.add_argument(
        "--budget-seconds",
        type=float,
        default=DEFAULT_SECONDS,
        help=f"seconds of drawing new examples per mode (default the explorer's, {DEFAULT_SECONDS:g})",
    )
    parser.add_argument(
        "--shrink-seconds",
        type=float,
        default=DEFAULT_SHRINK_SECONDS,
        help=f"seconds of shrinking a finding (default the explorer's, {DEFAULT_SHRINK_SECONDS:g})",
    )
    parser.add_argument(
        "--state-dir", type=Path, help="the local cluster's state directory (default: a temporary one, removed)"
    )
    bench_record.add_option(parser)
    args = parser.parse_args()
    if args.mode:
        chosen = [each for each in chosen if each.name in args.mode]
        skipped = []
    with tempfile.TemporaryDirectory(prefix="dra-bench-explore-modes-") as scratch:
        state_dir = args.state_dir.resolve() if args.state_dir else Path(scratch) / "cluster"
        runs = run_all(chosen, state_dir, args)
    print("\n".join(report(runs, skipped)))
    bench_record.save(args.json, "explore_modes", figures(runs))
    return 0 if all(run.found or run.verdict == "not found" for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
