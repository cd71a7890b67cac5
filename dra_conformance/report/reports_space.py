"""Writing into a reports directory that may fill up: whole files or none, and one line naming the path and space left.

A run's files are written whole or not at all (a `.partial` beside the file, renamed over it), so a full disk leaves
no half file and no scratch file behind. A write that fails because the file system is full is one line (`full_line`)
for the caller to print, never a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

from dra_conformance.model.whole_files import PARTIAL_SUFFIX, is_full, write_atomically

__all__ = ["PARTIAL_SUFFIX", "full_line", "is_full", "release", "reserve", "space_left", "write_atomically"]

# Space set aside in the run's directory when the run starts and given back just before verdict.json is written, so
# the verdict fits however full the other writers made the file system: two pages (a file and its scratch copy).
RESERVE_BYTES = 8192
RESERVE_FILE = ".verdict-reserve"


def space_left(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on the file system of `path` (its nearest existing parent)."""
    for candidate in (path, *path.parents):
        try:
            stats = os.statvfs(candidate)
        except OSError:
            continue
        return stats.f_bavail * stats.f_frsize
    return None


def full_line(path: Path, error: OSError) -> str:
    """`reports dir full: cannot write <path> (No space left on device); 0 bytes left on its file system`."""
    left = space_left(path)
    where = f"{left} bytes left on its file system" if left is not None else "space left unknown"
    return f"reports dir full: cannot write {path} ({error.strerror or error}); {where}"


def write_or_say(path: Path, text: str) -> str | None:
    """`write_atomically`, its parent made first; a full file system is the `full_line` returned, never raised."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, text)
    except OSError as error:
        if not is_full(error):
            raise
        return full_line(path, error)
    return None


def reserve(run_dir: Path) -> str | None:
    """Set RESERVE_BYTES aside in `run_dir` for the verdict; a file system already full is the `full_line` returned."""
    path = run_dir / RESERVE_FILE
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as file:
            file.write(bytes(RESERVE_BYTES))  # written, not sparse: the blocks are really taken
            file.flush()
            os.fsync(file.fileno())
    except OSError as error:
        path.unlink(missing_ok=True)
        if not is_full(error):
            raise
        return full_line(path, error)
    return None


def release(run_dir: Path) -> None:
    """Give back the space `reserve` set aside (a no-op if none is)."""
    (run_dir / RESERVE_FILE).unlink(missing_ok=True)
