"""Least-privilege audit: the permissions an identity holds beyond a documented set.

Permissions are read with SelfSubjectRulesReview as the identity itself, so they include every binding that
applies to it (user, groups, cluster and namespace roles). Defaults every authenticated identity gets (discovery,
self-reviews) are measured with a fresh ServiceAccount in the same namespace and not counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

Permission = tuple[str, str, str, str]  # api group, resource[/subresource], verb, resource name ("*" = any)


def granted(api: client.ApiClient, namespace: str) -> set[Permission]:
    """Every resource permission the identity behind `api` holds in `namespace` (cluster-wide ones included)."""
    review = client.AuthorizationV1Api(api).create_self_subject_rules_review({"spec": {"namespace": namespace}})
    return expand(
        {
            "apiGroups": rule.api_groups or [],
            "resources": rule.resources or [],
            "verbs": rule.verbs or [],
            "resourceNames": rule.resource_names or [],
        }
        for rule in review.status.resource_rules or []
    )


def expand(rules: Any) -> set[Permission]:
    """RBAC rules as individual permissions."""
    permissions = set()
    for rule in rules:
        for group in rule.get("apiGroups") or [""]:
            for resource in rule.get("resources") or []:
                for verb in rule.get("verbs") or []:
                    for name in rule.get("resourceNames") or ["*"]:
                        permissions.add((group, resource, verb, name))
    return permissions


def documented(rbac_files: Iterable[Path], driver: str) -> set[Permission]:
    """The least-privilege set: every rule of the Roles and ClusterRoles the driver ships, for `driver`."""
    roles = [
        document
        for path in rbac_files
        for document in yaml.safe_load_all(path.read_text())
        if document and document["kind"] in ("ClusterRole", "Role")
    ]
    rules = [
        {**rule, "resourceNames": [driver]} if "resourceclaims/driver" in rule.get("resources", []) else rule
        for role in roles
        for rule in role.get("rules") or []
    ]
    return expand(rules)


def covered(permission: Permission, allowed: set[Permission]) -> bool:
    """Whether `allowed` includes `permission` (a named grant is covered by the same grant for any name)."""
    group, resource, verb, _name = permission
    return permission in allowed or (group, resource, verb, "*") in allowed


def excess(held: set[Permission], allowed: set[Permission], baseline: set[Permission]) -> list[str]:
    """Permissions held beyond the allowed set and the defaults, as readable lines, sorted."""
    extra = [p for p in held if not covered(p, allowed) and not covered(p, baseline)]
    return sorted(
        f"{group or 'core'} {resource} {verb}" + ("" if name == "*" else f" [{name}]")
        for group, resource, verb, name in extra
    )


# What every kubelet plugin needs: publish its ResourceSlices, read the claims it prepares, read its Node (slices
# of node-local pools name the node; the kubeletplugin helper reads it).
_PLUGIN_BASE = [
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceslices"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
]
# Writing its own entries of status.devices: the status subresource, and the driver's name for claims of its node
# only (`associated-node:`; `arbitrary-node:` would let it write claims of every node).
_STATUS_WRITER = [
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"], "verbs": ["patch", "update"]},
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims/driver"],
        "verbs": ["associated-node:patch", "associated-node:update"],
        "resourceNames": ["{driver}"],
    },
]
# Capabilities (profile names) whose delivery needs the driver to write status.devices.
STATUS_WRITING_CAPABILITIES = frozenset({"statusDevices", "networkData", "bindingConditions"})


def minimum(capabilities: Iterable[str], driver: str) -> set[Permission]:
    """The least a kubelet plugin named `driver` needs for its declared capabilities."""
    rules = list(_PLUGIN_BASE)
    if STATUS_WRITING_CAPABILITIES & set(capabilities):
        rules += _STATUS_WRITER
    named = [
        {**rule, "resourceNames": [name.replace("{driver}", driver) for name in rule["resourceNames"]]}
        if "resourceNames" in rule
        else rule
        for rule in rules
    ]
    return expand(named)
