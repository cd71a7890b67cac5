"""Run records: what each part of a run adds to its report, as JSON lines per kind and per xdist worker.

Workers never share a file, so appends need no lock; the controller reads every worker's lines at the end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as log:
            log.write(json.dumps(entry) + "\n")


def read_records(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    """Every worker's entries of `kind`, worker by worker in name order, each in the order it was added."""
    return [
        json.loads(line)
        for path in sorted((run_dir / RECORDS_DIR / kind).glob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line
    ]
