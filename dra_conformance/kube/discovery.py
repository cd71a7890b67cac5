"""API discovery: which versions of an API group the server lists."""

from __future__ import annotations

from kubernetes import client

# Discovery is one GET the API server answers from memory.
DISCOVERY_TIMEOUT = 10.0


def served_versions(api: client.ApiClient, group: str, *, timeout: float = DISCOVERY_TIMEOUT) -> list[str]:
    """Versions of `group` that discovery lists, the preferred one first (empty if the group is not served)."""
    groups = client.ApisApi(api).get_api_versions(_request_timeout=timeout).groups
    found = next((g for g in groups if g.name == group), None)
    if found is None:
        return []
    preferred = found.preferred_version.version if found.preferred_version else None
    return sorted((v.version for v in found.versions), key=lambda version: version != preferred)
