"""A driver's identity in the cluster: its ServiceAccount, its RBAC, and tokens bound to a pod on each node."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from dra_conformance import paths
from dra_conformance.kube import builders, kubeconfig
from dra_conformance.kube.identities import request_token, token_holder_pod
from dra_conformance.kube.tracker import ResourceTracker


def driver_cluster_role(name: str, driver: str) -> dict[str, Any]:
    """The reference driver's least-privilege ClusterRole (from deploy/rbac.yaml), for another driver name."""
    role = next(
        doc for doc in yaml.safe_load_all(paths.reference_driver_rbac().read_text()) if doc["kind"] == "ClusterRole"
    )
    for rule in role["rules"]:
        if "resourceclaims/driver" in rule["resources"]:
            rule["resourceNames"] = [driver]
    return {**role, "metadata": {"name": name}}


class DriverIdentity:
    """A driver's ServiceAccount in the test namespace, with the reference RBAC; tokens bound to each node."""

    def __init__(
        self,
        tracker: ResourceTracker,
        api_client: client.ApiClient,
        namespace: str,
        driver: str,
        rbac: Callable[[str, str], dict[str, Any]] = driver_cluster_role,
        service_account: str = "driver",
    ) -> None:
        """Create the ServiceAccount and its ClusterRole/Binding (tracked for cleanup)."""
        self.tracker, self.api_client, self.namespace, self.driver = tracker, api_client, namespace, driver
        self.service_account = service_account
        role_name = f"{namespace}-{service_account}"
        tracker.create(builders.service_account(service_account, namespace))
        tracker.create(rbac(role_name, driver))
        tracker.create(builders.cluster_role_binding(role_name, namespace, service_account))

    def token_for(self, node: str) -> str:
        """A token carrying `node` as node-name claim (its holder pod is tracked and deleted after the test)."""
        holder = token_holder_pod(self.namespace, self.service_account, node, f"{self.service_account}-on-{node}")
        pod = self.tracker.create(holder)
        return request_token(
            self.api_client,
            self.namespace,
            self.service_account,
            bound_pod=(pod["metadata"]["name"], pod["metadata"]["uid"]),
        )

    def kubeconfig_for(self, node: str, directory: Path) -> Path:
        """A kubeconfig for this identity on `node`."""
        ca_file = self.api_client.configuration.ssl_ca_cert
        return kubeconfig.write(
            directory / f"{node}.kubeconfig",
            kubeconfig.render(
                str(self.api_client.configuration.host),
                Path(ca_file).read_bytes(),
                user=f"driver@{node}",
                token=self.token_for(node),
            ),
        )
