"""The one writer of `reports/<run-id>/`: turns the run's records into artifacts and terminal sections."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from dra_conformance.model.records import Section, Summarizer, read_records
from dra_conformance.report.allure_tables import write_global_tables
from dra_conformance.report.reports_space import full_line, is_full, write_or_say

ALLURE_ENVIRONMENT = "environment.properties"


def write_report(run_dir: Path, summarizers: Mapping[str, Summarizer], allure_dir: Path | None = None) -> list[Section]:
    """Summarize each record kind, write its artifact, and return the sections in `summarizers` order.

    A file a full file system keeps from being written is an alert of its section, never an exception: the run's
    verdict comes after these.
    """
    sections = []
    full = False
    for kind, summarize in summarizers.items():
        section = summarize(read_records(run_dir, kind))
        if section is None:
            continue
        if section.artifact is not None:
            # A full file system: the section still prints, and says which file it could not write.
            problem = write_or_say(run_dir / section.artifact, json.dumps(section.document, indent=2))
            if problem is not None:
                section.alerts.append(f"dra-conformance: {problem}")
                full = True
        sections.append(section)
    environment = {key: value for section in sections for key, value in section.environment.items()}
    if allure_dir is None or full:
        return sections
    lines = [f"{key}={value}" for key, value in environment.items()]
    problem = write_or_say(allure_dir / ALLURE_ENVIRONMENT, "\n".join(lines) + "\n") if environment else None
    try:
        # The same documents as readable tables, attached to the whole run (Allure's global attachments).
        write_global_tables(allure_dir, [(s.title, s.document) for s in sections if s.artifact is not None])
    except OSError as error:
        if not is_full(error):
            raise
        problem = problem or full_line(allure_dir, error)
    if problem is not None and sections:
        sections[-1].alerts.append(f"dra-conformance: {problem}")
    return sections
