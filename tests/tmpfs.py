"""A tmpfs of a test's own, for a file system that fills up (root only: else the test is not applicable)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# mount and umount of a tmpfs answer at once; a hung one is a broken machine.
MOUNT_DEADLINE = 30.0


@contextmanager
def mounted_tmpfs(mount_point: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (tmpfs counts whole 4 KiB pages) at `mount_point`, created; unmounted on the way out."""
    if os.geteuid() != 0:
        pytest.skip("not applicable: mounting a tmpfs needs root")
    mount_point.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        timeout=MOUNT_DEADLINE,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"not applicable: cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], timeout=MOUNT_DEADLINE, check=True)
