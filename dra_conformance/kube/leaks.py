"""Leak audit: after a test's cleanup nothing it created may remain, in the cluster or on the node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes.dynamic import DynamicClient

from dra_conformance.errors import ConformanceError, WaitTimeout
from dra_conformance.kube import kinds, waits

# Namespaced kinds a DRA test creates directly or indirectly (generated claims).
AUDITED_KINDS = (
    ("v1", "Pod"),
    ("resource.k8s.io/v1", "ResourceClaim"),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"),
)


class LeakError(ConformanceError):
    """Something a test created outlived its cleanup; the message lists every leftover."""


def _describe(kind: str, obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    extra = f" finalizers={meta['finalizers']}" if meta.get("finalizers") else ""
    deleting = " (deleting)" if meta.get("deletionTimestamp") else ""
    return f"{kind} {meta.get('namespace', '')}/{meta['name']}{deleting}{extra}"


def namespace_leftovers(dynamic: DynamicClient, namespace: str) -> list[str]:
    """Pods, claims and templates still in `namespace`."""
    leftovers = []
    for api_version, kind in AUDITED_KINDS:
        listed = kinds.resource(dynamic, api_version, kind).get(namespace=namespace).to_dict()
        leftovers += [_describe(kind, item) for item in listed["items"]]
    return leftovers


def audit_namespace(dynamic: DynamicClient, namespace: str, timeout: float) -> None:
    """Wait (generated claims are deleted by the garbage collector) until the namespace holds none of them."""
    try:
        waits.until(
            lambda: namespace_leftovers(dynamic, namespace),
            lambda left: not left,
            timeout=timeout,
            what=f"no pods or claims left in {namespace}",
            describe=str,
        )
    except WaitTimeout as error:
        raise LeakError(f"leaked after cleanup: {error.last_observed}") from None


def driver_leftovers(prepared: dict[str, Any], cdi_dir: Path) -> list[str]:
    """Claims a driver still holds prepared and CDI specs still on disk."""
    leftovers = [f"prepared claim {record['namespace']}/{record['name']} ({uid})" for uid, record in prepared.items()]
    if cdi_dir.exists():
        leftovers += [f"CDI spec {path}" for path in sorted(cdi_dir.iterdir())]
    return leftovers


def slice_leftovers(dynamic: DynamicClient, driver: str) -> list[str]:
    """ResourceSlices still published for `driver`."""
    listed = (
        kinds.resource(dynamic, "resource.k8s.io/v1", "ResourceSlice")
        .get(field_selector=f"spec.driver={driver}")
        .to_dict()
    )
    return [_describe("ResourceSlice", item) for item in listed["items"]]
