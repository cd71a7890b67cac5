"""dra-wire's build takes the kubelet .proto files only from the pinned module, and only if its hash matches.

The build hook (drivers/dra-wire/build_hooks/kubelet_protos.py) is not an installed module; it is loaded from its
file. The module zip comes from the Go module cache or the proxy once per test session; every other case reads a
copy of it from a temporary module cache or a proxy on 127.0.0.1.
"""

from __future__ import annotations

import http.server
import importlib.util
import io
import os
import re
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from dra_conformance import paths

DRA_WIRE = paths.CHECKOUT / "drivers" / "dra-wire"


def _load_hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kubelet_protos", DRA_WIRE / "build_hooks" / "kubelet_protos.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


protos = _load_hook()
PIN = protos.Pin.read(DRA_WIRE / "dra_wire" / "kubelet_pin.py")
CACHED_ZIP = Path("cache") / "download" / "k8s.io" / "kubelet" / "@v" / f"{PIN.version}.zip"


@pytest.fixture(scope="module")
def genuine_zip() -> bytes:
    """The pinned module's zip, as the build gets it on this machine (module cache, else proxy), verified."""
    if paths.installed():
        pytest.skip("runs from a checkout: it loads the build hook from drivers/dra-wire")
    archive, _origin = protos.module_zip(PIN, os.environ)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as copy:
        for name in archive.namelist():
            copy.writestr(name, archive.read(name))
    return buffer.getvalue()


def _tampered(genuine: bytes) -> bytes:
    buffer = io.BytesIO(genuine)
    with zipfile.ZipFile(buffer, "a") as archive:
        archive.writestr(f"{PIN.target}/pkg/apis/dra/v1/extra.go", "package v1\n")
    return buffer.getvalue()


def _module_cache(root: Path, content: bytes) -> dict[str, str]:
    (root / CACHED_ZIP).parent.mkdir(parents=True)
    (root / CACHED_ZIP).write_bytes(content)
    # GOPROXY=off: the cache must suffice, with no network at all.
    return {"GOMODCACHE": str(root), "GOPROXY": "off"}


@pytest.fixture
def proxy() -> Iterator[dict[str, bytes]]:
    """A Go module proxy on 127.0.0.1 serving what the test puts in the dict (URL path -> body)."""
    served: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = served.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write(body or b"not found")

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    served["url"] = f"http://127.0.0.1:{server.server_address[1]}".encode()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_pinned_hash_is_the_go_sum_hash_of_the_module_the_cluster_builds_use() -> None:
    lines = {
        line
        for go_sum in (paths.CHECKOUT / "clusters").rglob("go.sum")
        for line in go_sum.read_text().splitlines()
        if line.startswith(f"{PIN.module} {PIN.version} h1:")
    }
    assert lines == {f"{PIN.module} {PIN.version} {PIN.hash}"}, lines


def test_the_genuine_zip_from_a_module_cache_gives_every_pinned_proto(genuine_zip: bytes, tmp_path: Path) -> None:
    read, origin = protos.read_protos(PIN, _module_cache(tmp_path, genuine_zip))
    assert origin == str(tmp_path / CACHED_ZIP)
    assert sorted(read) == sorted(PIN.protos)
    assert all(b"syntax" in content for content in read.values()), {k: v[:80] for k, v in read.items()}


def test_a_tampered_module_cache_fails_the_build(genuine_zip: bytes, tmp_path: Path) -> None:
    with pytest.raises(protos.ProtoSourceError) as failed:
        protos.read_protos(PIN, _module_cache(tmp_path, _tampered(genuine_zip)))
    assert f"is not {PIN.target}: its hash is h1:" in str(failed.value), failed.value
    assert "\n" not in str(failed.value), failed.value


def test_a_download_is_checked_like_the_cache(genuine_zip: bytes, proxy: dict[str, bytes], tmp_path: Path) -> None:
    path = f"/{PIN.module}/@v/{PIN.version}.zip"
    environ = {"GOMODCACHE": str(tmp_path / "empty"), "GOPROXY": f"{proxy['url'].decode()},direct"}
    proxy[path] = genuine_zip
    read, origin = protos.read_protos(PIN, environ)
    assert origin.endswith(path) and sorted(read) == sorted(PIN.protos), origin
    proxy[path] = _tampered(genuine_zip)
    with pytest.raises(protos.ProtoSourceError, match=re.escape(f"is not {PIN.target}")):
        protos.read_protos(PIN, environ)


def test_an_unreachable_proxy_is_one_line_naming_the_url_and_the_fix(tmp_path: Path) -> None:
    environ = {"GOMODCACHE": str(tmp_path), "GOPROXY": "http://127.0.0.1:9"}  # discard port: nothing listens
    with pytest.raises(protos.ProtoSourceError) as failed:
        protos.read_protos(PIN, environ)
    message = str(failed.value)
    assert f"http://127.0.0.1:9/{PIN.module}/@v/{PIN.version}.zip" in message and "GOPROXY" in message, message
    assert "\n" not in message, message


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("", "https://proxy.golang.org"),
        ("https://mirror.example/go/,direct", "https://mirror.example/go"),
        ("direct|http://127.0.0.1:3000", "http://127.0.0.1:3000"),
        ("off", None),
        ("direct", None),
    ],
)
def test_goproxy_first_http_entry_is_used(setting: str, expected: str | None) -> None:
    if expected is None:
        with pytest.raises(protos.ProtoSourceError, match="names no http"):
            protos.proxy_url({"GOPROXY": setting})
    else:
        assert protos.proxy_url({"GOPROXY": setting}) == expected


def test_module_paths_are_escaped_as_the_proxy_spells_them() -> None:
    assert protos.escape("github.com/BurntSushi/toml") == "github.com/!burnt!sushi/toml"
