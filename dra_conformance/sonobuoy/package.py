"""The driver profile as the plugins mount it: one flat directory (a ConfigMap), the driver already installed.

A profile names files relative to its own directory (its RBAC manifests: `identity.rbac`,
`identity.controller.rbac`), often in directories of their own (`../shipped/reference-driver/rbac.yaml`). A ConfigMap
is one directory, so each file named is copied beside the profile under its own file name (a name taken twice gets
its directory's name in front) and the profile names it so. In the pod the driver is installed already: `install`
(the archives and manifests this machine installs it from) and `run` (the binary the local backend starts) name
files of this machine and are left out. A profile that needs none of this is copied byte for byte, so its digest in
the reports stays the one of the file.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from dra_conformance.driver.profile import load_profile
from dra_conformance.errors import UsageError

# A ConfigMap key is a file name: letters, digits, '-', '_' and '.'.
CONFIG_MAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
# The sections that describe how this machine starts the driver, not the driver installed in the cluster.
MACHINE_SECTIONS = ("install", "run")


def _key(text: str) -> str:
    """`text` with every character a ConfigMap key cannot hold replaced by '-'."""
    return re.sub(r"[^-._a-zA-Z0-9]", "-", text).strip("-.") or "file"


class _Placer:
    """Gives each file a profile names one name in the flat directory, copying it there."""

    def __init__(self, profile: Path, directory: Path) -> None:
        self.profile, self.directory = profile, directory
        self.taken = {profile.name}
        self.placed: dict[Path, str] = {}

    def place(self, named: str) -> str:
        source = (self.profile.parent / named).resolve()
        if source in self.placed:
            return self.placed[source]
        relative = PurePosixPath(named)
        name = _key(relative.name)
        if name in self.taken:
            name = _key(f"{relative.parent.name}-{relative.name}")
        stem, counter = name, 2
        while name in self.taken:
            name, counter = f"{counter}-{stem}", counter + 1
        self.taken.add(name)
        self.placed[source] = name
        shutil.copyfile(source, self.directory / name)
        return name


def _names(raw: dict[str, Any]) -> list[list[str]]:
    """The file lists of the profile's identity (`identity.rbac`, `identity.controller.rbac`), as found."""
    identity = raw.get("identity") or {}
    controller = identity.get("controller") or {}
    return [
        [str(name) for name in identity.get("rbac") or []],
        [str(name) for name in controller.get("rbac") or []],
    ]


def needs_rewrite(raw: dict[str, Any]) -> bool:
    """Whether the profile cannot be mounted as it is: a section of this machine, or a file not beside it."""
    named = [name for names in _names(raw) for name in names]
    return any(key in raw for key in MACHINE_SECTIONS) or not all(CONFIG_MAP_KEY.match(name) for name in named)


def pod_profile(profile: Path, directory: Path) -> tuple[Path, list[str]]:
    """Write the profile as the plugins mount it into `directory`; its path there and what was changed, one per line.

    The profile is validated first (a bad one is one line naming file, line and key); so is the copy.
    """
    load_profile(profile)
    if not CONFIG_MAP_KEY.match(profile.name):
        raise UsageError(f"driver profile {profile}: its file name is no ConfigMap key (letters, digits, -, _, .)")
    directory.mkdir(parents=True, exist_ok=True)
    raw = yaml.safe_load(profile.read_text())
    target = directory / profile.name
    placer = _Placer(profile, directory)
    if not needs_rewrite(raw):
        shutil.copyfile(profile, target)
        for names in _names(raw):
            for name in names:
                placer.place(name)
        return target, []
    changes = [f"left out `{key}` (the driver is installed in the cluster)" for key in MACHINE_SECTIONS if key in raw]
    for key in MACHINE_SECTIONS:
        raw.pop(key, None)
    identity = raw.get("identity") or {}
    for owner, path in ((identity, "identity.rbac"), (identity.get("controller") or {}, "identity.controller.rbac")):
        if owner.get("rbac"):
            placed = [placer.place(str(name)) for name in owner["rbac"]]
            moved = [f"{name} as {new}" for name, new in zip(owner["rbac"], placed, strict=True) if name != new]
            changes += [f"{path}: {', '.join(moved)}"] if moved else []
            owner["rbac"] = placed
    header = f"# {profile.name} as the dra-conformance Sonobuoy plugins mount it: {'; '.join(changes)}\n"
    target.write_text(header + yaml.safe_dump(raw, sort_keys=False))
    load_profile(target)
    return target, changes
