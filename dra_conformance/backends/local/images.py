"""Container images for the real node, written as OCI image-layout archives that `ctr images import` reads.

The local cluster has no registry. Its real node needs two images: a pause image for pod sandboxes (our own
static pause program, under the name the kubelet and containerd expect) and a small userland for workloads
(Debian's static busybox with the applets the suites use). Each is one uncompressed layer; the archive is
deterministic (fixed mtimes and owners), so the same inputs always give the same image digest.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_conformance.kube.builders import PAUSE_IMAGE

# The workload image of kubelet-mode checks; pods must use imagePullPolicy Never or IfNotPresent.
BUSYBOX_IMAGE = "dra-conformance.io/busybox:static"
# Applets linked to /bin/busybox in the workload image: what a check's container command may use.
BUSYBOX_APPLETS = ("sh", "echo", "env", "cat", "ls", "sleep", "test", "true", "false", "grep", "printenv", "chroot")

_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_CONFIG = "application/vnd.oci.image.config.v1+json"
_LAYER = "application/vnd.oci.image.layer.v1.tar"


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


def _tar_member(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    archive.addfile(info, io.BytesIO(data))


def _layer(files: Iterable[ImageFile]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as layer:
        directories = sorted({str(Path(f.path).parent) for f in files} - {"."})
        for directory in directories:
            info = tarfile.TarInfo(directory)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            layer.addfile(info)
        for item in sorted(files, key=lambda f: f.path):
            info = tarfile.TarInfo(item.path)
            info.mtime, info.mode = 0, item.mode
            if item.link_target is not None:
                info.type, info.linkname = tarfile.SYMTYPE, item.link_target
                layer.addfile(info)
            elif item.source is not None:
                data = item.source.read_bytes()
                info.size = len(data)
                layer.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _descriptor(media_type: str, blob: bytes, **extra: Any) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": f"sha256:{hashlib.sha256(blob).hexdigest()}", "size": len(blob), **extra}


def write_archive(spec: ImageSpec, target: Path) -> str:
    """Write `spec` as an OCI image-layout tar at `target`; return the manifest digest."""
    layer = _layer(spec.files)
    config: dict[str, Any] = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": list(spec.env)},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"]},
    }
    if spec.entrypoint:
        config["config"]["Entrypoint"] = list(spec.entrypoint)
    if spec.cmd:
        config["config"]["Cmd"] = list(spec.cmd)
    config_blob = json.dumps(config, sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": _MANIFEST,
        "config": _descriptor(_CONFIG, config_blob),
        "layers": [_descriptor(_LAYER, layer)],
    }
    manifest_blob = json.dumps(manifest, sort_keys=True).encode()
    reference = spec.name.rsplit(":", 1)[1]
    manifest_descriptor = _descriptor(
        _MANIFEST,
        manifest_blob,
        annotations={"io.containerd.image.name": spec.name, "org.opencontainers.image.ref.name": reference},
    )
    index = {"schemaVersion": 2, "manifests": [manifest_descriptor]}
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target, "w", format=tarfile.PAX_FORMAT) as archive:
        _tar_member(archive, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        for blob in (layer, config_blob, manifest_blob):
            _tar_member(archive, f"blobs/sha256/{hashlib.sha256(blob).hexdigest()}", blob)
        _tar_member(archive, "index.json", json.dumps(index, sort_keys=True).encode())
    return str(manifest_descriptor["digest"])
