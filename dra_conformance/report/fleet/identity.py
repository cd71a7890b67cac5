"""The name a run gives its cluster in summary.json (`run.cluster`), so the fleet report can tell clusters apart."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml


def cluster_name(
    given: str | None,
    backend: str,
    server: str,
    kubeconfig: Path | None = None,
    context: str | None = None,
    details: Mapping[str, str] | None = None,
) -> str:
    """`given` (`--dra-cluster-name`), else the kubeconfig context of an existing cluster, else '<backend>/<name>'.

    A cluster this suite builds is named after its kind cluster or its state directory ('local/local'); a
    kubeconfig that names no context leaves the API server's address.
    """
    if given:
        return given
    if backend == "existing":
        return context or current_context(kubeconfig) or server
    found = details or {}
    name = found.get("cluster") or (Path(found["state_dir"]).name if found.get("state_dir") else "")
    return f"{backend}/{name or server}"


def current_context(kubeconfig: Path | None) -> str | None:
    """The kubeconfig's current-context, or None where it has none or cannot be read."""
    if kubeconfig is None:
        return None
    try:
        document = yaml.safe_load(kubeconfig.read_text())
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    context = document.get("current-context") if isinstance(document, dict) else None
    return str(context) if context else None
