"""Run records and report sections: what each part of a run adds to its report, and what it reports back.

Records are JSON lines per kind and per xdist worker. Workers never share a file, so appends need no lock; the
controller reads every worker's lines at the end, and each kind's summarizer turns them into a `Section` that
`dra_conformance.report.writer` writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_conformance.errors import ReportsFull
from dra_conformance.model.whole_files import is_full

RECORDS_DIR = "records"


class RunRecords:
    """Appends records of one worker to `reports/<run-id>/records/<kind>/<worker>.jsonl`."""

    def __init__(self, run_dir: Path, worker: str) -> None:
        """Record into `run_dir` under this worker's name ("main" without xdist)."""
        self.run_dir = run_dir
        self.worker = worker

    def add(self, kind: str, entry: dict[str, Any]) -> None:
        """Append one entry of `kind`."""
        path = self.run_dir / RECORDS_DIR / kind / f"{self.worker}.jsonl"
        line = (json.dumps(entry) + "\n").encode()
        size = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("ab") as log:
                size = log.tell()
                log.write(line)
        except OSError as error:
            if not is_full(error):
                raise
            if size is not None:  # whole lines or none: cut off what part of this one got in
                with path.open("r+b") as log:
                    log.truncate(size)
            raise ReportsFull(f"reports dir full: cannot record {kind} in {path} ({error.strerror})") from None


def read_records(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    """Every worker's entries of `kind`, worker by worker in name order, each in the order it was added.

    A last line with no newline is a write cut short (its worker killed mid-write) and is left out; any other line
    that is not JSON is an error.
    """
    entries = []
    for path in sorted((run_dir / RECORDS_DIR / kind).glob("*.jsonl")):
        text = path.read_text()
        lines = text.splitlines()
        if lines and not text.endswith("\n"):
            lines.pop()
        entries += [json.loads(line) for line in lines if line]
    return entries


@dataclass(frozen=True)
class Section:
    """What one part of the run reports: lines for the terminal and an artifact for `reports/<run-id>/`."""

    title: str
    lines: list[str]
    # Lines the terminal shows in red (unexpected outcomes).
    alerts: list[str] = field(default_factory=list)
    # File name under reports/<run-id>/ and the JSON document written there.
    artifact: str | None = None
    document: Any = None
    # key=value pairs for the Allure report's environment panel.
    environment: dict[str, str] = field(default_factory=dict)


# Turns the entries of one record kind into a section; None when there is nothing to report.
Summarizer = Callable[[list[dict[str, Any]]], Section | None]
