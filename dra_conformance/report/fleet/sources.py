"""Finding the runs' summaries: in run directories, directories of runs, and tarballs (`sonobuoy retrieve` gives one).

Tarballs are read in memory, member by member: nothing is extracted to disk. An archive with a member whose name
escapes it (absolute, or with a `..` part) is refused whole, and a `summary.json` that is a link is refused: our
plugin writes neither, so such an archive is not what it claims to be.
"""

from __future__ import annotations

import json
import lzma
import os
import tarfile
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from dra_conformance.errors import UsageError
from dra_conformance.report.certification import SUMMARY_JSON

TARBALL_SUFFIXES = (".tar", ".tar.gz", ".tgz")
# A summary is tens of kilobytes (the whole suite's is about 45 kB); a member far larger is no summary of ours and
# is not read into memory.
MAX_SUMMARY_BYTES = 16 * 1024 * 1024
# Allure writes a summary.json of its own into its report; a directory under a name starting so is not a run.
ALLURE_PREFIX = "allure"
# Tarballs inside tarballs: a Sonobuoy results tarball may hold the plugin's own results as a tarball.
MAX_NESTING = 2


class FleetInputError(UsageError):
    """A fleet input that cannot be read: missing, holding no summary, malformed, or an unsafe archive."""

    def __init__(self, message: str) -> None:
        """Keep the message on one line, whatever a file name or a library's error text holds."""
        super().__init__(" ".join(message.split()))


@dataclass(frozen=True)
class FoundSummary:
    """One run's summary.json as found, with where it came from."""

    # How the user finds it again: a path, or `archive.tar.gz:member/path` (nested archives join with `:`).
    source: str
    # The name of the directory that holds it: the run id, where the plugin wrote it ("" at an archive's root).
    run_dir: str
    document: dict[str, Any]
    # Its modification time (epoch seconds): of the file, or as the archive recorded it for the member.
    mtime: float


@dataclass
class Found:
    """Every summary the inputs hold, and the tarballs found inside directories that hold none (not an error)."""

    summaries: list[FoundSummary] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def read_inputs(inputs: Sequence[Path]) -> Found:
    """Every summary under `inputs`; a bad input raises FleetInputError naming it (one line)."""
    found = Found()
    seen: set[str] = set()
    for path in inputs:
        for summary in _read_input(path, found):
            # An input named twice (a directory and a run inside it) counts its runs once.
            if summary.source not in seen:
                seen.add(summary.source)
                found.summaries.append(summary)
    return found


def _read_input(path: Path, found: Found) -> list[FoundSummary]:
    if not path.exists():
        raise FleetInputError(f"fleet input {path}: no such file or directory")
    if path.is_dir():
        return _read_directory(path, found)
    if is_tarball(path):
        summaries = _read_tarball(path, found)
        if not summaries:
            raise FleetInputError(f"fleet input {path}: the tarball holds no {SUMMARY_JSON} of dra-conformance")
        return summaries
    if path.name == SUMMARY_JSON:
        return [_read_file(path)]
    raise FleetInputError(
        f"fleet input {path}: not a run directory, a directory of runs, a tarball "
        f"({', '.join(TARBALL_SUFFIXES)}) or a {SUMMARY_JSON}"
    )


def is_tarball(path: Path) -> bool:
    """Whether the name says tarball (the contents are checked when it is opened)."""
    return path.name.endswith(TARBALL_SUFFIXES)


def _read_directory(directory: Path, found: Found) -> list[FoundSummary]:
    """Summaries in the directory and below it, and in the tarballs below it; links are not followed."""
    summaries = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(name for name in dirs if not name.startswith(ALLURE_PREFIX))
        here = Path(root)
        for name in sorted(files):
            path = here / name
            if path.is_symlink():
                continue
            if name == SUMMARY_JSON:
                summary = _read_file(path)
                if is_ours(summary.document):
                    summaries.append(summary)
                else:
                    found.skipped.append(f"{path} (not a dra-conformance summary)")
            elif is_tarball(path):
                inside = _read_tarball(path, found)
                if not inside:
                    found.skipped.append(f"{path} (no {SUMMARY_JSON} of dra-conformance inside)")
                summaries += inside
    if not summaries:
        raise FleetInputError(f"fleet input {directory}: no {SUMMARY_JSON} in it, below it or in a tarball below it")
    return summaries


