"""A node a real kubelet serves, as a kubelet-mode check sees it: where to pin pods and what it can reach there."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from kubernetes import client

from dra_conformance.kube import waits
from dra_conformance.kube.builders import Builder, ClaimUse, Manifest, PodHold
from dra_conformance.kube.pods import describe_pod, pod_ready
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.node_agent import CDI_SUFFIXES, NodeAgent, NodeLayout
from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.timeouts import Timeouts

# The container prints its environment, then stays up so the claim stays prepared while the check looks.
PRINT_ENV_AND_WAIT = ("sh", "-c", "env; exec sleep 3600")
# The workload image where the cluster names none: a busybox any registry mirror has.
DEFAULT_WORKLOAD_IMAGE = "busybox:1.36"


@dataclass(frozen=True)
class CdiSpecFiles:
    """A node's CDI spec files, read from this machine or, where the node is elsewhere, through its node agent."""

    dirs: tuple[PurePosixPath, ...]
    agent: NodeAgent | None = None

    def read(self) -> dict[str, str]:
        """Text of every spec file, by path."""
        files: dict[str, str] = {}
        for directory in self.dirs:
            if self.agent is not None:
                remote = self.agent.host_text_files(directory, CDI_SUFFIXES)
                files.update({str(directory / name): text for name, text in remote.items()})
                continue
            local = Path(directory)
            if local.is_dir():
                for path in sorted(local.iterdir()):
                    if path.suffix in CDI_SUFFIXES and path.is_file():
                        files[str(path)] = path.read_text(errors="replace")
        return files

    def naming(self, claim_uid: str) -> dict[str, str]:
        """Text of the spec files that name the claim (in their file name or their content), by path."""
        return {
            path: text
            for path, text in self.read().items()
            if claim_uid in PurePosixPath(path).name or claim_uid in text
        }


@dataclass(frozen=True)
class RealNodeTarget:
    """A node a real kubelet serves, leased by one test."""

    name: str
    # The driver under test's sockets there, where this machine can reach them (local backend, or a node agent found
    # that the node's file system is this machine's).
    endpoint: DriverEndpoint | None
    # What a pod needs to land there: tolerations of the node's own taints.
    tolerations: tuple[Manifest, ...]
    # An image with a shell (busybox) the node has or can pull.
    image: str
    # Where the node's CDI specs can be read; None where they cannot.
    cdi_specs: CdiSpecFiles | None = None
    # The node as its agent found it (clusters the suite did not build); None where the backend knows the node.
    layout: NodeLayout | None = None


def endpoint_from(layout: NodeLayout, driver: str) -> DriverEndpoint | None:
    """The driver's endpoint on a node the agent found to share this machine's file system, else None."""
    if not layout.shares_this_machine:
        return None
    return DriverEndpoint(driver, layout.node, Path(layout.kubelet_root))


def busybox_on(node: Manifest) -> str | None:
    """A busybox image the node already has (`node` as the API returns it), by tag; None where it has none."""
    names = [name for image in node.get("status", {}).get("images") or [] for name in image.get("names") or []]
    return next((n for n in names if "busybox" in n and "@" not in n), None)


def tolerations_of(taints: list[Manifest]) -> tuple[Manifest, ...]:
    """Tolerations of a node's NoSchedule and NoExecute taints (`taints` as the API returns them)."""
    return tuple(
        {"key": taint["key"], "operator": "Exists", "effect": taint["effect"]}
        for taint in taints
        if taint.get("effect") in ("NoSchedule", "NoExecute")
    )


def real_node_hold(api_client: client.ApiClient, nodes: tuple[str, ...]) -> PodHold:
    """How pods allocating claims on `nodes` (real kubelets) are held off those kubelets, tolerating their taints."""
    core = client.CoreV1Api(api_client)
    tolerations: list[Manifest] = []
    for name in nodes:
        taints = core.read_node(name).to_dict()["spec"].get("taints") or []
        tolerations += [t for t in tolerations_of(taints) if t not in tolerations]
    return PodHold(nodes, tuple(tolerations))


def running_pod(
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    node: RealNodeTarget,
    timeouts: Timeouts,
    *,
    wait: bool = True,
) -> client.V1Pod:
    """A pod on `node` with a claim of its own that prints its environment; by default once it is Ready."""
    name = claimed_pod(tracker, build, node)[0]["metadata"]["name"]
    if not wait:
        return client.CoreV1Api(api_client).read_namespaced_pod(name, build.namespace)
    return await_ready(api_client, build.namespace, name, timeouts.pod_running, f"pod {name} Ready")


def pod_on(
    build: Builder, node: RealNodeTarget, uses: list[ClaimUse], command: tuple[str, ...] = PRINT_ENV_AND_WAIT
) -> Manifest:
    """The manifest of a pod on `node` (its taints tolerated, its image) running `command` with the claims `uses`."""
    return build.pod_with(uses, node=node.name, tolerations=node.tolerations, image=node.image, command=command)


def claimed_pod(
    tracker: ResourceTracker, build: Builder, node: RealNodeTarget, command: tuple[str, ...] = PRINT_ENV_AND_WAIT
) -> tuple[Manifest, Manifest]:
    """A pod on `node` running `command` with a claim of its own (and a DeviceClass of its own): (pod, claim)."""
    device_class = tracker.create(build.device_class())["metadata"]["name"]
    claim = tracker.create(build.claim(device_class))
    pod = tracker.create(pod_on(build, node, [ClaimUse("devices", claim=claim["metadata"]["name"])], command))
    return pod, claim


def await_ready(api_client: client.ApiClient, namespace: str, pod: str, timeout: float, what: str) -> client.V1Pod:
    """The pod once it is Ready, within `timeout` seconds (`what` names the wait in its timeout message)."""
    read = functools.partial(client.CoreV1Api(api_client).read_namespaced_pod, pod, namespace)
    return waits.until(read, pod_ready, timeout=timeout, what=what, describe=describe_pod)
