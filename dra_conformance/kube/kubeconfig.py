"""Writing kubeconfig files with embedded credentials (pure data, no client needed)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def render(
    server: str,
    ca_pem: bytes,
    *,
    user: str,
    client_cert_pem: bytes | None = None,
    client_key_pem: bytes | None = None,
    token: str | None = None,
    cluster: str = "dra-conformance",
) -> dict[str, Any]:
    """Return a kubeconfig document for one user with either a client certificate or a bearer token."""
    credentials: dict[str, str] = {}
    if client_cert_pem is not None and client_key_pem is not None:
        credentials["client-certificate-data"] = _b64(client_cert_pem)
        credentials["client-key-data"] = _b64(client_key_pem)
    if token is not None:
        credentials["token"] = token
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": f"{user}@{cluster}", "context": {"cluster": cluster, "user": user}}],
        "current-context": f"{user}@{cluster}",
    }


def write(path: Path, document: dict[str, Any]) -> Path:
    """Write a kubeconfig with owner-only permissions (it holds private keys)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path
