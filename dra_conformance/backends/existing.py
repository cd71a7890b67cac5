"""The `existing` backend: a cluster someone else runs, reached through a kubeconfig. Never created or deleted."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from dra_conformance.driver.installed import check_installed
from dra_conformance.driver.profile import load_profile
from dra_conformance.errors import BackendError
from dra_conformance.kube.client import client_from_kubeconfig
from dra_conformance.kube.preflight import RightsCheck, check_cluster, check_rights
from dra_conformance.model.cluster import BackendCapability, ClusterInfo

# Nodes kubeadm and most installers mark as control plane: kubelet-mode checks stay off them.
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
# A usable API server lists nodes in milliseconds; 10 s covers a slow VPN to a staging cluster.
REQUEST_TIMEOUT = 10.0


@dataclass(frozen=True)
class ExistingClusterConfig:
    """Where the existing cluster is."""

    kubeconfig: Path
    context: str | None = None
    # kube-apiserver audit log readable from this machine, if any (enables the metrics consumer inventory).
    audit_log: Path | None = None
    # Driver profile of the driver installed in the cluster; its driver and expected DeviceClasses must be there.
    profile: Path | None = None


class ExistingBackend:
    """Attaches to a cluster through its kubeconfig; `stop` leaves it alone."""

    name = "existing"

    def __init__(self, config: ExistingClusterConfig) -> None:
        """Use the cluster `config` points at; an unreadable kubeconfig or unknown context is a UsageError."""
        client_from_kubeconfig(config.kubeconfig, config.context).close()
        self.config = config
        # What the identity lacks of the rights the suites need, as `start` found it (None before it ran).
        self.rights: RightsCheck | None = None

    def start(self) -> ClusterInfo:
        """Run the preflight, then describe the cluster; an unusable cluster is one `PreflightError` line.

        Every right the suites need is asked for before anything else reads the cluster: an identity that lacks a
        right every suite needs is refused naming all it lacks, not the first one a later step trips over.
        """
        check_cluster(self.config.kubeconfig, self.config.context)
        self.rights = check_rights(self.config.kubeconfig, self.config.context)
        if self.rights.fatal:
            raise self.rights.refusal()
        if self.config.profile is not None:
            with client_from_kubeconfig(self.config.kubeconfig, self.config.context, retries=0) as api_client:
                check_installed(api_client, load_profile(self.config.profile))
        info = self.info()
        assert info is not None
        return info

    def info(self) -> ClusterInfo | None:
        """Describe the cluster (server and nodes); raise BackendError if it cannot be read."""
        with client_from_kubeconfig(self.config.kubeconfig, self.config.context, retries=0) as api_client:
            server = str(api_client.configuration.host)
            try:
                nodes = client.CoreV1Api(api_client).list_node(_request_timeout=REQUEST_TIMEOUT)
            except (ApiException, HTTPError, OSError) as error:
                reason = getattr(error, "reason", None) or str(error).splitlines()[0]
                raise BackendError(f"existing cluster at {server}: list nodes: {reason}") from None
        capabilities = {BackendCapability.AUDIT_LOG} if self.config.audit_log else set()
        if any(_real_kubelet(node) for node in nodes.items):
            capabilities.add(BackendCapability.REAL_KUBELET)
        return ClusterInfo(
            backend=self.name,
            kubeconfig=self.config.kubeconfig,
            server=server,
            nodes=tuple(sorted(node.metadata.name for node in nodes.items if _schedulable(node))),
            real_nodes=tuple(sorted(node.metadata.name for node in nodes.items if _real_kubelet(node))),
            capabilities=frozenset(capabilities),
            audit_log=self.config.audit_log,
        )

    def stop(self) -> None:
        """Do nothing: this backend never deletes a cluster it did not create."""

    def release(self, owner_pid: int) -> None:
        """Do nothing: see `stop`."""

    def ends_with(self, owner_pid: int) -> bool:
        """Never: an existing cluster outlives every run."""
        return False


def _real_kubelet(node: client.V1Node) -> bool:
    """Whether kubelet-mode checks may use `node`: a real kubelet serves it, not cordoned, not a control plane.

    Its taints do not rule it out: GPU pools are often tainted, and kubelet-mode pods tolerate the taints of the
    node they are pinned to. kwok's fake nodes report a `kwok-` kubelet version.
    """
    info = node.status.node_info if node.status else None
    labels = node.metadata.labels or {}
    return (
        info is not None
        and not str(info.kubelet_version).startswith("kwok")
        and not node.spec.unschedulable
        and CONTROL_PLANE_LABEL not in labels
    )


def _schedulable(node: client.V1Node) -> bool:
    """Whether the suites' pods can land on `node`: not cordoned, no NoSchedule or NoExecute taint.

    Control-plane nodes and nodes set aside (tainted) are left out, so a check that pins pods to nodes never
    picks one its pods could not be scheduled to.
    """
    taints = node.spec.taints or []
    return not node.spec.unschedulable and not any(taint.effect in ("NoSchedule", "NoExecute") for taint in taints)
