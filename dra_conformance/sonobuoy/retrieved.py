"""`dra-conformance sonobuoy results`: the merged verdict of what `sonobuoy retrieve` wrote.

The aggregator unpacks each part's tarball under `plugins/<plugin>/results/<node or global>/` and writes an error it
saw for a part (a pod that never started, a plugin that timed out) under `plugins/<plugin>/errors/<node>/`. The
tarball is read in memory, member by member; the parts are merged (`sonobuoy/merge.py`) and the merged summary is
printed, and where asked written as a run directory of its own (summary.json, summary.md), which the fleet report
reads as the cluster's run.
"""

from __future__ import annotations

import json
import re
import tarfile
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from dra_conformance.errors import UsageError
from dra_conformance.report.certification import SUMMARY_JSON, SUMMARY_MARKDOWN, render_markdown, terminal_lines
from dra_conformance.sonobuoy import protocol
from dra_conformance.sonobuoy.entry import PART_SUMMARY_JSON
from dra_conformance.sonobuoy.merge import Merged, PartRun, merge
from dra_conformance.sonobuoy.part import RECORD_FILE, Part
from dra_conformance.sonobuoy.plugin import NODE_PLUGIN_NAME, PLUGIN_NAME
from dra_conformance.verdict import FINDINGS_JSON

# `<anything>/plugins/<plugin>/<results|errors>/<node or global>/<file>`, as `sonobuoy retrieve` writes it.
MEMBER = re.compile(r"(?:^|/)plugins/(?P<plugin>[^/]+)/(?P<kind>results|errors)/(?P<where>[^/]+)/(?P<file>[^/]+)$")
GLOBAL = "global"
# The files of ours a part's results hold, and Sonobuoy's error file for a part.
WANTED = frozenset({PART_SUMMARY_JSON, SUMMARY_JSON, RECORD_FILE, protocol.RESULTS_FILE})
# Far more than any summary, record or results file of ours: a larger member is not read into memory.
MAX_MEMBER_BYTES = 32 * 1024 * 1024
# A directory given to `results` holds what `sonobuoy retrieve` wrote into it.
RETRIEVED_GLOB = "*_sonobuoy_*.tar.gz"
# Where `sonobuoy run` writes the merged summary, beside the tarball.
VERDICT_DIR = "dra-conformance-verdict"
# Outcomes listed check by check, and the order of the lines.
OUTCOME_ORDER = ("failed", "error", "skipped", "passed", "not applicable")


@dataclass
class _Found:
    files: dict[str, bytes] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def latest_tarball(path: Path) -> Path:
    """`path` if it is a tarball, else the newest tarball `sonobuoy retrieve` wrote into the directory `path`."""
    if not path.exists():
        raise UsageError(f"sonobuoy results {path}: no such file or directory")
    if path.is_file():
        return path
    found = sorted(path.glob(RETRIEVED_GLOB), key=lambda p: p.name)
    if not found:
        raise UsageError(f"sonobuoy results {path}: no {RETRIEVED_GLOB} in it (what `sonobuoy retrieve` writes)")
    return found[-1]


def read_parts(tarball: Path) -> list[PartRun]:
    """The parts of our plugins in a retrieved tarball: each with its summary and record, or what went wrong."""
    found: dict[tuple[str, str], _Found] = defaultdict(_Found)
    try:
        with tarfile.open(tarball, "r:*") as archive:
            for member in archive:
                matched = MEMBER.search(member.name)
                if matched is None or matched["plugin"] not in (PLUGIN_NAME, NODE_PLUGIN_NAME) or not member.isfile():
                    continue
                if member.size > MAX_MEMBER_BYTES:
                    continue
                key = (matched["plugin"], matched["where"])
                if matched["kind"] == "errors":
                    found[key].errors.append(_text(archive.extractfile(member)))
                elif matched["file"] in WANTED:
                    found[key].files[matched["file"]] = _bytes(archive.extractfile(member))
    except (tarfile.TarError, EOFError, zlib.error) as error:
        raise UsageError(f"sonobuoy results {tarball}: not a readable tarball: {error}") from None
    except OSError as error:
        raise UsageError(f"sonobuoy results {tarball}: cannot read: {error.strerror or error}") from None
    return [_part(plugin, where, files, tarball) for (plugin, where), files in sorted(found.items())]


def _bytes(stream: IO[bytes] | None) -> bytes:
    return stream.read() if stream is not None else b""


def _text(stream: IO[bytes] | None) -> str:
    return _bytes(stream).decode(errors="replace")


def _json(data: bytes | None, what: str, problems: list[str]) -> dict[str, Any] | None:
    if data is None:
        return None
    try:
        document = json.loads(data)
    except ValueError as error:
        problems.append(f"{what}: not valid JSON: {error}")
        return None
    return document if isinstance(document, dict) else None


