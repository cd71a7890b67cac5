"""Which CDI device IDs a node's spec files define, as the container runtime reads them (pure).

A spec file (JSON or YAML) has a `kind`, `<vendor>/<class>`, and `devices`, each with a `name`: it defines the CDI
devices `<vendor>/<class>=<name>`, the IDs a prepare answers and the kubelet passes to the runtime.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

# The file names the CDI spec loader reads.
SPEC_SUFFIXES = (".json", ".yaml", ".yml")
# What separates the words of an edit's value (a path, a list, KEY=VALUE, an address with a port).
SEPARATORS = re.compile(r"[\s,;:=/]+")


def read_spec_files(directory: Path | None) -> dict[str, str]:
    """The text of every spec file in `directory` by file name; none where it is unknown or absent."""
    files: dict[str, str] = {}
    if directory is None or not directory.is_dir():
        return files
    for path in sorted(directory.iterdir()):
        if path.suffix in SPEC_SUFFIXES:
            try:
                files[path.name] = path.read_text(errors="replace")
            except (FileNotFoundError, IsADirectoryError):  # removed since the listing, or not a file
                continue
    return files


def defined_ids(files: Mapping[str, str]) -> dict[str, str]:
    """Every CDI device ID the spec files define, with the file that defines it (files that are no spec: none)."""
    defined: dict[str, str] = {}
    for name, text in sorted(files.items()):
        spec = _parse(name, text)
        if not isinstance(spec, dict) or not isinstance(spec.get("kind"), str):
            continue
        for device in spec.get("devices") or []:
            if isinstance(device, dict) and device.get("name"):
                defined[f"{spec['kind']}={device['name']}"] = name
    return defined


def edit_words(files: Mapping[str, str]) -> dict[str, set[str]]:
    """What the container edits of each defined CDI device name, by CDI device ID.

    Env values, device node and mount paths, whole and split into words; a device's edits are its own and those of
    its whole spec.
    """
    words: dict[str, set[str]] = {}
    for name, text in sorted(files.items()):
        spec = _parse(name, text)
        if not isinstance(spec, dict) or not isinstance(spec.get("kind"), str):
            continue
        common = spec.get("containerEdits") or {}
        for device in spec.get("devices") or []:
            if isinstance(device, dict) and device.get("name"):
                own = device.get("containerEdits") or {}
                words[f"{spec['kind']}={device['name']}"] = _words(common) | _words(own)
    return words


def edit_env(files: Mapping[str, str]) -> dict[str, list[str]]:
    """The environment entries (`NAME=value`) the container edits of each defined CDI device set, by CDI device ID.

    A device's entries are those of its whole spec, then its own.
    """
    env: dict[str, list[str]] = {}
    for name, text in sorted(files.items()):
        spec = _parse(name, text)
        if not isinstance(spec, dict) or not isinstance(spec.get("kind"), str):
            continue
        common = _env(spec.get("containerEdits"))
        for device in spec.get("devices") or []:
            if isinstance(device, dict) and device.get("name"):
                env[f"{spec['kind']}={device['name']}"] = common + _env(device.get("containerEdits"))
    return env


def _env(edits: Any) -> list[str]:
    return [str(entry) for entry in edits.get("env") or []] if isinstance(edits, dict) else []


def _words(edits: Any) -> set[str]:
    if not isinstance(edits, dict):
        return set()
    values = [str(entry).split("=", 1)[1] for entry in edits.get("env") or [] if "=" in str(entry)]
    for node in edits.get("deviceNodes") or []:
        values += [str(node.get("path", "")), str(node.get("hostPath", ""))] if isinstance(node, dict) else []
    for mount in edits.get("mounts") or []:
        values += (
            [str(mount.get("hostPath", "")), str(mount.get("containerPath", ""))] if isinstance(mount, dict) else []
        )
    whole = {value for value in values if value}
    return whole | {part for value in whole for part in SEPARATORS.split(value) if part}


def _parse(name: str, text: str) -> Any:
    try:
        return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError):
        return None
