"""The one writer of `reports/<run-id>/`: turns the run's records into artifacts and terminal sections."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_conformance.report.allure_tables import write_global_tables
from dra_conformance.report.records import read_records


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

ALLURE_ENVIRONMENT = "environment.properties"


def write_report(run_dir: Path, summarizers: Mapping[str, Summarizer], allure_dir: Path | None = None) -> list[Section]:
    """Summarize each record kind, write its artifact, and return the sections in `summarizers` order."""
    sections = []
    for kind, summarize in summarizers.items():
        section = summarize(read_records(run_dir, kind))
        if section is None:
            continue
        if section.artifact is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / section.artifact).write_text(json.dumps(section.document, indent=2))
        sections.append(section)
    environment = {key: value for section in sections for key, value in section.environment.items()}
    if allure_dir is not None and environment:
        allure_dir.mkdir(parents=True, exist_ok=True)
        lines = [f"{key}={value}" for key, value in environment.items()]
        (allure_dir / ALLURE_ENVIRONMENT).write_text("\n".join(lines) + "\n")
    if allure_dir is not None:
        # The same documents as readable tables, attached to the whole run (Allure's global attachments).
        write_global_tables(allure_dir, [(s.title, s.document) for s in sections if s.artifact is not None])
    return sections
