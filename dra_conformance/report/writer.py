"""The one writer of `reports/<run-id>/`: turns the run's records into artifacts and terminal sections."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from dra_conformance.model.records import Section, Summarizer, read_records
from dra_conformance.report.allure_tables import write_global_tables

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
