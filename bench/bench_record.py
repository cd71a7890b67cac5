"""The benchmark record: the figures a bench printed, kept per day in `reports/bench/<YYYY-MM-DD>.json`.

Every bench takes `--json [PATH]`. At its end it writes its figures (each with a name, a value, a unit and which
direction is better) together with the commit of this checkout, the machine, its command line and the time into
the day's record (UTC date), beside the entries of the other benches recorded that day; a bench recorded again the
same day replaces its own entry. Two benches finishing at once both land: the read-modify-write holds an exclusive
lock (a `.lock` file beside the record) and the new record replaces the old one atomically, so a reader never sees
half a file. `bench/compare OLD NEW` reads two records (bench_compare.py).

The file:

    {"format": 1,
     "benches": {"cluster_up": {"recorded_at": "2026-12-02T03:40:12Z", "commit": "<git rev-parse HEAD>",
                                "machine": {"cores": 2, "memory_gib": 7.8, "cpu": "..."},
                                "argv": ["--runs", "1"], "load_average": [1.2, 1.5, 1.4],
                                "figures": {"warm_start_s": {"value": 5.09, "unit": "s", "better": "lower"}}}}}

Standard library only, so `bench/compare` runs under any python3.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

FORMAT = 1
CHECKOUT = Path(__file__).resolve().parent.parent
RECORD_DIR = CHECKOUT / "reports" / "bench"
LOWER, HIGHER = "lower", "higher"
DIRECTIONS = (LOWER, HIGHER)
RECORD_MODE = 0o644
# Significant digits kept per value: beyond a bench's run-to-run noise, and short enough to read in a diff.
DIGITS = 6
# git answers in milliseconds here; a hung git (a lock, a network filesystem) must not hold the record.
GIT_DEADLINE = 10.0
# Appended to the commit of a checkout whose tracked files have changes that are not committed.
UNCOMMITTED = "+uncommitted"


class RecordError(Exception):
    """A record could not be read or written; the message is one line naming the file."""


@dataclass(frozen=True)
class Figure:
    """One figure a bench printed: `better` says which direction of change is an improvement."""

    name: str
    value: float
    unit: str
    better: str

    def __post_init__(self) -> None:
        """Refuse a direction other than lower/higher: compare could not judge the figure."""
        if self.better not in DIRECTIONS:
            raise ValueError(f"figure {self.name}: better must be one of {DIRECTIONS}, not {self.better!r}")


def lower(name: str, value: float, unit: str) -> Figure:
    """A figure where less is better (a time, a latency, an error count)."""
    return Figure(name, float(value), unit, LOWER)


def higher(name: str, value: float, unit: str) -> Figure:
    """A figure where more is better (a rate, a score)."""
    return Figure(name, float(value), unit, HIGHER)


@dataclass(frozen=True)
class BenchEntry:
    """One bench's figures in a record, and where and when they were measured."""

    figures: dict[str, Figure]
    commit: str
    machine: dict[str, Any]
    recorded_at: str
    argv: list[str]
    # The load average (1, 5, 15 minutes) when the figures were recorded: on a shared machine, their context.
    load_average: list[float] = field(default_factory=list)


Record = dict[str, BenchEntry]


# --- the option and what a bench calls at its end -------------------------------------------------------------------


def add_option(parser: argparse.ArgumentParser) -> None:
    """`--json [PATH]`: the bench writes its figures to the day's record (or PATH) at its end."""
    parser.add_argument(
        "--json",
        nargs="?",
        const="",
        metavar="PATH",
        help="also write the figures to reports/bench/<UTC date>.json (or PATH), beside the other benches' of "
        "that day; bench/compare OLD NEW prints the ratios of two records",
    )


def save(option: str | None, bench: str, figures: Iterable[Figure]) -> None:
    """Write `figures` as `bench`'s entry when `--json` was given (`option` is its value), and say where.

    Figures that are not finite (a rate over an empty window) cannot be compared and are left out, by name. A
    record that cannot be written ends the bench with one line (exit 2); its figures were printed already.
    """
    if option is None:
        return
    chosen = list(figures)
    kept = {figure.name: figure for figure in chosen if math.isfinite(figure.value)}
    left_out = [figure.name for figure in chosen if not math.isfinite(figure.value)]
    now = datetime.now(UTC)
    path = Path(option) if option else RECORD_DIR / f"{now:%Y-%m-%d}.json"
    recorded_at = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    entry = BenchEntry(kept, commit(), machine(), recorded_at, sys.argv[1:], [round(x, 2) for x in os.getloadavg()])
    try:
        write(path, bench, entry)
    except (RecordError, OSError) as error:
        sys.exit(f"bench record of {bench} NOT written: {error}")
    note = f"; not finite, left out: {', '.join(left_out)}" if left_out else ""
    print(f"bench record: {len(kept)} figures of {bench} written to {path}{note}", flush=True)