def _read_file(path: Path) -> FoundSummary:
    source = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_SUMMARY_BYTES:
            raise FleetInputError(f"fleet input {source}: {size} bytes, too large for a summary")
        data = path.read_bytes()
        mtime = path.stat().st_mtime
    except OSError as error:
        raise FleetInputError(f"fleet input {source}: cannot read: {error.strerror or error}") from None
    return FoundSummary(source, path.parent.name, parse_summary(data, source), mtime)


def _read_tarball(path: Path, found: Found) -> list[FoundSummary]:
    source = str(path)
    try:
        with tarfile.open(path, "r:*") as archive:
            summaries = list(_summaries_in(archive, source, 0))
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError) as error:
        raise FleetInputError(f"fleet input {source}: not a readable tarball: {error}") from None
    except OSError as error:
        raise FleetInputError(f"fleet input {source}: cannot read: {error.strerror or error}") from None
    found.skipped += [f"{s.source} (not a dra-conformance summary)" for s in summaries if not is_ours(s.document)]
    return [summary for summary in summaries if is_ours(summary.document)]


def _summaries_in(archive: tarfile.TarFile, source: str, depth: int) -> Iterator[FoundSummary]:
    for member in archive:
        name = PurePosixPath(member.name)
        # A symbolic link's target is relative to its own directory, a hard link's to the archive's root.
        target_escapes = (member.issym() and escapes(member.linkname, name.parent)) or (
            member.islnk() and escapes(member.linkname)
        )
        if escapes(member.name) or target_escapes:
            raise FleetInputError(
                f"fleet input {source}: member {member.name!r} escapes the archive (an absolute path or '..'); refused"
            )
        if name.name == SUMMARY_JSON and not any(part.startswith(ALLURE_PREFIX) for part in name.parts[:-1]):
            if not member.isreg():
                raise FleetInputError(f"fleet input {source}: member {member.name!r} is not a regular file; refused")
            label = f"{source}:{member.name}"
            if member.size > MAX_SUMMARY_BYTES:
                raise FleetInputError(f"fleet input {label}: {member.size} bytes, too large for a summary")
            data = _member_bytes(archive, member)
            yield FoundSummary(label, name.parent.name, parse_summary(data, label), float(member.mtime))
        elif member.isreg() and member.name.endswith(TARBALL_SUFFIXES) and depth < MAX_NESTING:
            with tarfile.open(fileobj=_member_file(archive, member), mode="r:*") as nested:
                yield from _summaries_in(nested, f"{source}:{member.name}", depth + 1)


def escapes(name: str, within: PurePosixPath | None = None) -> bool:
    """Whether an archive name (or a link target relative to the directory `within`) points outside the archive."""
    path = PurePosixPath(name)
    if path.is_absolute():
        return True
    depth = len(within.parts) if within is not None else 0
    for part in path.parts:
        depth += -1 if part == ".." else 0 if part == "." else 1
        if depth < 0:
            return True
    return False


def _member_file(archive: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    handle = archive.extractfile(member)
    if handle is None:  # only for members that are not files, which the callers exclude
        raise FleetInputError(f"member {member.name!r} has no contents")
    return handle


def _member_bytes(archive: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    with _member_file(archive, member) as handle:
        return handle.read()


def is_ours(document: dict[str, Any]) -> bool:
    """Whether a summary.json is one the plugin wrote: a verdict and the run's facts."""
    return isinstance(document.get("verdict"), str) and isinstance(document.get("run"), dict)


def parse_summary(data: bytes, source: str) -> dict[str, Any]:
    """The summary document; JSON that is malformed or not an object raises FleetInputError."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise FleetInputError(f"fleet input {source}: not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise FleetInputError(f"fleet input {source}: not a dra-conformance summary (a JSON object)")
    return document
