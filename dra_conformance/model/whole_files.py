"""Files written whole or not at all, and telling a full file system from other write errors.

Every layer writes files into a run's directory (records, rollback state, reports); on a full file system none may
leave a half file or a scratch file behind.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

# The errors of a file system that has no room left (blocks, or the user's quota).
FULL_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT})
PARTIAL_SUFFIX = ".partial"


def is_full(error: OSError) -> bool:
    """Whether `error` says the file system has no room left."""
    return error.errno in FULL_ERRORS


def write_atomically(path: Path, text: str, scratch: Path | None = None) -> None:
    """Write `text` to `path` whole or not at all; on any error the scratch file is gone and `path` is as it was.

    `scratch`: the file written first and renamed over `path` (default: `path` with PARTIAL_SUFFIX added).
    """
    partial = scratch or path.with_name(path.name + PARTIAL_SUFFIX)
    try:
        with partial.open("w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        partial.replace(path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