def commit(checkout: Path | None = None) -> str:
    """`git rev-parse HEAD` of the checkout (this one by default), with UNCOMMITTED appended when tracked files differ.

    A bench of a working tree and one of its HEAD would otherwise carry the same commit; "unknown" outside git.
    """
    checkout = checkout or CHECKOUT
    head = git(checkout, "rev-parse", "HEAD")
    if not head:
        return "unknown"
    changed = git(checkout, "status", "--porcelain", "--untracked-files=no")
    return head + UNCOMMITTED if changed else head


def git(checkout: Path, *args: str) -> str:
    """The stripped output of a git command in `checkout`; "" when it fails or git is missing."""
    try:
        result = subprocess.run(
            ["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=GIT_DEADLINE, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


def machine() -> dict[str, Any]:
    """Cores, memory and CPU model: figures of two records compare only on the same machine."""
    found: dict[str, Any] = {"cores": os.cpu_count(), "memory_gib": None, "cpu": "unknown"}
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                found["memory_gib"] = round(int(line.split()[1]) / 1024**2, 1)
                break
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                found["cpu"] = line.split(":", 1)[1].strip()
                break
    return found


# --- reading and writing --------------------------------------------------------------------------------------------


def write(path: Path, bench: str, entry: BenchEntry) -> None:
    """Put `entry` as `bench` into the record at `path`, keeping the other benches' entries."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_name(f".{path.name}.lock")
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # released when the file closes
        record = load(path) if path.exists() else {}
        record[bench] = entry
        text = json.dumps(to_json(record), indent=2, sort_keys=True) + "\n"
        descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(descriptor, "w") as out:
                out.write(text)
            os.chmod(temporary, RECORD_MODE)  # mkstemp's file is private; a record is for everyone to read
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


def to_json(record: Record) -> dict[str, Any]:
    """The record as the file holds it."""
    return {
        "format": FORMAT,
        "benches": {
            bench: {
                "recorded_at": entry.recorded_at,
                "commit": entry.commit,
                "machine": entry.machine,
                "argv": entry.argv,
                "load_average": entry.load_average,
                "figures": {
                    name: {"value": float(f"{figure.value:.{DIGITS}g}"), "unit": figure.unit, "better": figure.better}
                    for name, figure in entry.figures.items()
                },
            }
            for bench, entry in record.items()
        },
    }


def load(path: Path) -> Record:
    """Read the record at `path`; a RecordError (one line) if it is missing or not a bench record."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise RecordError(f"{path}: no such file") from None
    except OSError as error:
        raise RecordError(f"{path}: cannot read: {error.strerror or error}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise RecordError(f"{path}: not JSON: {error.msg} at line {error.lineno} column {error.colno}") from None
    try:
        return from_json(data)
    except RecordError as error:
        raise RecordError(f"{path}: not a bench record: {error}") from None


def from_json(data: Any) -> Record:
    """Parse a record's JSON; a RecordError naming the first thing wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("benches"), dict):
        raise RecordError('no "benches" object at the top')
    if data.get("format") != FORMAT:
        raise RecordError(f"format {data.get('format')!r}, this bench/compare reads format {FORMAT}")
    record: Record = {}
    for bench, raw in data["benches"].items():
        if not isinstance(raw, dict) or not isinstance(raw.get("figures"), dict):
            raise RecordError(f'bench {bench}: no "figures" object')
        figures: dict[str, Figure] = {}
        for name, value in raw["figures"].items():
            if not isinstance(value, dict):
                raise RecordError(f"{bench}.{name}: not an object")
            number, unit, better = value.get("value"), value.get("unit"), value.get("better")
            if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
                raise RecordError(f"{bench}.{name}: value {number!r} is not a finite number")
            if not isinstance(unit, str):
                raise RecordError(f"{bench}.{name}: unit {unit!r} is not a string")
            if better not in DIRECTIONS:
                raise RecordError(f"{bench}.{name}: better {better!r} is not one of {', '.join(DIRECTIONS)}")
            figures[name] = Figure(name, float(number), unit, better)
        machine_seen = raw.get("machine")
        argv = raw.get("argv")
        load = raw.get("load_average")
        record[bench] = BenchEntry(
            figures,
            str(raw.get("commit", "unknown")),
            machine_seen if isinstance(machine_seen, dict) else {},
            str(raw.get("recorded_at", "unknown")),
            [str(arg) for arg in argv] if isinstance(argv, list) else [],
            [float(x) for x in load if isinstance(x, int | float)] if isinstance(load, list) else [],
        )
    return record
