"""The kinds the suites create, as dynamic-client resources, without API discovery.

The dynamic client's lazy discovery fetches group versions on demand and fails a lookup when any aggregated API
it walks is briefly unavailable (as the metrics suite makes it on purpose). A fixed table of the kinds this
project creates removes that dependency: every path is known up front.
"""

from __future__ import annotations

from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.resource import Resource

from dra_conformance.errors import ConformanceError

# (apiVersion, kind) -> (plural, namespaced)
KINDS: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "Namespace"): ("namespaces", False),
    ("v1", "Pod"): ("pods", True),
    ("v1", "ServiceAccount"): ("serviceaccounts", True),
    ("v1", "Service"): ("services", True),
    ("v1", "ConfigMap"): ("configmaps", True),
    ("resource.k8s.io/v1", "DeviceClass"): ("deviceclasses", False),
    ("resource.k8s.io/v1", "ResourceClaim"): ("resourceclaims", True),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): ("resourceclaimtemplates", True),
    ("resource.k8s.io/v1", "ResourceSlice"): ("resourceslices", False),
    ("resource.k8s.io/v1", "DeviceTaintRule"): ("devicetaintrules", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): ("clusterroles", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): ("clusterrolebindings", False),
    ("rbac.authorization.k8s.io/v1", "Role"): ("roles", True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): ("rolebindings", True),
    ("apiregistration.k8s.io/v1", "APIService"): ("apiservices", False),
    ("apps/v1", "Deployment"): ("deployments", True),
    ("batch/v1", "Job"): ("jobs", True),
    ("autoscaling/v2", "HorizontalPodAutoscaler"): ("horizontalpodautoscalers", True),
}


def resource(dynamic: DynamicClient, api_version: str, kind: str) -> Resource:
    """The dynamic-client resource of a known kind."""
    try:
        plural, namespaced = KINDS[(api_version, kind)]
    except KeyError:
        known = ", ".join(f"{k} ({v})" for v, k in sorted(KINDS))
        raise ConformanceError(f"kind {kind} ({api_version}) is not in dra_conformance.kinds; known: {known}") from None
    group, _, version = api_version.rpartition("/")
    return Resource(
        prefix="apis" if group else "api",
        group=group,
        api_version=version,
        kind=kind,
        namespaced=namespaced,
        name=plural,
        client=dynamic,
    )