def _part(plugin: str, where: str, found: _Found, tarball: Path) -> PartRun:
    problems: list[str] = []
    files = found.files
    summary = _json(files.get(PART_SUMMARY_JSON), PART_SUMMARY_JSON, problems)
    whole = summary is None and SUMMARY_JSON in files
    if whole:
        summary = _json(files.get(SUMMARY_JSON), SUMMARY_JSON, problems)
    record = _json(files.get(RECORD_FILE), RECORD_FILE, problems)
    part = Part.NODE if plugin == NODE_PLUGIN_NAME else Part.WHOLE if whole and record is None else Part.CLUSTER
    node = where if plugin == NODE_PLUGIN_NAME else None
    if summary is None:
        problems += [" ".join(error.split())[:400] for error in found.errors]
        problems.append(_results_reason(files.get(protocol.RESULTS_FILE)))
    problem = "; ".join(p for p in problems if p) or f"no summary of {plugin} ({where}) in {tarball.name}"
    return PartRun(part, node, summary, record, "" if summary is not None else problem)


def _results_reason(data: bytes | None) -> str:
    """The reason our results file gives for a run without a summary (its first item's name)."""
    if data is None:
        return ""
    try:
        document = yaml.safe_load(data)
        return str(document["items"][0]["name"])
    except (yaml.YAMLError, KeyError, IndexError, TypeError):
        return ""


def merged_verdict(tarball: Path) -> tuple[Merged | None, list[PartRun]]:
    """The merged summary of the tarball's parts and its findings (None: no part wrote one), and the parts."""
    parts = read_parts(tarball)
    if not parts:
        raise UsageError(f"sonobuoy results {tarball}: no results of plugin {PLUGIN_NAME} or {NODE_PLUGIN_NAME} in it")
    node_expected = any(part.part is not Part.WHOLE for part in parts)
    return merge(parts, node_expected), parts


def write_verdict(merged: Merged, directory: Path) -> Path:
    """The merged summary as a run directory of its own: summary.json and summary.md.

    For a split run, also the findings it was decided from (findings.json, which `dra-conformance verdict` reads).
    """
    summary = merged.summary
    directory.mkdir(parents=True, exist_ok=True)
    if merged.findings is not None:
        (directory / FINDINGS_JSON).write_text(json.dumps(merged.findings.to_json(), indent=1) + "\n")
    (directory / SUMMARY_JSON).write_text(json.dumps(summary, indent=1) + "\n")
    (directory / SUMMARY_MARKDOWN).write_text(render_markdown(summary) + "\n".join(parts_markdown(summary)) + "\n")
    return directory


def parts_markdown(summary: dict[str, Any]) -> list[str]:
    """The parts the verdict merges, for summary.md."""
    lines = ["", "## Parts (dra-conformance sonobuoy run)", "", "| part | node | verdict of the part alone | tests |"]
    lines.append("|---|---|---|---|")
    for part in summary.get("parts") or []:
        totals = ", ".join(f"{n} {o}" for o, n in sorted((part.get("totals") or {}).items()))
        verdict = part.get("verdict") or f"none ({part.get('problem')})"
        lines.append(f"| {part.get('part')} | {part.get('node') or ''} | {verdict} | {totals} |")
    return lines


def report_lines(summary: dict[str, Any] | None, parts: list[PartRun], source: Path) -> list[str]:
    """What `sonobuoy results` prints: the verdict and why, each part, then every check by outcome."""
    lines = [f"results: {source}"]
    if summary is None:
        lines.append("verdict: none (no part of the run wrote a summary)")
        lines += [f"  {part.label}: {part.problem}" for part in parts]
        return lines
    lines += [line for line in terminal_lines(summary) if not line.lstrip().startswith("details:")]
    for part in parts:
        if part.summary is None:
            lines.append(f"  part {part.label}: no verdict ({part.problem})")
            continue
        totals = ", ".join(f"{n} {o}" for o, n in sorted((part.summary.get("totals") or {}).items()))
        lines.append(f"  part {part.label}: {totals}")
    where = _where_run(parts)
    lines.append("checks:")
    tests = summary.get("tests") or {}
    ordered = sorted(tests.items(), key=lambda item: (_rank(item[1]), item[0]))
    width = max((len(outcome) for outcome in tests.values()), default=0)
    for nodeid, outcome in ordered:
        lines.append(f"  {outcome:<{width}}  {nodeid}  ({', '.join(where.get(nodeid, ['?']))})")
    return lines


def _rank(outcome: str) -> int:
    return OUTCOME_ORDER.index(outcome) if outcome in OUTCOME_ORDER else len(OUTCOME_ORDER)


def _where_run(parts: list[PartRun]) -> dict[str, list[str]]:
    """Per check, the parts that report it."""
    where: dict[str, list[str]] = defaultdict(list)
    for part in parts:
        for nodeid in (part.summary or {}).get("tests") or {}:
            where[nodeid].append(part.label)
    return where
