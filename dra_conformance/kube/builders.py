"""Builders of DRA objects (resource.k8s.io/v1) with the test's namespace, unique names and driver name."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

Manifest = dict[str, Any]
RESOURCE_API = "resource.k8s.io/v1"
# Pods on fake nodes never run an image; a real registry path keeps the manifests valid for real nodes too.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"

# Test pods are deleted as the cluster deletes pods: gracefully. The kubelet stops the containers and unprepares the
# claims before it reports the pod terminal (k8s.io/kubernetes@v1.37.2 pkg/kubelet/kubelet.go:2439-2445), and the
# resourceclaim controller releases a scheduled pod's claim only once the pod is terminal or gone
# (pkg/controller/resourceclaim/controller.go:1810 isPodDone), so the device is allocated again only after that.
# With 0 the API server removes the pod at once, and the next pod could be prepared on a device the kubelet had not
# yet unprepared: a driver that refuses that (on purpose) was failed for the suite's own shortcut. One second: the
# test workloads (a shell as PID 1) ignore SIGTERM, so a longer grace would only add waiting before the kill.
TEST_POD_GRACE_SECONDS = 1


@dataclass(frozen=True)
class ClaimUse:
    """One entry of a pod's spec.resourceClaims: a named claim or a template to generate one from."""

    name: str
    claim: str | None = None
    template: str | None = None


@dataclass(frozen=True)
class ContainerUse:
    """One container of a pod and the claims it references in `resources.claims`.

    `claims` holds (pod claim name, request name) pairs; an empty request name references the whole claim.
    `init` makes it an init container, `sidecar` an init container with restartPolicy Always (a restartable sidecar).
    """

    name: str
    claims: tuple[tuple[str, str], ...] = ()
    init: bool = False
    sidecar: bool = False
    command: tuple[str, ...] = ()


def pin_to_node(node: str) -> Manifest:
    """A pod affinity that lets the scheduler place the pod only on the node named `node`.

    It matches the Node's name itself: the `kubernetes.io/hostname` label need not equal the name on clusters we did
    not build. The scheduler still runs, so claims are allocated as for any pod.
    """
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def pin_to_nodes(nodes: tuple[str, ...]) -> Manifest:
    """A pod affinity that lets the scheduler place the pod only on one of `nodes` (see `pin_to_node`).

    One term per node: a `metadata.name` field selector takes exactly one value (the API server refuses more), and
    terms are ORed.
    """
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]} for node in nodes]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


@dataclass(frozen=True)
class PodHold:
    """How a pod gets its claims allocated on a node a real kubelet serves without that kubelet preparing them.

    Socket-level checks play the kubelet's part and call the driver themselves; a real kubelet preparing the same
    claims would interleave its calls with theirs. The kubelet prepares a pod's claims only after the pod's volumes
    are mounted (pkg/kubelet/kubelet.go SyncPod waits in WaitForAttachAndMount before kuberuntime's SyncPod calls
    PrepareDynamicResources), and unprepares only claims it prepared. So the pod mounts a ConfigMap that does not
    exist: the scheduler allocates and binds as for any pod, and the kubelet waits at the mount until the pod goes.
    """

    # The nodes such pods may land on, and tolerations of their NoSchedule and NoExecute taints.
    nodes: tuple[str, ...]
    tolerations: tuple[Manifest, ...]
    # A ConfigMap name no test creates.
    config_map: str = "dra-conformance-never-created"

    def apply(self, pod: Manifest) -> None:
        """Make `pod` held: the missing ConfigMap mounted, the nodes' taints tolerated, the pod kept to the nodes."""
        spec = pod["spec"]
        spec["volumes"] = [*spec.get("volumes", []), {"name": "held", "configMap": {"name": self.config_map}}]
        for container in spec["containers"]:
            container["volumeMounts"] = [*container.get("volumeMounts", []), {"name": "held", "mountPath": "/held"}]
        own = spec.get("tolerations", [])
        if own or self.tolerations:
            spec["tolerations"] = [*own, *(t for t in self.tolerations if t not in own)]
        spec.setdefault("affinity", pin_to_nodes(self.nodes))


