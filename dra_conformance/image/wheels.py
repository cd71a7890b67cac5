"""The Python side of an image: our own wheels built from the checkout, the locked dependencies' wheels, the lock.

A lock file pins every third-party distribution an image installs to one version and one wheel's sha256; the
wheels are those of Debian 12's CPython 3.11 on x86_64 (glibc 2.36), whatever interpreter runs the build. Our own
distributions are built from the checkout's pyproject files, with SOURCE_DATE_EPOCH, never taken from an index.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_conformance.errors import UsageError
from dra_conformance.image.rootfs import Step, run_step

# The image's interpreter: Debian 12's python3 (CPython 3.11, glibc 2.36, x86_64). pip takes platform tags
# literally (it expands only the legacy manylinux aliases), so every glibc tag up to 2.36 is named.
TARGET_PLATFORM_OPTIONS: tuple[str, ...] = (
    "--only-binary=:all:",
    "--implementation=cp",
    "--python-version=3.11",
    "--abi=cp311",
    "--abi=abi3",
    "--abi=none",
    *(f"--platform=manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1)),
    "--platform=manylinux2014_x86_64",
)
# pip wheel of our three distributions (dra-wire compiles its bindings) or a download of ~40 wheels, pip's cache warm
# or cold over a slow link.
PIP_TIMEOUT = 900.0
# What pip's log says when it cannot reach the index.
_UNREACHABLE = (
    "Failed to establish a new connection",
    "Network is unreachable",
    "Temporary failure in name resolution",
)
_LOCK_LINE = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>[^\s;]+)\s+--hash=sha256:(?P<sha256>[0-9a-f]{64})$")


@dataclass(frozen=True, order=True)
class Locked:
    """One pinned distribution: name, version and the sha256 of its one wheel."""

    name: str
    version: str
    sha256: str

    def line(self) -> str:
        """The lock file line (pip's hash-checking requirement syntax)."""
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


def read_lock(path: Path) -> list[Locked]:
    """The pins of lock file `path`; a line that is not `name==version --hash=sha256:HEX` is a usage error."""
    pins = []
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LOCK_LINE.match(line)
        if match is None:
            raise UsageError(f"{path}:{number}: expected 'name==version --hash=sha256:HEX', got {line!r}")
        pins.append(Locked(match["name"], match["version"], match["sha256"]))
    return pins


def render_lock(pins: Iterable[Locked], header: str) -> str:
    """A lock file: `header` as comments, then one sorted line per pin."""
    comments = [f"# {line}".rstrip() for line in header.splitlines()]
    return "\n".join([*comments, *(pin.line() for pin in sorted(pins))]) + "\n"


def pins_from_report(report: Mapping[str, Any], own: Iterable[str]) -> list[Locked]:
    """The third-party pins of a `pip install --dry-run --report` document (`own` distributions left out)."""
    skipped = {canonical_name(name) for name in own}
    pins = []
    for item in report.get("install", []):
        metadata, download = item["metadata"], item["download_info"]
        if canonical_name(metadata["name"]) in skipped:
            continue
        hashes = download.get("archive_info", {}).get("hashes", {})
        if "sha256" not in hashes:
            raise UsageError(f"pip's report gives no sha256 for {metadata['name']} ({download.get('url')})")
        pins.append(Locked(canonical_name(metadata["name"]), metadata["version"], hashes["sha256"]))
    return sorted(pins)


def canonical_name(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_version(directory: Path) -> tuple[str, str]:
    """Name and version of the distribution whose pyproject.toml is in `directory`."""
    project = tomllib.loads((directory / "pyproject.toml").read_text())["project"]
    return str(project["name"]), str(project["version"])


def _pip(arguments: list[str], log: Path, environment: dict[str, str], what: str) -> None:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", *arguments]
    step = Step(
        what,
        f"{what}: pip",
        _UNREACHABLE,
        "the Python package index is unreachable from here (pip); make it reachable, then retry: ",
    )
    run_step(step, command, log, environment, PIP_TIMEOUT)


def build_own(sources: Iterable[Path], target: Path, log: Path, environment: dict[str, str]) -> None:
    """`pip wheel --no-deps` of our distributions in `sources` into `target` (SOURCE_DATE_EPOCH in `environment`)."""
    arguments = ["wheel", "--no-deps", "--quiet", "--wheel-dir", str(target), *map(str, sources)]
    _pip(arguments, log, environment, "building our wheels")


def download_locked(lock: Path, target: Path, log: Path, environment: dict[str, str]) -> None:
    """Download every wheel `lock` pins into `target`, each checked against its hash (pip's cache makes it fast)."""
    arguments = ["download", "--no-deps", "--require-hashes", "--quiet", "--dest", str(target), "-r", str(lock)]
    _pip([*arguments, *TARGET_PLATFORM_OPTIONS], log, environment, f"downloading the wheels {lock.name} pins")


def resolve(own_wheels: Path, requirements: Iterable[str], log: Path, environment: dict[str, str]) -> dict[str, Any]:
    """Pip's resolution of `requirements` for the image's interpreter, our wheels found in `own_wheels`."""
    report = own_wheels / "report.json"
    arguments = [
        "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
        "--find-links", str(own_wheels), *TARGET_PLATFORM_OPTIONS, *requirements,
    ]  # fmt: skip
    _pip(arguments, log, environment, "resolving the image's dependencies")
    return dict(json.loads(report.read_text()))
