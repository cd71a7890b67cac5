"""Deterministic OCI image-layout archives: what `skopeo copy ... oci-archive:` writes and `ctr images import` reads.

Layers are uncompressed tars whose members are sorted by path, with one fixed mtime, numeric owners and no user or
group names, so the same files always give the same layer digest; the config, manifest and index are JSON with
sorted keys, and the archive's own members are written in a fixed order with the same mtime. The same inputs give
the same manifest digest, and the same archive bytes.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal

MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
# Read layer files in chunks: a rootfs layer is hundreds of MiB.
CHUNK = 1 << 20

EntryKind = Literal["file", "dir", "symlink", "hardlink"]


@dataclass(frozen=True)
class Entry:
    """One member of a layer: a regular file (from `source` or `data`), a directory, a symlink or a hard link."""

    path: str  # inside the image, relative (no leading slash)
    kind: EntryKind = "file"
    mode: int = 0o644  # permission bits, with setuid/setgid/sticky
    uid: int = 0
    gid: int = 0
    source: Path | None = None
    data: bytes | None = None
    link: str = ""  # target of a symlink; for a hard link, the path of the member it links to

    def size(self) -> int:
        """Bytes of a regular file's content (0 for every other kind)."""
        if self.kind != "file":
            return 0
        if self.data is not None:
            return len(self.data)
        return self.source.stat().st_size if self.source is not None else 0

    def open(self) -> IO[bytes]:
        """The content of a regular file."""
        if self.data is not None:
            return io.BytesIO(self.data)
        if self.source is None:
            return io.BytesIO(b"")
        return self.source.open("rb")


@dataclass(frozen=True)
class ImageConfig:
    """The runtime part of an image config: what a container of it runs, with which environment and labels."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    labels: Mapping[str, str] = field(default_factory=dict)
    working_dir: str = ""
    user: str = ""


@dataclass(frozen=True)
class Blob:
    """A content-addressed blob: its digest (`sha256:...`) and size."""

    digest: str
    size: int

    @property
    def hex(self) -> str:
        """The digest without its algorithm."""
        return self.digest.removeprefix("sha256:")


def with_parents(entries: Iterable[Entry]) -> list[Entry]:
    """`entries` plus a directory entry (0755, root) for every parent they lack, sorted by path."""
    by_path = {entry.path: entry for entry in entries}
    for path in list(by_path):
        parent = Path(path).parent
        while str(parent) != "." and str(parent) not in by_path:
            by_path[str(parent)] = Entry(str(parent), "dir", 0o755)
            parent = parent.parent
    return [by_path[path] for path in sorted(by_path)]


def _tar_info(entry: Entry, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(entry.path)
    info.mtime, info.mode, info.uid, info.gid = mtime, entry.mode, entry.uid, entry.gid
    info.uname = info.gname = ""
    if entry.kind == "dir":
        info.type = tarfile.DIRTYPE
    elif entry.kind == "symlink":
        info.type, info.linkname = tarfile.SYMTYPE, entry.link
    elif entry.kind == "hardlink":
        info.type, info.linkname = tarfile.LNKTYPE, entry.link
    else:
        info.size = entry.size()
    return info


class _HashingWriter(io.RawIOBase):
    """A write-only file that hashes and counts what passes through to `target`."""

    def __init__(self, target: IO[bytes]) -> None:
        self.target = target
        self.digest = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.size

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.target.write(view)
        self.digest.update(view)
        self.size += len(view)
        return len(view)


def write_layer(entries: Iterable[Entry], target: Path, mtime: int) -> Blob:
    """Write `entries` (sorted here by path) as an uncompressed layer tar at `target`; return its blob."""
    with target.open("wb") as raw:
        sink = _HashingWriter(raw)
        with tarfile.open(fileobj=sink, mode="w", format=tarfile.PAX_FORMAT) as layer:
            for entry in sorted(entries, key=lambda item: item.path):
                info = _tar_info(entry, mtime)
                if entry.kind == "file":
                    with entry.open() as content:
                        layer.addfile(info, content)
                else:
                    layer.addfile(info)
    return Blob(f"sha256:{sink.digest.hexdigest()}", sink.size)


def image_config(config: ImageConfig, layers: Iterable[Blob], created: int) -> dict[str, Any]:
    """The image config document: platform, runtime settings, creation time and the layers' diff ids."""
    runtime: dict[str, Any] = {"Env": list(config.env)}
    if config.entrypoint:
        runtime["Entrypoint"] = list(config.entrypoint)
    if config.cmd:
        runtime["Cmd"] = list(config.cmd)
    if config.labels:
        runtime["Labels"] = dict(sorted(config.labels.items()))
    if config.working_dir:
        runtime["WorkingDir"] = config.working_dir
    if config.user:
        runtime["User"] = config.user
    return {
        "architecture": "amd64",
        "os": "linux",
        "created": rfc3339(created),
        "config": runtime,
        # Uncompressed layers: each diff id is the layer's own digest.
        "rootfs": {"type": "layers", "diff_ids": [layer.digest for layer in layers]},
    }


