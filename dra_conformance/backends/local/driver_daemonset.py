"""The driver under test on the real node: a DaemonSet pod, the way a vendor installs a DRA driver's kubelet plugin.

The kubelet then owns the driver's life as on any cluster: deleting the pod kills the driver, the DaemonSet makes
a new pod, the new driver registers again through `plugins_registry`. A check that restarts "the driver's pod"
therefore runs the same here as on a cluster the suite did not build.

The local cluster has no registry and no image of the driver, so the pod runs the profile's own command line on
the host's file system: its container (our static busybox) changes root into the host's `/`, mounted read-only,
and runs the very command the backend would run as a host process. The directories the driver writes to (its
registration and plugin sockets, CDI specs, data and the profile's `createDirs`) are mounted writable, like a real
DaemonSet's hostPath volumes. A vendor's driver image is the vendor's to build; what the checks exercise (the
kubelet's plugin registration, prepare and unprepare, pod lifecycle) is the same.
"""

from __future__ import annotations

import shutil
from pathlib import Path, PurePosixPath
from typing import Any

from kubernetes import client

from dra_conformance.backends.local.images import BUSYBOX_IMAGE
from dra_conformance.backends.local.process_plan import ProcessSpec
from dra_conformance.driver.daemonset import daemon_set, host_path_volume
from dra_conformance.kube.builders import Manifest, pin_to_node
from dra_conformance.kube.pods import describe_pod, start_failure

# Where the host's root is mounted in the driver's container.
HOST_ROOT = PurePosixPath("/host")
# The driver's own scratch space (an emptyDir, as a container's writable /tmp would be): the host's root is read-only.
SCRATCH = PurePosixPath("/var/tmp")
# The host's command search path, for the driver after the change of root (the image's own PATH is /bin).
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
APP_LABEL = "dra-conformance.io/driver-under-test"
# Lines of the driver container's log quoted when it fails to come up.
LOG_TAIL_LINES = 20


def daemonset_name(node: str) -> str:
    """The DaemonSet that runs the driver on `node`."""
    return f"driver-{node}"


def _volume_name(index: int) -> str:
    return f"writable-{index}"


def manifest(
    spec: ProcessSpec, node: str, namespace: str, service_account: str, writable: tuple[Path, ...]
) -> Manifest:
    """A DaemonSet running `spec`'s command on `node` only, changed into the host's root, as root."""
    command = shutil.which(spec.argv[0]) or spec.argv[0]
    # A driver addressed by its own name must be found on the host's PATH, not on the image's.
    argv = ["chroot", str(HOST_ROOT), command, *spec.argv[1:]]
    env: dict[str, str] = {"PATH": HOST_PATH, "HOME": "/root", "TMPDIR": str(SCRATCH), **spec.env}
    mounts: list[Manifest] = [
        {"name": "host-root", "mountPath": str(HOST_ROOT), "readOnly": True},
        {"name": "scratch", "mountPath": str(HOST_ROOT / SCRATCH.relative_to("/"))},
    ]
    volumes: list[Manifest] = [
        host_path_volume("host-root", "/", "Directory"),
        {"name": "scratch", "emptyDir": {}},
    ]
    for index, directory in enumerate(sorted(set(writable))):
        name = _volume_name(index)
        mounts.append({"name": name, "mountPath": str(HOST_ROOT / directory.relative_to("/"))})
        volumes.append(host_path_volume(name, str(directory)))
    labels = {APP_LABEL: daemonset_name(node)}
    pod_spec: dict[str, Any] = {
        "serviceAccountName": service_account,
        # The driver authenticates with the kubeconfig the backend wrote (a token bound to a pod on its node).
        "automountServiceAccountToken": False,
        "hostNetwork": True,
        "affinity": pin_to_node(node),
        "tolerations": [{"operator": "Exists"}],
        "terminationGracePeriodSeconds": 5,
        "containers": [
            {
                "name": "driver",
                "image": BUSYBOX_IMAGE,
                "imagePullPolicy": "Never",
                "command": argv,
                "env": [{"name": key, "value": value} for key, value in sorted(env.items())],
                "volumeMounts": mounts,
            }
        ],
        "volumes": volumes,
    }
    return daemon_set(daemonset_name(node), namespace, labels, pod_spec)


def pods_of(core: client.CoreV1Api, namespace: str, node: str) -> list[client.V1Pod]:
    """The driver's pods on `node` (the DaemonSet's), newest last."""
    found = core.list_namespaced_pod(namespace, label_selector=f"{APP_LABEL}={daemonset_name(node)}").items
    return sorted(found, key=lambda pod: pod.metadata.creation_timestamp)


def failure(core: client.CoreV1Api, namespace: str, node: str) -> str | None:
    """Why the driver's pod on `node` will not run (a crash loop, an image it lacks), with its log; else None."""
    for pod in pods_of(core, namespace, node):
        reason = start_failure(pod)
        if reason is None:
            exited = [
                s.state.terminated
                for s in pod.status.container_statuses or []
                if s.state is not None and s.state.terminated is not None
            ]
            reason = f"exited with code {exited[0].exit_code}" if exited else None
        if reason is not None:
            return f"{describe_pod(pod)}: {reason}; last lines of its log: {log_tail(core, pod)}"
    return None


def log_tail(core: client.CoreV1Api, pod: client.V1Pod) -> str:
    """The last lines the driver's container wrote, or why they cannot be read."""
    try:
        text = core.read_namespaced_pod_log(
            pod.metadata.name, pod.metadata.namespace, tail_lines=LOG_TAIL_LINES, _request_timeout=10
        )
    except client.ApiException as error:
        return f"(log unavailable: {error.status} {error.reason})"
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return " | ".join(lines) or "(empty)"
