"""Debian packages the real node (and the report screenshot test) need on the host, from a list file.

`missing` asks dpkg which are not installed; `install` runs apt-get for them (root only). Any other machine gets
one line naming the packages to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from dra_conformance.errors import UsageError

# apt-get update and install of four small packages: a minute on a slow mirror, ten minutes guards a hung one.
APT_TIMEOUT = 600.0


def listed(path: Path) -> list[str]:
    """The package names in `path` (one per line; blank lines and # comments skipped)."""
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def missing(packages: list[str]) -> list[str]:
    """Those of `packages` dpkg does not report installed."""
    if shutil.which("dpkg-query") is None:
        return list(packages)
    absent = []
    for package in packages:
        query = ["dpkg-query", "-W", "-f=${Status}", package]
        status = subprocess.run(query, capture_output=True, text=True, check=False).stdout
        if "install ok installed" not in status:
            absent.append(package)
    return absent


def install(path: Path, echo: Callable[[str], None], needed_by: str = "the real node") -> None:
    """Install what `path` lists and is missing; a machine where that is impossible gets one line naming `needed_by`."""
    absent = missing(listed(path))
    if not absent:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise UsageError(f"{needed_by} needs Debian packages {' '.join(absent)}: install them as root (apt-get)")
    echo(f"installing {' '.join(absent)} (apt-get)")
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *absent]):
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=APT_TIMEOUT, env=environment, check=False
        )
        if result.returncode != 0:
            tail = " ".join(result.stderr.split()[-30:])
            raise UsageError(f"{needed_by} needs {' '.join(absent)}: {' '.join(command[:2])} failed: {tail}")
