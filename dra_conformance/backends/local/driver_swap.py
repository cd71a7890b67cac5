"""Replacing the driver under test of a running local cluster with another profile's driver (`--replace-driver`).

A vendor iterating on a driver, and the mutation tests running one broken build after another, would otherwise pay
a whole cluster start per build: control plane, nodes and metrics adapter, about 20 s and 30 CPU-seconds on two
cores. A swap removes everything the old driver had: its processes (killed, as a crash would), its ResourceSlices,
its identity objects (RBAC, ServiceAccount, token-holder pods) and the node-local directories its deployment created
(sockets, CDI specs, data; a directory that existed before, such as one of the profile's `hostPaths`, stays). Then
the new profile's driver starts as on a new cluster. The control plane, the nodes and the metrics adapter stay.

Only drivers that run as processes on kwok nodes are swapped. On a real node the driver runs as DaemonSet pods,
with images in containerd and state under /var/lib/kubelet, and a swap would not reset those: such clusters are
started anew.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from dra_conformance.backends.local import drivers
from dra_conformance.backends.local.cluster_record import ClusterRecord
from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.backends.local.owners import Owners
from dra_conformance.driver import confinement
from dra_conformance.driver.profile import DriverProfile
from dra_conformance.kube import builders, kinds, waits


def refusal(layout: ClusterLayout, recorded: ClusterRecord, profile: DriverProfile, owner: int | None) -> str | None:
    """Why the driver of the cluster (`recorded`: its record) cannot be replaced by `profile`'s; None if it can.

    `owner`: the process asking (it may hold the cluster already); any other live run holding it would lose its
    driver midway.
    """
    if recorded.real_nodes:
        return "the cluster has a real node, whose driver pods, images and host paths a swap would not reset"
    if profile.real_nodes_only or profile.install is not None:
        return f"{profile.source} runs its driver on real nodes (as shipped), which the swap does not start"
    if not drivers.identity_path(layout).exists():
        return "the cluster recorded no driver identity to remove (it was started by an older dra-conformance)"
    owners = Owners.read(layout.owners)
    others = [pid for pid in (owners.live().pids if owners else ()) if pid != owner]
    if others:
        return f"runs {', '.join(map(str, others))} hold the cluster and would lose their driver midway"
    return None


def remove_old_driver(api_client: client.ApiClient, layout: ClusterLayout, deadline: float) -> str:
    """Delete what the stopped old driver left: its slices, identity objects and node directories; return its name.

    Runs after its processes are gone (else it would publish again). `deadline`: for each object to be gone.
    """
    identity: dict[str, Any] = json.loads(drivers.identity_path(layout).read_text())
    driver = str(identity["driver"])
    dynamic = DynamicClient(api_client)
    slices = kinds.resource(dynamic, builders.RESOURCE_API, "ResourceSlice")
    slices.delete(field_selector=f"spec.driver={driver}")
    # Pods first (grace 0: no kubelet stops a token holder), then the RBAC they were granted.
    for ref in sorted(identity["objects"], key=lambda ref: ref["kind"] != "Pod"):
        resource = kinds.resource(dynamic, ref["apiVersion"], ref["kind"])
        namespace = ref["namespace"] or None
        try:
            resource.delete(name=ref["name"], namespace=namespace, body={"gracePeriodSeconds": 0})
        except NotFoundError:
            continue
        waits.until(
            functools.partial(_exists, resource, ref["name"], namespace),
            lambda present: not present,
            timeout=deadline,
            what=f"{ref['kind']} {ref['name']} of driver {driver} deleted",
            describe=lambda present: "still there" if present else "gone",
        )
    waits.until(
        lambda: len(slices.get(field_selector=f"spec.driver={driver}").items),
        lambda count: count == 0,
        timeout=deadline,
        what=f"ResourceSlices of driver {driver} deleted",
        describe=lambda count: f"{count} left",
    )
    for path in directories_to_delete(identity, layout):
        shutil.rmtree(path, ignore_errors=True)
    drivers.identity_path(layout).unlink()
    return driver


def directories_to_delete(identity: dict[str, Any], layout: ClusterLayout) -> list[Path]:
    """The old driver's directories that its deployment created: never one that existed before it.

    A record written before deployments noted what they created lists every directory; of those, only the ones
    inside the cluster's own directories (its state and runtime directories) are the cluster's to delete.
    """
    if drivers.CREATED_KEY in identity:
        return [Path(path) for paths in identity[drivers.CREATED_KEY].values() for path in paths]
    ours = (layout.root, drivers.runtime_dir(layout))
    listed = [Path(path) for paths in identity["directories"].values() for path in paths]
    return [path for path in listed if any(confinement.inside(path, root) and path != root for root in ours)]


def _exists(resource: Any, name: str, namespace: str | None) -> bool:
    try:
        resource.get(name=name, namespace=namespace)
    except NotFoundError:
        return False
    return True
