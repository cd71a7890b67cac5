"""Deciding a saved run's verdict again, from the findings it recorded, with the same rules.

The run wrote `findings.json` (what it decided from) beside `verdict.json` and `summary.json` (what it decided).
`replay` reads the findings, decides, and reads the verdict the run recorded, so that `dra-conformance verdict RUN`
can say whether the two agree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dra_conformance.verdict.findings import FINDINGS_JSON, Findings, FindingsError, Verdict
from dra_conformance.verdict.rules import judge

# Where a run records the verdict it gave, in the order they are read: the small file first (written before the
# summary, it survives a full disk), then the summary.
RECORDED_VERDICT = ("verdict.json", "summary.json")


@dataclass(frozen=True)
class Replay:
    """A run's verdict decided again from its findings, beside the one it recorded."""

    verdict: Verdict
    reasons: list[str]
    recorded: str
    # The file the recorded verdict was read from.
    recorded_in: Path

    @property
    def agrees(self) -> bool:
        """Whether the findings decide what the run recorded."""
        return str(self.verdict) == self.recorded


def recorded_verdict(run_dir: Path) -> tuple[str, Path]:
    """The verdict the run in `run_dir` recorded, and the file it was read from; FindingsError where there is none."""
    for name in RECORDED_VERDICT:
        path = run_dir / name
        if not path.is_file():
            continue
        try:
            verdict = json.loads(path.read_text()).get("verdict")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as error:
            raise FindingsError(f"{path}: not readable as the run's verdict: {error}") from None
        if not isinstance(verdict, str):
            raise FindingsError(f"{path}: records no verdict")
        return verdict, path
    raise FindingsError(f"{run_dir}: the run recorded no verdict ({' nor '.join(RECORDED_VERDICT)})")


def replay(run_dir: Path) -> Replay:
    """Decide the verdict of the run in `run_dir` again; FindingsError where its findings or verdict are missing."""
    findings = Findings.load(run_dir / FINDINGS_JSON)
    recorded, recorded_in = recorded_verdict(run_dir)
    verdict, reasons = judge(findings)
    return Replay(verdict, reasons, recorded, recorded_in)
