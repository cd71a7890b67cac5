"""The allowlist of the read-exposure check: who may read ResourceClaims beyond their own namespace.

A platform team keeps it in a YAML file (`--dra-read-allowlist FILE`):

    builtIn: true                      # optional (default true): also allow the built-in entries
    subjects:
      - ServiceAccount/monitoring/prometheus
      - User/jane@example.com
      - Group/platform-admins
      - ServiceAccount/backup/*       # `*` matches any run of characters

The built-in entries (`read_allowlist_defaults.yaml` beside this module, printed by
`python -m dra_conformance.rbac.read_allowlist`) are the control plane's identities that the 1.37 bootstrap policy
lets read claims. The check adds, at run time, the driver profile's ServiceAccounts and the suite's own identities.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dra_conformance.errors import FixtureError

DEFAULTS_FILE = Path(__file__).resolve().parent / "read_allowlist_defaults.yaml"
BUILT_IN = "built-in"
KEYS = {"builtIn", "subjects"}
# `User/<name>`, `Group/<name>` or `ServiceAccount/<namespace>/<name>`; names may hold `*` (a glob).
_SUBJECT = re.compile(r"^(?:(?:User|Group)/[^/\s]+|ServiceAccount/[^/\s]+/[^/\s]+)$")
_FORM = "User/<name>, Group/<name> or ServiceAccount/<namespace>/<name>"


@dataclass(frozen=True)
class Allowlist:
    """Subject patterns allowed to read claims beyond their namespace, and where they came from."""

    patterns: tuple[str, ...]
    source: str  # the file's path, or "built-in"

    def allows(self, subject: str) -> bool:
        """Whether `subject` ("ServiceAccount/ns/name", "User/name", "Group/name") matches an entry."""
        return any(fnmatch.fnmatchcase(subject, pattern) for pattern in self.patterns)

    def matching(self, subject: str) -> str | None:
        """The first entry that allows `subject`, or None."""
        return next((pattern for pattern in self.patterns if fnmatch.fnmatchcase(subject, pattern)), None)

    def extended(self, patterns: Iterable[str]) -> Allowlist:
        """The same allowlist with more entries (the run's own identities), from the same source."""
        return Allowlist(tuple(dict.fromkeys((*self.patterns, *patterns))), self.source)


def _subjects(raw: Any, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list):
        raise FixtureError(f"{where}: subjects must be a list of {_FORM}")
    for index, entry in enumerate(raw):
        if not isinstance(entry, str) or not _SUBJECT.match(entry):
            raise FixtureError(f"{where}: subjects[{index}]: {entry!r} is not {_FORM}")
    return tuple(raw)


def _parse(path: Path) -> tuple[bool, tuple[str, ...]]:
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise FixtureError(f"{path}: {' '.join(str(error).split())}") from None
    if not isinstance(raw, dict):
        raise FixtureError(f"{path}: expected a mapping with subjects (a list) and optionally builtIn (true/false)")
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise FixtureError(f"{path}: unknown key {unknown[0]!r}; known: builtIn, subjects")
    if "subjects" not in raw:
        raise FixtureError(f"{path}: missing subjects (a list of {_FORM})")
    built_in = raw.get("builtIn", True)
    if not isinstance(built_in, bool):
        raise FixtureError(f"{path}: builtIn must be true or false, got {built_in!r}")
    return built_in, _subjects(raw["subjects"], str(path))


def built_in() -> Allowlist:
    """The built-in entries: the control plane of a stock 1.37 cluster."""
    _, patterns = _parse(DEFAULTS_FILE)
    return Allowlist(patterns, BUILT_IN)


def load(path: Path | None) -> Allowlist:
    """The allowlist of `path` (with the built-in entries unless it says `builtIn: false`), else the built-in one.

    A bad file raises FixtureError: one line naming the file and the entry.
    """
    if path is None:
        return built_in()
    include_built_in, patterns = _parse(path)
    defaults = built_in().patterns if include_built_in else ()
    return Allowlist(tuple(dict.fromkeys((*defaults, *patterns))), str(path))


if __name__ == "__main__":
    print(DEFAULTS_FILE.read_text(), end="")
