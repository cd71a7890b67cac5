"""The images a shipped driver's manifests use, and whether the real node will find them.

The local cluster has no registry: every image a container of the install uses must be in the real node's
containerd before the manifests are applied, imported from an archive of `install.images` (or there already), and
no container may ask for a pull at every start. `check_images` refuses, in one line naming the image and the object,
what would otherwise end as a pod stuck in ErrImageNeverPull or ImagePullBackOff after the driver's start timeout.

What an archive provides is what `ctr images import` names from it: an OCI index's `io.containerd.image.name`
annotation, else its `org.opencontainers.image.ref.name` when that is a full reference (containerd keeps both as
written; a bare tag becomes `import-<date>:<tag>`), or a `docker save` manifest's RepoTags, which containerd
normalizes. The kubelet asks containerd's CRI for the normalized reference (`normalized_image`), so an archive that
names its image `my-driver:1.0` provides nothing to a pod of `my-driver:1.0`: the CRI looks for
`docker.io/library/my-driver:1.0`.
"""

from __future__ import annotations

import contextlib
import json
import tarfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kubernetes import client

from dra_conformance.driver.profile import PullPolicy
from dra_conformance.errors import UsageError

# The index annotations that name an image in an OCI archive: containerd's (a full reference) wins, then the OCI one,
# which `ctr images import` takes as a name only when it is a full reference (`skopeo copy ... oci-archive:F:N:T`).
CONTAINERD_IMAGE_NAME = "io.containerd.image.name"
OCI_REF_NAME = "org.opencontainers.image.ref.name"
# What makes an OCI reference name a full reference for containerd's importer, not a bare tag.
REFERENCE_CHARACTERS = frozenset("/:@")
# How an image named without a registry is known to the kubelet and containerd's CRI (Docker Hub's normalization).
DEFAULT_REGISTRY = "docker.io"
DEFAULT_REPOSITORY_PREFIX = "library/"
DEFAULT_TAG = "latest"
# The pull policy that goes to the registry at every container start, whatever the node holds.
ALWAYS = "Always"


def repository(image: str) -> str:
    """The image without its tag or digest (`registry:5000/a/b:1@sha256:...` -> `registry:5000/a/b`)."""
    name = image.split("@", 1)[0]
    return name[: name.rfind(":")] if name.rfind(":") > name.rfind("/") else name


def normalized_image(image: str) -> str:
    """The reference the kubelet asks containerd's CRI for: `busybox` -> `docker.io/library/busybox:latest`.

    A name whose first part is no registry (no `.` or `:`, not localhost) is Docker Hub's; no tag is `latest`; a
    digest wins over a tag (`name:tag@sha256:...` -> `name@sha256:...`).
    """
    name, _, digest = image.partition("@")
    named = repository(name)
    tag = name[len(named) + 1 :]
    first, slash, rest = named.partition("/")
    if not slash or not ("." in first or ":" in first or first == "localhost"):
        first, rest = DEFAULT_REGISTRY, named
    if first == DEFAULT_REGISTRY and "/" not in rest:
        rest = DEFAULT_REPOSITORY_PREFIX + rest
    return f"{first}/{rest}" + (f"@{digest}" if digest else f":{tag or DEFAULT_TAG}")


def pull_policy(container: dict[str, Any]) -> str:
    """The container's pull policy, defaulted as the API server does (Always for `:latest` or no tag)."""
    if container.get("imagePullPolicy"):
        return str(container["imagePullPolicy"])
    image = str(container.get("image", ""))
    untagged = "@" not in image and repository(image) == image
    return ALWAYS if untagged or image.endswith(f":{DEFAULT_TAG}") else str(PullPolicy.IF_NOT_PRESENT)


def _json_member(archive: tarfile.TarFile, name: str) -> Any:
    with contextlib.suppress(KeyError):
        member = archive.extractfile(name)
        if member is not None:
            return json.load(member)
    return None


