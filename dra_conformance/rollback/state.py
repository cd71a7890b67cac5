"""The rehearsal's state file: what each phase saw and left, so that a later phase, in a later run, compares.

A staging team runs `before`, changes the cluster, runs `after_change`, rolls back, runs `after_rollback`: three
runs, one file. Each phase writes its record (started, seconds, facts, problems, left behind) under its name.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from dra_conformance.errors import UsageError

STATE_VERSION = 1


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


@dataclass
class RehearsalState:
    """Every phase recorded so far, with the rehearsal's namespace and nodes (set by `before`)."""

    path: Path
    records: dict[Phase, PhaseRecord] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> RehearsalState:
        """The state in `path`; an empty one where the file does not exist yet."""
        if not path.exists():
            return cls(path)
        try:
            loaded = json.loads(path.read_text())
            if loaded.get("version") != STATE_VERSION:
                raise ValueError(f"version {loaded.get('version')}, expected {STATE_VERSION}")
            records = {
                Phase(name): PhaseRecord(**{**record, "phase": Phase(record["phase"])})
                for name, record in loaded["phases"].items()
            }
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise UsageError(f"rollback state file {path}: not a rehearsal state ({error})") from None
        return cls(path, records)

    def save(self) -> None:
        """Write the file (whole, then renamed, so a killed run leaves the previous state)."""
        body = {"version": STATE_VERSION, "phases": {str(k): asdict(v) for k, v in self.records.items()}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        scratch = self.path.with_suffix(self.path.suffix + ".tmp")
        scratch.write_text(json.dumps(body, indent=2, default=str))
        scratch.replace(self.path)

    def require(self, phase: Phase, needed: Phase) -> PhaseRecord:
        """The record of `needed`, which `phase` builds on; a usage error naming the missing phase."""
        record = self.records.get(needed)
        if record is None:
            raise UsageError(
                f"rollback phase {phase} needs phase {needed} recorded in {self.path} first "
                f"(recorded: {', '.join(self.records) or 'none'})"
            )
        return record
