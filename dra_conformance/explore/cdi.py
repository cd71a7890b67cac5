"""Which CDI device IDs a node's spec files define, as the container runtime reads them (pure).

A spec file (JSON or YAML) has a `kind`, `<vendor>/<class>`, and `devices`, each with a `name`: it defines the CDI
devices `<vendor>/<class>=<name>`, the IDs a prepare answers and the kubelet passes to the runtime.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

# The file names the CDI spec loader reads.
SPEC_SUFFIXES = (".json", ".yaml", ".yml")


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


def _parse(name: str, text: str) -> Any:
    try:
        return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError):
        return None
