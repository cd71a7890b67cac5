#!/usr/bin/env python3
"""Compare two benchmark records (`--json` of the benches): old, new, new/old and worse/better per figure.

    python bench/compare OLD NEW [--tolerance PCT] [--fail-on-regression PCT]

For every bench and figure in both records one line: the old and new value, the ratio new/old, and "worse",
"better" or "same" by the figure's direction (lower or higher is better); a change within the tolerance
(TOLERANCE, 5%) is "same", since two runs on one machine differ by a few percent. Figures or benches in only one
record are listed as added or removed. Under each bench a note says when the two were measured on different
machines or with different options: their ratios then say little.

Exit 0 whatever changed (the output is for review), 2 with one line when a record is missing or malformed, and
with `--fail-on-regression PCT` 1 when some figure got worse by more than PCT percent.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from bench_record import HIGHER, BenchEntry, Figure, Record, RecordError, load

# Relative change below which a figure counts as the same (run-to-run noise on one machine).
TOLERANCE = 0.05
WORSE, BETTER, SAME = "worse", "better", "same"
UNIT_CHANGED = "unit changed: not compared"
COMMIT_WIDTH = 10


@dataclass(frozen=True)
class Change:
    """One figure in both records."""

    name: str
    old: Figure
    new: Figure

    @property
    def ratio(self) -> float | None:
        """The ratio new / old, or None when old is 0."""
        return self.new.value / self.old.value if self.old.value else None

    @property
    def worsening(self) -> float:
        """How much worse, relative to |old| (negative: better); infinite when old is 0 and new is not."""
        if self.old.value == self.new.value:
            return 0.0
        if not self.old.value:
            growth = float("inf") if self.new.value > 0 else float("-inf")
        else:
            growth = (self.new.value - self.old.value) / abs(self.old.value)
        return -growth if self.new.better == HIGHER else growth

    def verdict(self, tolerance: float) -> str:
        """worse, better or same (within `tolerance`), by the new record's direction for the figure."""
        if self.old.unit != self.new.unit:
            return UNIT_CHANGED
        if self.worsening > tolerance:
            return WORSE
        if self.worsening < -tolerance:
            return BETTER
        return SAME


def amount(figure: Figure) -> str:
    return f"{figure.value:.4g} {figure.unit}".rstrip()


def short(commit: str) -> str:
    head, plus, changes = commit.partition("+")
    return head[:COMMIT_WIDTH] + plus + changes


def context(entry: BenchEntry) -> str:
    """Commit, time and load average of an entry, for its bench's heading."""
    load = ", ".join(f"{x:.2f}" for x in entry.load_average) or "?"
    return f"{short(entry.commit)} ({entry.recorded_at}, load average {load})"


def comparable_options(argv: list[str]) -> list[str]:
    """A bench's options without `--json [PATH]`: where a record is written does not change its figures."""
    kept: list[str] = []
    skip_path = False
    for arg in argv:
        if skip_path:
            skip_path = False
            if not arg.startswith("-"):
                continue
        if arg == "--json":
            skip_path = True
        elif not arg.startswith("--json="):
            kept.append(arg)
    return kept


def notes(old: BenchEntry, new: BenchEntry) -> list[str]:
    """What makes the two entries' figures hard to compare: another machine, other options."""
    found = []
    if old.machine != new.machine:
        found.append(f"machine differs: {describe_machine(old)} -> {describe_machine(new)}")
    if comparable_options(old.argv) != comparable_options(new.argv):
        found.append(f"options differ: {' '.join(old.argv) or '(none)'} -> {' '.join(new.argv) or '(none)'}")
    return found


def describe_machine(entry: BenchEntry) -> str:
    machine = entry.machine
    return f"{machine.get('cores', '?')} cores, {machine.get('memory_gib', '?')} GiB, {machine.get('cpu', '?')}"


@dataclass
class Comparison:
    """The lines to print and the changes behind them."""

    lines: list[str]
    changes: list[tuple[str, Change]]


def compare(old: Record, new: Record, tolerance: float = TOLERANCE) -> Comparison:
    """Every bench and figure of the two records, old and new side by side."""
    lines: list[str] = []
    changes: list[tuple[str, Change]] = []
    counts = {WORSE: 0, BETTER: 0, SAME: 0, UNIT_CHANGED: 0, "added": 0, "removed": 0}
    for bench in sorted(old.keys() & new.keys()):
        before, after = old[bench], new[bench]
        lines.append(f"{bench}: commit {context(before)} -> {context(after)}")
        lines.extend(f"  note: {note}" for note in notes(before, after))
        common = [name for name in after.figures if name in before.figures]
        width = max((len(name) for name in after.figures.keys() | before.figures.keys()), default=0)
        for name in common:
            change = Change(name, before.figures[name], after.figures[name])
            changes.append((bench, change))
            verdict = change.verdict(tolerance)
            counts[verdict] += 1
            ratio = f"{change.ratio:.2f}" if change.ratio is not None else "n/a"
            lines.append(
                f"  {name:<{width}}  {amount(change.old):>14} -> {amount(change.new):>14}  new/old {ratio:>6}  "
                f"{verdict}"
            )
        for name in after.figures.keys() - before.figures.keys():
            counts["added"] += 1
            lines.append(f"  {name:<{width}}  added: {amount(after.figures[name])}")
        for name in before.figures.keys() - after.figures.keys():
            counts["removed"] += 1
            lines.append(f"  {name:<{width}}  removed (was {amount(before.figures[name])})")
    for bench in sorted(new.keys() - old.keys()):
        counts["added"] += len(new[bench].figures)
        lines.append(f"{bench}: added ({len(new[bench].figures)} figures, only in the new record)")
    for bench in sorted(old.keys() - new.keys()):
        counts["removed"] += len(old[bench].figures)
        lines.append(f"{bench}: removed ({len(old[bench].figures)} figures, only in the old record)")
    summary = ", ".join(f"{count} {what}" for what, count in counts.items() if count or what in (WORSE, BETTER))
    lines.append(f"{summary} (same: within {tolerance:.0%} of the old value)")
    return Comparison(lines, changes)


def regressions(comparison: Comparison, limit: float) -> list[str]:
    """Figures that got worse by more than `limit` (a fraction), as `bench.figure (+N%)`."""
    return [
        f"{bench}.{change.name} ({change.worsening:+.0%})"
        for bench, change in comparison.changes
        if change.old.unit == change.new.unit and change.worsening > limit
    ]


def percent(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: a percentage must not be negative")
    return value / 100


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/compare", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--tolerance", type=percent, default=TOLERANCE, metavar="PCT", help=f"default {TOLERANCE:.0%}")
    parser.add_argument(
        "--fail-on-regression", type=percent, metavar="PCT", help="exit 1 if a figure got worse by more than PCT%%"
    )
    args = parser.parse_args(argv)
    try:
        old, new = load(args.old), load(args.new)
    except RecordError as error:
        print(f"bench/compare: {error}", file=sys.stderr)
        return 2
    print(f"old {args.old}, new {args.new}")
    comparison = compare(old, new, args.tolerance)
    print("\n".join(comparison.lines))
    if args.fail_on_regression is None:
        return 0
    found = regressions(comparison, args.fail_on_regression)
    if found:
        print(f"regressions beyond {args.fail_on_regression:.0%}: {', '.join(found)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
