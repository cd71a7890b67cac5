"""The .proto files of the pinned k8s.io/kubelet module, from the Go module cache or the Go module proxy.

Either way the module zip is checked against the go.sum hash pinned in dra_wire/kubelet_pin.py before anything is
read from it, so a tampered cache or download fails the build. No Go toolchain is needed: the proxy protocol is
plain HTTPS (`<proxy>/<module>/@v/<version>.zip`) and the hash is Go's dirhash of the zip's files.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import runpy
import urllib.error
import urllib.request
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# What `go` uses when GOPROXY is unset.
DEFAULT_PROXY = "https://proxy.golang.org"
# The zip is about 200 KB: a proxy that has not sent it within this long is not going to.
DOWNLOAD_TIMEOUT = 60.0


class ProtoSourceError(Exception):
    """The pinned module could not be had, or what was had is not the pinned module (one line, says what to do)."""


@dataclass(frozen=True)
class Pin:
    """The module the bindings are compiled from (the constants of dra_wire/kubelet_pin.py)."""

    module: str
    version: str
    hash: str
    package: str
    protos: dict[str, str]

    @classmethod
    def read(cls, path: Path) -> Pin:
        """Read the pin from the constants module at `path` (without importing its package)."""
        values = runpy.run_path(str(path))
        return cls(
            values["KUBELET_MODULE"],
            values["KUBELET_API_VERSION"],
            values["KUBELET_MODULE_HASH"],
            values["PACKAGE"],
            dict(values["PROTOS"]),
        )

    @property
    def target(self) -> str:
        """`module@version`, as go.sum, the module cache and error messages name it."""
        return f"{self.module}@{self.version}"


def escape(path: str) -> str:
    """A module path or version as the module cache and the proxy spell it (upper case -> `!` + lower case)."""
    return "".join(f"!{char.lower()}" if char.isupper() else char for char in path)


def module_cache(environ: Mapping[str, str]) -> Path:
    """The Go module cache: $GOMODCACHE, else the first $GOPATH entry's pkg/mod, else ~/go/pkg/mod."""
    if environ.get("GOMODCACHE"):
        return Path(environ["GOMODCACHE"])
    gopath = environ.get("GOPATH", "").split(os.pathsep)[0]
    return (Path(gopath) if gopath else Path.home() / "go") / "pkg" / "mod"


def proxy_url(environ: Mapping[str, str]) -> str:
    """The first http(s) proxy of $GOPROXY (`,` or `|` separated), or the default proxy when it is unset."""
    setting = environ.get("GOPROXY", "").strip()
    if not setting:
        return DEFAULT_PROXY
    for entry in setting.replace("|", ",").split(","):
        if entry.strip().startswith(("https://", "http://")):
            return entry.strip().rstrip("/")
    raise ProtoSourceError(
        f"GOPROXY={setting} names no http(s) proxy; set GOPROXY={DEFAULT_PROXY} (or a mirror's URL) "
        "or fill the Go module cache"
    )


def dirhash(archive: zipfile.ZipFile) -> str:
    """Go's `h1:` hash of a module zip: SHA-256 over the sorted "<sha256 hex>  <name>" lines of its files."""
    summary = hashlib.sha256()
    for name in sorted(archive.namelist()):
        summary.update(f"{hashlib.sha256(archive.read(name)).hexdigest()}  {name}\n".encode())
    return "h1:" + base64.b64encode(summary.digest()).decode()


def _cached_zip(pin: Pin, environ: Mapping[str, str]) -> tuple[bytes, str] | None:
    path = module_cache(environ) / "cache" / "download" / escape(pin.module) / "@v" / f"{escape(pin.version)}.zip"
    return (path.read_bytes(), str(path)) if path.is_file() else None


def _download(pin: Pin, environ: Mapping[str, str]) -> tuple[bytes, str]:
    url = f"{proxy_url(environ)}/{escape(pin.module)}/@v/{escape(pin.version)}.zip"
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response:
            data: bytes = response.read()
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise ProtoSourceError(
            f"fetch {pin.target} from {url}: {reason}; the build of dra-wire needs the Go module proxy "
            "(set GOPROXY to a reachable mirror) or the module in the Go module cache (go mod download "
            f"{pin.target})"
        ) from None
    return data, url


def module_zip(pin: Pin, environ: Mapping[str, str]) -> tuple[zipfile.ZipFile, str]:
    """The pinned module's zip, checked against its hash, and where it came from.

    The Go module cache comes first: it needs no network, and Go keeps there the very zip that go.sum hashes.
    """
    data, origin = _cached_zip(pin, environ) or _download(pin, environ)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise ProtoSourceError(f"{origin} is not a zip file; it cannot be {pin.target}") from None
    found = dirhash(archive)
    if found != pin.hash:
        raise ProtoSourceError(
            f"{origin} is not {pin.target}: its hash is {found}, go.sum pins {pin.hash} (tampered or corrupt; "
            "remove it from the module cache, or check GOPROXY)"
        )
    return archive, origin


def read_protos(pin: Pin, environ: Mapping[str, str]) -> tuple[dict[str, bytes], str]:
    """The pinned .proto files (destination under the package -> content), and where the module came from."""
    archive, origin = module_zip(pin, environ)
    prefix = f"{pin.target}/pkg/apis/"
    protos: dict[str, bytes] = {}
    for dest, source in pin.protos.items():
        try:
            protos[dest] = archive.read(prefix + source)
        except KeyError:
            raise ProtoSourceError(f"{pin.target} has no pkg/apis/{source} (from {origin})") from None
    return protos, origin
