"""Builders of DRA objects (resource.k8s.io/v1) with the test's namespace, unique names and driver name."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

Manifest = dict[str, Any]
RESOURCE_API = "resource.k8s.io/v1"
# Pods on fake nodes never run an image; a real registry path keeps the manifests valid for real nodes too.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


@dataclass
class Builder:
    """Makes fresh manifests; names are `<prefix>-<counter>` so they are unique within the test's namespace.

    Cluster-scoped objects (DeviceClass, ResourceSlice) are prefixed with the namespace, which is unique per
    test, so parallel tests never collide.
    """

    namespace: str
    driver: str
    _counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def name(self, prefix: str) -> str:
        """A name unique within this builder."""
        return f"{prefix}-{next(self._counter)}"

    def cluster_name(self, prefix: str) -> str:
        """A name unique cluster-wide (for cluster-scoped objects)."""
        return f"{self.namespace}-{self.name(prefix)}"

    def device_class(self, *, selector: str | None = None) -> Manifest:
        """A DeviceClass selecting this builder's driver (and `selector`, a CEL expression, if given)."""
        selectors = [{"cel": {"expression": f'device.driver == "{self.driver}"'}}]
        if selector:
            selectors.append({"cel": {"expression": selector}})
        return {
            "apiVersion": RESOURCE_API,
            "kind": "DeviceClass",
            "metadata": {"name": self.cluster_name("class")},
            "spec": {"selectors": selectors},
        }

    def resource_slice(self, node: str, devices: int, *, pool: str | None = None, generation: int = 1) -> Manifest:
        """A ResourceSlice publishing `devices` devices of this driver on `node`, all in one pool."""
        return {
            "apiVersion": RESOURCE_API,
            "kind": "ResourceSlice",
            "metadata": {"name": self.cluster_name("slice")},
            "spec": {
                "driver": self.driver,
                "nodeName": node,
                "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": 1},
                "devices": [
                    {"name": f"dev-{index}", "attributes": {"index": {"int": index}}} for index in range(devices)
                ],
            },
        }

    def claim(self, device_class: str, *, count: int = 1) -> Manifest:
        """A ResourceClaim for `count` devices of `device_class`."""
        return {
            "apiVersion": RESOURCE_API,
            "kind": "ResourceClaim",
            "metadata": {"name": self.name("claim"), "namespace": self.namespace},
            "spec": _claim_spec(device_class, count),
        }

    def claim_template(self, device_class: str, *, count: int = 1) -> Manifest:
        """A ResourceClaimTemplate for `count` devices of `device_class`."""
        return {
            "apiVersion": RESOURCE_API,
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": self.name("template"), "namespace": self.namespace},
            "spec": {"spec": _claim_spec(device_class, count)},
        }

    def pod(self, *, claim: str | None = None, template: str | None = None, node: str | None = None) -> Manifest:
        """A pod whose one container uses one claim, referenced by name or generated from a template.

        `node` pins the pod (and so the allocation) to one node through a nodeSelector.
        """
        reference = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template}
        pod: Manifest = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": self.name("pod"), "namespace": self.namespace},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "resourceClaims": [{"name": "devices", **reference}],
                "containers": [{"name": "app", "image": PAUSE_IMAGE, "resources": {"claims": [{"name": "devices"}]}}],
            },
        }
        if node:
            pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        return pod


def _claim_spec(device_class: str, count: int) -> Manifest:
    return {
        "devices": {
            "requests": [
                {
                    "name": "req",
                    "exactly": {
                        "deviceClassName": device_class,
                        "allocationMode": "ExactCount",
                        "count": count,
                    },
                }
            ]
        }
    }
