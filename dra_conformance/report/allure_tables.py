"""The run report's tables as readable Allure attachments (Markdown), next to the JSON artifacts.

The run-wide sections (the authorization matrix with every cell's answer, the metrics verdict with its evidence)
are written to `reports/<run-id>/*.json` for tools. People read them in the Allure report: each becomes a
Markdown table, attached to the whole run as an Allure *global attachment* (`<uuid>-globals.json` in the results
directory, which Allure 3 shows with the whole run, not with one test).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MARKDOWN = "text/markdown"
# A cell longer than this is cut (denial texts are a few hundred characters); the JSON artifact keeps it whole.
MAX_CELL = 2000


def _cell(value: Any) -> str:
    if value is None:
        text = ""
    elif isinstance(value, str):
        text = value
    elif isinstance(value, list) and all(not isinstance(item, (dict, list)) for item in value):
        text = ", ".join(str(item) for item in value)
    elif isinstance(value, (dict, list)):
        text = json.dumps(value, sort_keys=True)
    else:
        text = str(value)
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def flatten(document: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested objects as dotted keys: {"a": {"b": 1}} -> {"a.b": 1} (lists stay values)."""
    flat: dict[str, Any] = {}
    for key, value in document.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def markdown_table(document: Any) -> str:
    """A JSON document as a Markdown table.

    A list of objects: one row each. An object of objects (per method, per version): one row per key, named in
    the first column. Any other object: one row per (dotted) key.
    """
    if isinstance(document, dict) and document and all(isinstance(v, dict) and v for v in document.values()):
        document = [{"": key, **value} for key, value in document.items()]
    if isinstance(document, list) and document and all(isinstance(row, dict) for row in document):
        rows = [flatten(row) for row in document]
        columns: list[str] = []
        for row in rows:
            columns += [key for key in row if key not in columns]
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(_cell(row.get(column)) for column in columns) + " |" for row in rows]
    elif isinstance(document, dict):
        lines = ["| key | value |", "|---|---|"]
        lines += [f"| {_cell(key)} | {_cell(value)} |" for key, value in flatten(document).items()]
    else:
        lines = ["| value |", "|---|", f"| {_cell(document)} |"]
    return "\n".join(lines) + "\n"


def titled_table(title: str, document: Any) -> str:
    """A Markdown page: the title as a heading, then the table."""
    return f"# {title}\n\n{markdown_table(document)}"


def write_global_tables(allure_dir: Path, tables: Iterable[tuple[str, Any]]) -> Path | None:
    """Attach each (title, JSON document) to the whole run as a Markdown table; the globals file (None: none)."""
    return write_global_pages(allure_dir, ((title, titled_table(title, document)) for title, document in tables))


def write_global_pages(allure_dir: Path, pages: Iterable[tuple[str, str]]) -> Path | None:
    """Attach each (title, Markdown page) to the whole run; the globals file (None: none)."""
    attachments = []
    now_ms = int(time.time() * 1000)
    for title, page in pages:
        source = f"{uuid.uuid4()}-attachment.md"
        allure_dir.mkdir(parents=True, exist_ok=True)
        (allure_dir / source).write_text(page)
        attachments.append({"name": title, "source": source, "type": MARKDOWN, "timestamp": now_ms})
    if not attachments:
        return None
    path = allure_dir / f"{uuid.uuid4()}-globals.json"
    path.write_text(json.dumps({"attachments": attachments, "errors": []}, indent=2))
    return path
