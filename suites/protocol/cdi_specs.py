"""The CDI spec files in a node's CDI dir, as the container runtime reads them: which CDI devices they define.

A spec file (JSON or YAML) has a `kind`, `<vendor>/<class>`, and `devices`, each with a `name`: it defines the CDI
devices `<vendor>/<class>=<name>`, the IDs a prepare answers and the kubelet passes to the runtime. A device's
container edits are its own `containerEdits` plus those of the whole spec.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_conformance.model.driver import DriverEndpoint

# The file names the CDI spec loader reads.
SPEC_SUFFIXES = (".json", ".yaml", ".yml")
# What separates the words of an edit's value (a path, a list, KEY=VALUE, an address with a port).
SEPARATORS = re.compile(r"[\s,;:=/]+")


@dataclass(frozen=True)
class CdiDevice:
    """One CDI device a spec file defines."""

    qualified_name: str
    spec_file: str
    edits: dict[str, Any] = field(default_factory=dict)

    def words(self) -> set[str]:
        """What the device's edits name: env values, device node and mount paths, whole and split into words."""
        values = [entry.split("=", 1)[1] for entry in self.edits.get("env") or [] if "=" in str(entry)]
        for node in self.edits.get("deviceNodes") or []:
            values += [node.get("path", ""), node.get("hostPath", "")]
        for mount in self.edits.get("mounts") or []:
            values += [mount.get("hostPath", ""), mount.get("containerPath", "")]
        words = {str(value) for value in values if value}
        return words | {part for value in words for part in SEPARATORS.split(value) if part}


def cdi_dir_of(endpoint: DriverEndpoint) -> Path:
    """The endpoint's CDI dir, where this machine reads it; else the check is not applicable, saying why."""
    if endpoint.cdi_dir is not None:
        return endpoint.cdi_dir
    pytest.skip(
        f"not applicable: the CDI dir of {endpoint.driver} on {endpoint.node} is read only where the backend knows "
        "it (the local backend; on other clusters a node agent carries the driver's sockets, not its CDI specs)"
    )


def read_specs(cdi_dir: Path) -> dict[str, CdiDevice]:
    """Every CDI device the spec files in `cdi_dir` define, by qualified name (files that are no spec are skipped)."""
    defined: dict[str, CdiDevice] = {}
    if not cdi_dir.is_dir():
        return defined
    for path in sorted(cdi_dir.iterdir()):
        if path.suffix not in SPEC_SUFFIXES or not path.is_file():
            continue
        spec = _load(path)
        if not isinstance(spec, dict) or not isinstance(spec.get("kind"), str):
            continue
        common = spec.get("containerEdits") or {}
        for device in spec.get("devices") or []:
            if isinstance(device, dict) and device.get("name"):
                name = f"{spec['kind']}={device['name']}"
                defined[name] = CdiDevice(name, path.name, _merged(common, device.get("containerEdits") or {}))
    return defined


def _load(path: Path) -> Any:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:  # removed since the listing: an unprepare running at the same time
        return None
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError):
        return None


def _merged(common: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """The edits of one device: the spec's and its own, list fields concatenated."""
    merged = dict(common)
    for key, value in own.items():
        merged[key] = [*(merged.get(key) or []), *value] if isinstance(value, list) else value
    return merged


def same_kind(defined: Iterable[str], cdi_id: str) -> list[str]:
    """The defined CDI devices of the kind (`<vendor>/<class>`) `cdi_id` names, for failure messages."""
    kind = cdi_id.split("=", 1)[0]
    return sorted(name for name in defined if name.split("=", 1)[0] == kind)