def archive_images(archive: Path) -> dict[str, str]:
    """The images an archive gives containerd, by the name `ctr images import` gives each, with its manifest digest.

    An OCI index names them in its annotations (containerd's, else a full OCI reference name); a `docker save`
    manifest.json by its RepoTags (no digest known). An archive that names no image is one line: it imports with
    exit code 0 and leaves nothing the kubelet could find.
    """
    try:
        with tarfile.open(archive) as tar:
            index, manifests = _json_member(tar, "index.json"), _json_member(tar, "manifest.json")
    except (OSError, tarfile.TarError, ValueError) as error:
        raise UsageError(f"{archive}: not a readable image archive: {error}") from None
    if not isinstance(index, dict) and not isinstance(manifests, list):
        raise UsageError(f"{archive}: not an image archive (no OCI index.json, no docker manifest.json)")
    names: dict[str, str] = {}
    tags: list[str] = []
    for descriptor in (index.get("manifests") or []) if isinstance(index, dict) else []:
        annotations = descriptor.get("annotations") or {}
        reference = str(annotations.get(OCI_REF_NAME) or "")
        name = annotations.get(CONTAINERD_IMAGE_NAME) or (reference if REFERENCE_CHARACTERS & set(reference) else "")
        if name:
            names[str(name)] = str(descriptor.get("digest", ""))
        elif reference:
            tags.append(reference)
    for entry in manifests if isinstance(manifests, list) else []:
        names.update({normalized_image(str(tag)): "" for tag in entry.get("RepoTags") or []})
    if not names:
        only = f", only the tag {tags[0]!r} (imported as import-<date>:{tags[0]})" if tags else ""
        raise UsageError(
            f"{archive}: no image reference in its index{only} (skopeo copy ... oci-archive:FILE:NAME:TAG names it)"
        )
    return names


def node_images(core: client.CoreV1Api, nodes: tuple[str, ...]) -> set[str]:
    """The names of the images the nodes' container runtimes hold, as their kubelets report them."""
    names: set[str] = set()
    for node in nodes:
        for image in core.read_node(node).status.images or []:
            names.update(image.names or [])
    return names


def check_images(
    containers: Iterable[tuple[str, dict[str, Any]]],
    archives: tuple[Path, ...],
    held: Callable[[], set[str]],
    where: str = "install",
) -> None:
    """Refuse a container whose image the node will not have, in one line naming the image and the object.

    `containers` are (the object's name, a container of it). Refused: an image no archive provides and the node
    does not hold (`held`, asked only then), and a pull at every start (pull policy Always), which would go to a
    registry the local cluster does not have. `where` opens the line (`<profile>: install`).
    """
    provided: dict[str, Path] = {}
    for archive in archives:
        for name, digest in archive_images(archive).items():
            provided[name] = archive
            if digest:
                provided[f"{repository(normalized_image(name))}@{digest}"] = archive
    on_node: set[str] | None = None
    for owner, container in containers:
        image, name = str(container.get("image", "")), f"{owner} container {container.get('name')}"
        if pull_policy(container) == ALWAYS:
            raise UsageError(
                f"{where}: {name} pulls {image} from its registry at every start (imagePullPolicy {ALWAYS}, set or "
                "defaulted), and the local cluster has none: declare install.transform.imagePullPolicy: IfNotPresent"
            )
        reference = normalized_image(image)
        if reference in provided:
            continue
        on_node = held() if on_node is None else on_node
        if reference in on_node:
            continue
        near = [f"{archive.name} names it {n}" for n, archive in provided.items() if normalized_image(n) == reference]
        hint = (
            f" ({near[0]}, which containerd keeps as written while the kubelet asks for {reference}: name it so)"
            if near
            else f" (they provide {', '.join(sorted(provided)) or 'nothing'}; install.transform.images rewrites it)"
        )
        raise UsageError(
            f"{where}: image {image} of {name} is neither in an archive of install.images nor on the node{hint}"
        )
