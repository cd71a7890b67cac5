"""Raw reads of the resource Metrics API (metrics.k8s.io): the suite's client, GETs, discovery and the clock.

Every read goes through the aggregation layer with a client whose user agent names this suite, so the consumer
inventory from the audit log can leave the suite's own reads out.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from kubernetes import client

from dra_conformance import __version__
from dra_conformance.kube import discovery
from dra_conformance.kube.client import raw_request, sibling_client

GROUP = "metrics.k8s.io"
VERSIONS = ("v1", "v1beta1")
SUITE_USER_AGENT = f"dra-conformance/{__version__}"
REQUEST_TIMEOUT = 10.0


def suite_client(admin: client.ApiClient) -> client.ApiClient:
    """A copy of the admin client that identifies itself as this suite."""
    copy = sibling_client(admin)
    copy.user_agent = SUITE_USER_AGENT
    return copy


def _get(api: client.ApiClient, path: str, query: dict[str, str] | None = None) -> tuple[int, Any]:
    status, data = raw_request(api, "GET", path, query=list((query or {}).items()), timeout=REQUEST_TIMEOUT)
    try:
        return status, json.loads(data or b"{}")
    except ValueError:
        return status, {"raw": data.decode(errors="replace")}


def served_versions(api: client.ApiClient) -> list[str]:
    """Versions of metrics.k8s.io that discovery lists (empty if the group is not served at all)."""
    return discovery.served_versions(api, GROUP, timeout=REQUEST_TIMEOUT)


def utc_now() -> datetime.datetime:
    """Now, in UTC (what sample ages are measured against)."""
    return datetime.datetime.now(datetime.UTC)


def get_json(api: client.ApiClient, path: str, query: dict[str, str] | None = None) -> tuple[int, Any]:
    """HTTP status and JSON body of a GET through the aggregator."""
    return _get(api, path, query)


def get_status(api: client.ApiClient, path: str) -> int:
    """HTTP status of a GET (for checks that a removed version really answers 404)."""
    return _get(api, path)[0]


AGGREGATED_DISCOVERY = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def aggregated_discovery_versions(api: client.ApiClient) -> list[str]:
    """Versions of metrics.k8s.io that aggregated discovery (what kubectl and controllers read) lists as Current."""
    _, data = raw_request(api, "GET", "/apis", headers={"Accept": AGGREGATED_DISCOVERY}, timeout=REQUEST_TIMEOUT)
    document = json.loads(data)
    for group in document.get("items", []):
        if group["metadata"]["name"] == GROUP:
            return [v["version"] for v in group.get("versions", []) if v.get("freshness", "Current") == "Current"]
    return []


def preferred_version(served: list[str]) -> str:
    """The version a consumer that knows both would read: v1 when served."""
    return "v1" if "v1" in served else served[0]
