"""The tracker's cleanup against the API server: every object goes, and one that cannot go is named, not hidden."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.dynamic import DynamicClient

from dra_conformance.kube.tracker import CLEANUP_WORKERS, CleanupError, ResourceTracker

# A finalizer nobody serves: the object it holds stays until the test removes it.
HELD = "dra-conformance.example.com/held-by-test"
LABEL = "dra-conformance.example.com/tracker-test"
# The free objects go in milliseconds; the held one never does, so this only bounds the test.
DELETE_TIMEOUT = 3.0


def _config_map(namespace: str, name: str, finalizers: list[str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {LABEL: "yes"}}
    if finalizers:
        meta["finalizers"] = finalizers
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


def test_cleanup_deletes_every_object_and_names_only_the_one_a_finalizer_holds(
    dynamic_client: DynamicClient, namespace: str
) -> None:
    tracker = ResourceTracker(dynamic_client, delete_timeout=DELETE_TIMEOUT)
    config_maps = dynamic_client.resources.get(api_version="v1", kind="ConfigMap")
    for index in range(2 * CLEANUP_WORKERS):  # more objects than deletes in flight
        tracker.create(_config_map(namespace, f"free-{index}"))
    tracker.create(_config_map(namespace, "held", [HELD]))
    try:
        with pytest.raises(CleanupError) as raised:
            tracker.cleanup()
        left = sorted(item.metadata.name for item in config_maps.get(namespace=namespace, label_selector=LABEL).items)
        assert left == ["held"], f"after cleanup: {left}; cleanup said: {raised.value}"
        failures = str(raised.value).splitlines()[1:]
        assert len(failures) == 1 and f"ConfigMap {namespace}/held" in failures[0], str(raised.value)
        assert HELD in failures[0], f"the leftover's finalizers are not named: {failures[0]}"
    finally:
        config_maps.patch(
            name="held",
            namespace=namespace,
            body={"metadata": {"finalizers": None}},
            content_type="application/merge-patch+json",
        )