def rfc3339(epoch: int) -> str:
    """`epoch` as the RFC 3339 UTC time OCI configs carry."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def canonical(document: Mapping[str, Any]) -> bytes:
    """The bytes a JSON document is stored as: sorted keys, no spaces, so equal documents hash equal."""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def descriptor(media_type: str, blob: bytes | Blob, **extra: Any) -> dict[str, Any]:
    """An OCI content descriptor of `blob`."""
    if isinstance(blob, Blob):
        return {"mediaType": media_type, "digest": blob.digest, "size": blob.size, **extra}
    return {"mediaType": media_type, "digest": f"sha256:{hashlib.sha256(blob).hexdigest()}", "size": len(blob), **extra}


@dataclass(frozen=True)
class Documents:
    """The JSON documents of an image: config, manifest and index, as stored, and the manifest's digest."""

    config: bytes
    manifest: bytes
    index: bytes
    digest: str


def documents(name: str, config: ImageConfig, layers: list[Blob], created: int) -> Documents:
    """Config, manifest and index of image `name` (`repository:tag`) made of `layers`, bottom first."""
    config_blob = canonical(image_config(config, layers, created))
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": descriptor(CONFIG_MEDIA_TYPE, config_blob),
        "layers": [descriptor(LAYER_MEDIA_TYPE, layer) for layer in layers],
    }
    if config.labels:
        manifest["annotations"] = dict(sorted(config.labels.items()))
    manifest_blob = canonical(manifest)
    # containerd names the image from the first annotation; skopeo and the OCI layout spec from the second.
    manifest_descriptor = descriptor(
        MANIFEST_MEDIA_TYPE,
        manifest_blob,
        annotations={"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]},
    )
    index = canonical(
        {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [manifest_descriptor]}
    )
    return Documents(config_blob, manifest_blob, index, str(manifest_descriptor["digest"]))


def _archive_member(archive: tarfile.TarFile, name: str, size: int, content: IO[bytes] | None, mtime: int) -> None:
    info = tarfile.TarInfo(name)
    info.mtime, info.mode, info.uname, info.gname = mtime, 0o644 if content is not None else 0o755, "", ""
    if content is None:
        info.type = tarfile.DIRTYPE
    else:
        info.size = size
    archive.addfile(info, content)


def write_archive(name: str, config: ImageConfig, layers: list[Path], target: Path, created: int) -> str:
    """Write image `name` of the uncompressed layer tars `layers` (bottom first) as an OCI archive; return its digest.

    The archive goes to `target` through a temporary sibling renamed into place, so a reader never sees half of it.
    """
    blobs = [_blob_of(layer) for layer in layers]
    docs = documents(name, config, blobs, created)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    try:
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as archive:
            for directory in ("blobs", "blobs/sha256"):
                _archive_member(archive, directory, 0, None, created)
            members: list[tuple[str, int, Path | bytes]] = [
                (f"blobs/sha256/{blob.hex}", blob.size, path) for blob, path in zip(blobs, layers, strict=True)
            ]
            for document in (docs.config, docs.manifest):
                members.append((f"blobs/sha256/{hashlib.sha256(document).hexdigest()}", len(document), document))
            for member, size, content in sorted(dict.fromkeys(members, None)):
                with _opened(content) as stream:
                    _archive_member(archive, member, size, stream, created)
            for member, document in (("index.json", docs.index), ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')):
                _archive_member(archive, member, len(document), io.BytesIO(document), created)
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return docs.digest


def _opened(content: Path | bytes) -> IO[bytes]:
    return content.open("rb") if isinstance(content, Path) else io.BytesIO(content)


def _blob_of(layer: Path) -> Blob:
    digest = hashlib.sha256()
    with layer.open("rb") as stream:
        for chunk in iter(lambda: stream.read(CHUNK), b""):
            digest.update(chunk)
    return Blob(f"sha256:{digest.hexdigest()}", layer.stat().st_size)


def archive_digest(archive: Path) -> str:
    """The manifest digest an OCI archive's index names (its first manifest)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise ValueError(f"{archive}: no index.json")
        index = json.load(member)
    return str(index["manifests"][0]["digest"])


def tree_entries(root: Path, *, skip: Iterable[str] = ()) -> list[Entry]:
    """Every file, directory and symlink under `root` as layer entries, sorted by path.

    Files with several names are stored once, under the name that sorts first; the others are hard links to it.
    Directories in `skip` (relative, e.g. "dev") keep their own entry but nothing under them: container runtimes
    mount their own /dev, /proc and /sys. Sockets, fifos and device nodes elsewhere are left out.
    """
    skipped = set(skip)
    found: list[tuple[str, Path, os.stat_result]] = []
    for directory, subdirs, files in os.walk(root):
        relative_dir = os.path.relpath(directory, root)
        if relative_dir in skipped:
            subdirs.clear()
            continue
        for name in subdirs + files:
            full = Path(directory, name)
            found.append((os.path.normpath(os.path.join(relative_dir, name)), full, os.lstat(full)))
    entries: list[Entry] = []
    first_of_inode: dict[tuple[int, int], str] = {}
    for path, full, status in sorted(found, key=lambda item: item[0]):
        mode, uid, gid = stat.S_IMODE(status.st_mode), status.st_uid, status.st_gid
        if stat.S_ISDIR(status.st_mode):
            entries.append(Entry(path, "dir", mode, uid, gid))
        elif stat.S_ISLNK(status.st_mode):
            entries.append(Entry(path, "symlink", mode, uid, gid, link=os.readlink(full)))
        elif stat.S_ISREG(status.st_mode):
            inode = (status.st_dev, status.st_ino)
            if status.st_nlink > 1 and inode in first_of_inode:
                entries.append(Entry(path, "hardlink", mode, uid, gid, link=first_of_inode[inode]))
                continue
            first_of_inode[inode] = path
            entries.append(Entry(path, "file", mode, uid, gid, source=full))
    return entries
