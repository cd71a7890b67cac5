"""The manifest files a profile names (`identity.rbac`, `install.manifests`): readable Kubernetes objects, or one line.

The local backend applies them after the cluster started; a file that is not a manifest (`identity.rbac:
[/etc/hostname]`) must be refused when the profile is read, not end a started run in a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dra_conformance.driver import bounded_yaml


def _object_problem(document: Any) -> str | None:
    if not isinstance(document, dict):
        return f"is a {type(document).__name__}, not a Kubernetes object (apiVersion, kind, metadata.name)"
    missing = [key for key in ("apiVersion", "kind") if not isinstance(document.get(key), str) or not document[key]]
    metadata = document.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str) or not metadata["name"]:
        missing.append("metadata.name")
    elif "namespace" in metadata and not isinstance(metadata["namespace"], str):
        return "has a metadata.namespace that is not a string"
    return f"has no {', '.join(missing)} (a Kubernetes object needs each)" if missing else None


def problem(path: Path) -> str | None:
    """Why `path` is not a file of Kubernetes objects; None if it is one."""
    try:
        content = path.read_bytes()
    except OSError as error:
        return f"{path}: cannot be read: {error.strerror or error}"
    try:
        documents = bounded_yaml.load_all(bounded_yaml.decode(content))
    except bounded_yaml.BoundedYamlError as error:
        return f"{path}:{error.line}: {error.problem}"
    objects = [(index, document) for index, document in enumerate(documents, 1) if document is not None]
    if not objects:
        return f"{path}: holds no Kubernetes object"
    for index, document in objects:
        found = _object_problem(document)
        if found is not None:
            return f"{path}: document {index} {found}"
    return None
