"""Harness errors: what a check raised that is no obligation's failure, so it could not judge the driver.

A check judges the driver only through registry obligations (`model.findings.Obligations.check`). Anything else it
raises (an unexpected `KeyError`, a gRPC error no check maps to an obligation, a bare `assert`, a fixture that
broke) is the suite's own error: it breaks the harness obligation HARNESS_ERROR, the check errors, the run is
incomplete, never "not certified", and the summary lists it with its traceback so the suite can be fixed.
"""

from __future__ import annotations

from typing import Any

# HARNESS_ERROR: the harness obligation (model/registry/run.yaml) of a phase that raised something no obligation
# names; the verdict engine's, where its rules read it.
from dra_conformance.verdict import HARNESS_ERROR as HARNESS_ERROR

# How much of a harness error's traceback the summary keeps: its end, where the exception was raised and what it
# said. A pytest traceback through deep fixtures runs to tens of kB; a few of them fit the summary whole.
TRACEBACK_CHARS = 4000


def trimmed(traceback: str) -> str:
    """The end of `traceback`, at most TRACEBACK_CHARS characters, saying what was cut."""
    if len(traceback) <= TRACEBACK_CHARS:
        return traceback
    kept = traceback[-TRACEBACK_CHARS:]
    return f"[{len(traceback) - len(kept)} characters of the traceback cut]\n{kept}"


def markdown_lines(errors: list[dict[str, Any]]) -> list[str]:
    """The summary.md section naming each harness error, with its traceback."""
    if not errors:
        return []
    lines = [
        f"## Harness errors ({HARNESS_ERROR}: the suite's own errors, not the driver's; the run is incomplete)",
        "",
    ]
    for error in errors:
        lines += [f"### {error['check']}", "", f"- {error['error'] or 'no message'}", ""]
        lines += ["```", error["traceback"] or "(no traceback was reported)", "```", ""]
    return lines
