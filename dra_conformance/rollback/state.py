"""The rehearsal's state file: what each phase saw and left, so that a later phase, in a later run, compares.

A staging team runs `before`, changes the cluster, runs `after_change`, rolls back, runs `after_rollback`: three
runs, one file. Each phase writes its record (started, seconds, facts, problems, left behind) under its name.
One file holds every rehearsal of the suite: the device plugin <-> DRA one under `phases` (the first, and the one
the canary rule names), the others under `rehearsals.<name>.phases`; each saves only its own part.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from dra_conformance.errors import ReportsFull, UsageError
from dra_conformance.model.whole_files import is_full, write_atomically

STATE_VERSION = 1
# The device plugin <-> DRA rehearsal: its phases are the file's top-level `phases`.
DEFAULT_REHEARSAL = "device-plugin-dra"


class Phase(StrEnum):
    """The rehearsal's phases, in order."""

    BEFORE = "before"
    AFTER_CHANGE = "after_change"
    AFTER_ROLLBACK = "after_rollback"


PHASES = tuple(Phase)


@dataclass
class PhaseRecord:
    """What one phase saw: its facts for later phases, its problems, and what it found left behind."""

    phase: Phase
    started: str
    seconds: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    left_behind: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """No problem and nothing left behind."""
        return not self.problems and not self.left_behind


Records = dict[Phase, PhaseRecord]


def _records(raw: dict[str, Any]) -> Records:
    return {Phase(name): PhaseRecord(**{**record, "phase": Phase(record["phase"])}) for name, record in raw.items()}


def _read(path: Path) -> dict[str, Records]:
    """Every rehearsal's records in the file, by rehearsal name (empty where the file does not exist yet)."""
    if not path.exists():
        return {}
    try:
        loaded = json.loads(path.read_text())
        if loaded.get("version") != STATE_VERSION:
            raise ValueError(f"version {loaded.get('version')}, expected {STATE_VERSION}")
        found = {DEFAULT_REHEARSAL: _records(loaded["phases"])}
        for name, rehearsal in (loaded.get("rehearsals") or {}).items():
            found[name] = _records(rehearsal["phases"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise UsageError(f"rollback state file {path}: not a rehearsal state ({error})") from None
    return found


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Hold the directory's lock: rehearsals on two xdist workers save parts of one file."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock


@dataclass
class RehearsalState:
    """One rehearsal's phases recorded so far (the others in the same file are read, never written, by it)."""

    path: Path
    records: Records = field(default_factory=dict)
    rehearsal: str = DEFAULT_REHEARSAL
    others: dict[str, Records] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path, rehearsal: str = DEFAULT_REHEARSAL) -> RehearsalState:
        """The state of `rehearsal` in `path`; an empty one where the file does not exist yet."""
        found = _read(path)
        records = found.pop(rehearsal, {})
        return cls(path, records, rehearsal, found)

    def save(self) -> None:
        """Write this rehearsal's part (the file whole, then renamed, so a killed run leaves the previous state)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(self.path.parent):
            found = _read(self.path)
            found[self.rehearsal] = self.records

            def phases(records: Records) -> dict[str, Any]:
                return {str(k): asdict(v) for k, v in records.items()}

            body: dict[str, Any] = {"version": STATE_VERSION, "phases": phases(found.pop(DEFAULT_REHEARSAL, {}))}
            if found:
                body["rehearsals"] = {name: {"phases": phases(records)} for name, records in sorted(found.items())}
            try:
                write_atomically(self.path, json.dumps(body, indent=2, default=str))
            except OSError as error:
                if not is_full(error):
                    raise
                raise ReportsFull(f"reports dir full: cannot save {self.path} ({error.strerror})") from None
        self.others = {name: records for name, records in _read(self.path).items() if name != self.rehearsal}

    def every_rehearsal(self) -> dict[str, Records]:
        """Every rehearsal's records in the file, this one's included, by name (the default rehearsal first)."""
        found = {self.rehearsal: self.records, **self.others}
        return dict(sorted(found.items(), key=lambda item: (item[0] != DEFAULT_REHEARSAL, item[0])))

    def require(self, phase: Phase, needed: Phase) -> PhaseRecord:
        """The record of `needed`, which `phase` builds on; a usage error naming the missing phase."""
        record = self.records.get(needed)
        if record is None:
            raise UsageError(
                f"rollback phase {phase} needs phase {needed} recorded in {self.path} first "
                f"(recorded: {', '.join(self.records) or 'none'})"
            )
        return record

    def require_any(self, phase: Phase, needed: Phase) -> None:
        """At least one rehearsal in the file recorded `needed` (each test then checks its own)."""
        recorded = {name: [str(p) for p in records] for name, records in self.every_rehearsal().items() if records}
        if not any(needed in records for records in self.every_rehearsal().values()):
            raise UsageError(
                f"rollback phase {phase} needs phase {needed} recorded in {self.path} first "
                f"(recorded: {recorded or 'none'})"
            )
