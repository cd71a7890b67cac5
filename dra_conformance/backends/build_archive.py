"""Carrying built binaries between machines: `build --export FILE` on one CI runner, `build --import FILE` on the next.

The archive holds the cache entries (`<cache>/bin/<component>-<version>-<hash>/`) of what the build produced. Each
entry's name is its cache key, a hash of what built it, so an imported entry is found only by a checkout that would
build the same thing; anything else is built as usual. Imports never write outside `<cache>/bin`.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

from dra_conformance.errors import UsageError

BIN_DIR = "bin"


def _entries(cache_dir: Path, binaries: dict[str, Path]) -> list[Path]:
    """The cache entries (directories directly under `<cache>/bin`) holding `binaries`."""
    bin_dir = (cache_dir / BIN_DIR).resolve()
    entries = set()
    for name, path in binaries.items():
        resolved = path.resolve()
        if not resolved.is_relative_to(bin_dir):
            raise UsageError(f"cannot export {name}: {path} is not in the build cache {bin_dir}")
        entries.add(bin_dir / resolved.relative_to(bin_dir).parts[0])
    return sorted(entries)


def export_binaries(cache_dir: Path, binaries: dict[str, Path], archive: Path) -> int:
    """Write the cache entries of `binaries` to `archive` (a .tar.gz); the number of entries."""
    entries = _entries(cache_dir, binaries)
    try:
        with tarfile.open(archive, "w:gz") as tar:
            for entry in entries:
                tar.add(entry, arcname=entry.name)
    except OSError as error:
        raise UsageError(f"cannot write {archive}: {error.strerror or error}") from None
    return len(entries)


def import_binaries(cache_dir: Path, archive: Path) -> list[str]:
    """Unpack `archive` into `<cache>/bin` (a member leading elsewhere refuses the whole archive); the entries."""
    bin_dir = cache_dir / BIN_DIR
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            entries = sorted({Path(m.name).parts[0] for m in members if Path(m.name).parts})
            for member in members:
                if member.name.startswith("/") or ".." in Path(member.name).parts:
                    raise UsageError(f"{archive}: member {member.name!r} leads outside the build cache")
            bin_dir.mkdir(parents=True, exist_ok=True)
            # The "data" filter also refuses links out of the directory, device files and set-uid bits.
            tar.extractall(bin_dir, members=members, filter="data")
    except (OSError, tarfile.TarError) as error:
        raise UsageError(f"cannot import {archive}: {error}") from None
    return entries
