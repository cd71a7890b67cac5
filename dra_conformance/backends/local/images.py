"""Container images for the real node, written as OCI image-layout archives that `ctr images import` reads.

The local cluster has no registry. Its real node needs two images: a pause image for pod sandboxes (our own
static pause program, under the name the kubelet and containerd expect) and a small userland for workloads
(Debian's static busybox with the applets the suites use). Each is one uncompressed layer, written by the image
package's writer (dra_conformance.image.oci): deterministic (fixed mtimes and owners), so the same inputs always
give the same image digest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dra_conformance.image import oci
from dra_conformance.kube.builders import PAUSE_IMAGE

# The workload image of kubelet-mode checks; pods must use imagePullPolicy Never or IfNotPresent.
BUSYBOX_IMAGE = "dra-conformance.io/busybox:static"
# Applets linked to /bin/busybox in the workload image: what a check's container command may use.
BUSYBOX_APPLETS = ("sh", "echo", "env", "cat", "ls", "sleep", "test", "true", "false", "grep", "printenv", "chroot")


@dataclass(frozen=True)
class ImageFile:
    """One file of the image's single layer: a regular file read from the host, or a symlink."""

    path: str  # inside the image, without a leading slash
    source: Path | None = None
    link_target: str | None = None
    mode: int = 0o755


@dataclass(frozen=True)
class ImageSpec:
    """What goes into one image."""

    name: str
    files: tuple[ImageFile, ...]
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = field(default=("PATH=/bin",))


def pause_image(pause_binary: Path) -> ImageSpec:
    """The sandbox image: our pause program at /pause."""
    return ImageSpec(PAUSE_IMAGE, (ImageFile("pause", pause_binary),), entrypoint=("/pause",))


def busybox_image(busybox: Path) -> ImageSpec:
    """The workload image: static busybox at /bin/busybox and its applets as symlinks."""
    links = tuple(ImageFile(f"bin/{applet}", link_target="busybox") for applet in BUSYBOX_APPLETS)
    return ImageSpec(BUSYBOX_IMAGE, (ImageFile("bin/busybox", busybox), *links), cmd=("sh",))


def _entry(item: ImageFile) -> oci.Entry:
    if item.link_target is not None:
        return oci.Entry(item.path, "symlink", item.mode, link=item.link_target)
    return oci.Entry(item.path, "file", item.mode, source=item.source)


def write_archive(spec: ImageSpec, target: Path) -> str:
    """Write `spec` as a one-layer OCI image-layout tar at `target` (the image package's writer); return its digest."""
    layer = target.with_name(target.name + ".layer")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        oci.write_layer(oci.with_parents(_entry(item) for item in spec.files), layer, mtime=0)
        config = oci.ImageConfig(entrypoint=spec.entrypoint, cmd=spec.cmd, env=spec.env)
        return oci.write_archive(spec.name, config, [layer], target, created=0)
    finally:
        layer.unlink(missing_ok=True)