@dataclass
class Builder:
    """Makes fresh manifests; names are `<prefix>-<counter>` so they are unique within the test's namespace.

    Cluster-scoped objects (DeviceClass, ResourceSlice) are prefixed with the namespace, which is unique per
    test, so parallel tests never collide.
    """

    namespace: str
    driver: str
    # Where pods that socket-level checks allocate claims with must be held (see `PodHold`); None: no need.
    hold: PodHold | None = None
    _counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def held(self, pod: Manifest) -> Manifest:
        """`pod`, held where this builder has a hold (see `PodHold`): for pods whose claims a check prepares."""
        if self.hold is not None:
            self.hold.apply(pod)
        return pod

    def name(self, prefix: str) -> str:
        """A name unique within this builder."""
        return f"{prefix}-{next(self._counter)}"

    def cluster_name(self, prefix: str) -> str:
        """A name unique cluster-wide (for cluster-scoped objects)."""
        return f"{self.namespace}-{self.name(prefix)}"

    def device_class(self, *, selectors: tuple[str, ...] = ()) -> Manifest:
        """A DeviceClass selecting this builder's driver, narrowed by further CEL `selectors`."""
        expressions = [f'device.driver == "{self.driver}"', *selectors]
        return {
            "apiVersion": RESOURCE_API,
            "kind": "DeviceClass",
            "metadata": {"name": self.cluster_name("class")},
            "spec": {"selectors": [{"cel": {"expression": expression}} for expression in expressions]},
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

    def claim_from_spec(self, spec: Manifest, *, prefix: str = "claim") -> Manifest:
        """A ResourceClaim with the given v1 spec."""
        return {
            "apiVersion": RESOURCE_API,
            "kind": "ResourceClaim",
            "metadata": {"name": self.name(prefix), "namespace": self.namespace},
            "spec": spec,
        }

    def template_from_spec(self, spec: Manifest, *, prefix: str = "template") -> Manifest:
        """A ResourceClaimTemplate whose generated claims get the given v1 spec."""
        return {
            "apiVersion": RESOURCE_API,
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": self.name(prefix), "namespace": self.namespace},
            "spec": {"spec": spec},
        }

    def claim(self, device_class: str, *, count: int = 1, tolerations: tuple[Manifest, ...] = ()) -> Manifest:
        """A ResourceClaim for `count` devices of `device_class`, tolerating the device taints in `tolerations`."""
        return self.claim_from_spec(_single_request(device_class, count, tolerations))

    def claim_template(self, device_class: str, *, count: int = 1) -> Manifest:
        """A ResourceClaimTemplate for `count` devices of `device_class`."""
        return self.template_from_spec(_single_request(device_class, count))

    def pod_with(
        self,
        uses: list[ClaimUse],
        *,
        node: str | None = None,
        prefix: str = "pod",
        tolerations: tuple[Manifest, ...] = (),
        image: str = PAUSE_IMAGE,
        command: tuple[str, ...] = (),
    ) -> Manifest:
        """A pod whose one container uses every claim in `uses`; `node` pins it to that node (`pin_to_node`).

        On fake nodes nothing runs; on a real node the container runs `command` in `image` (present on the node or
        pullable: IfNotPresent).
        """
        references = [
            {"name": use.name, **({"resourceClaimName": use.claim} if use.claim else {})}
            | ({"resourceClaimTemplateName": use.template} if use.template else {})
            for use in uses
        ]
        pod: Manifest = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": self.name(prefix), "namespace": self.namespace},
            "spec": {
                "terminationGracePeriodSeconds": TEST_POD_GRACE_SECONDS,
                "resourceClaims": references,
                "containers": [
                    {
                        "name": "app",
                        "image": image,
                        "imagePullPolicy": "IfNotPresent",
                        "resources": {"claims": [{"name": use.name} for use in uses]},
                        **({"command": list(command)} if command else {}),
                    }
                ],
            },
        }
        if node:
            pod["spec"]["affinity"] = pin_to_node(node)
        if tolerations:
            pod["spec"]["tolerations"] = list(tolerations)
        return pod

    def pod_of_containers(
        self,
        uses: list[ClaimUse],
        containers: list[ContainerUse],
        *,
        node: str | None = None,
        prefix: str = "pod",
        tolerations: tuple[Manifest, ...] = (),
        image: str = PAUSE_IMAGE,
    ) -> Manifest:
        """A pod with the claims in `uses` and the `containers` (init, sidecar or regular) referencing them.

        Init containers and sidecars come first, in the order given; `node` pins the pod (`pin_to_node`). On a real
        node each container runs its own command in `image`.
        """

        def container(use: ContainerUse) -> Manifest:
            claims = [{"name": name, **({"request": request} if request else {})} for name, request in use.claims]
            return {
                "name": use.name,
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                **({"resources": {"claims": claims}} if claims else {}),
                **({"restartPolicy": "Always"} if use.sidecar else {}),
                **({"command": list(use.command)} if use.command else {}),
            }

        pod = self.pod_with(uses, node=node, prefix=prefix, tolerations=tolerations, image=image)
        spec = pod["spec"]
        spec["containers"] = [container(c) for c in containers if not (c.init or c.sidecar)]
        init = [container(c) for c in containers if c.init or c.sidecar]
        if init:
            spec["initContainers"] = init
        return pod

    def job_with(self, pod: Manifest, *, prefix: str = "job") -> Manifest:
        """A Job running `pod`'s spec once (no retries, restartPolicy Never); it succeeds when the container does."""
        spec = {**pod["spec"], "restartPolicy": "Never"}
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": self.name(prefix), "namespace": self.namespace},
            "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": {"app": prefix}}, "spec": spec}},
        }

    def pod(
        self,
        *,
        claim: str | None = None,
        template: str | None = None,
        node: str | None = None,
        tolerations: tuple[Manifest, ...] = (),
    ) -> Manifest:
        """A pod using one claim ("devices"), referenced by name or generated from a template."""
        return self.pod_with([ClaimUse("devices", claim=claim, template=template)], node=node, tolerations=tolerations)


def _single_request(device_class: str, count: int, tolerations: tuple[Manifest, ...] = ()) -> Manifest:
    exactly: Manifest = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
    if tolerations:
        exactly["tolerations"] = list(tolerations)
    return {"devices": {"requests": [{"name": "req", "exactly": exactly}]}}


RBAC_API = "rbac.authorization.k8s.io/v1"


def service_account(name: str, namespace: str) -> Manifest:
    """A ServiceAccount."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}


def role_binding(name: str, namespace: str, subject: str, *, role_kind: str = "Role") -> Manifest:
    """Bind the Role (or ClusterRole) `name` to the ServiceAccount `subject` within `namespace`."""
    return {
        "apiVersion": RBAC_API,
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": subject, "namespace": namespace}],
    }


def cluster_role_binding(name: str, namespace: str, subject: str) -> Manifest:
    """Bind the ClusterRole `name` to the ServiceAccount `namespace/subject`, cluster-wide."""
    return {
        "apiVersion": RBAC_API,
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": subject, "namespace": namespace}],
    }
