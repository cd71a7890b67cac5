"""Python bindings of the kubelet plugin APIs (DRA, DRA health, plugin registration, device plugin v1beta1).

They are generated at build time.

The .proto files come from the pinned `k8s.io/kubelet` Go module (fetched through the Go module proxy) and are
compiled with `grpc_tools.protoc` into the cache; nothing upstream is copied into this repository. The files are
staged under a `kubeletapi` package so their registered names cannot clash with other protobuf users.

    python -m dra_wire.kubelet_api   # generate (or find) the bindings and print where they are
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from filelock import FileLock

from dra_wire.cache import default_cache_dir

KUBELET_MODULE = "k8s.io/kubelet"
# The kubelet plugin API (.proto files) of the pinned Kubernetes release (v1.37.2 ships k8s.io/kubelet v0.37.2).
KUBELET_API_VERSION = "v0.37.2"
PACKAGE = "kubeletapi"
# Staged name (an importable path) -> path under the module's pkg/apis.
PROTOS = {
    "dra/v1/api.proto": "dra/v1/api.proto",
    "dra/v1beta1/api.proto": "dra/v1beta1/api.proto",
    "dra_health/v1/api.proto": "dra-health/v1/api.proto",
    "dra_health/v1alpha1/api.proto": "dra-health/v1alpha1/api.proto",
    "pluginregistration/v1/api.proto": "pluginregistration/v1/api.proto",
    # The device plugin API (proto package `v1beta1`: services v1beta1.Registration and v1beta1.DevicePlugin).
    "deviceplugin/v1beta1/api.proto": "deviceplugin/v1beta1/api.proto",
}


class BindingsError(Exception):
    """The bindings could not be generated: no Go toolchain, the module download failed, or protoc failed."""


def _tools_version() -> str:
    from importlib.metadata import version

    return version("grpcio-tools")


def kubelet_module_dir() -> Path:
    """Download (or find) the pinned k8s.io/kubelet module and return its directory."""
    target = f"{KUBELET_MODULE}@{KUBELET_API_VERSION}"
    try:
        result = subprocess.run(
            ["go", "mod", "download", "-json", target], capture_output=True, text=True, check=False, timeout=600
        )
    except OSError as error:
        raise BindingsError(f"go toolchain not usable ({error}); it fetches {target} for the kubelet APIs") from None
    try:
        info = json.loads(result.stdout)
    except ValueError:
        info = {}
    if result.returncode != 0 or "Dir" not in info:
        reason = info.get("Error") or result.stderr.strip() or f"exit code {result.returncode}"
        raise BindingsError(f"download {target}: {reason}")
    return Path(info["Dir"])


def _complete(root: Path) -> bool:
    """Whether `root` holds the bindings of every API in PROTOS (a cache from before an API was added does not)."""
    return all((root / PACKAGE / dest.replace(".proto", "_pb2_grpc.py")).exists() for dest in PROTOS)


def generate(cache_dir: Path | None = None, source: Path | None = None) -> Path:
    """Return a directory holding the `kubeletapi` package, generating it first if needed.

    `source` is the k8s.io/kubelet module directory (default: fetched with `go mod download`).
    """
    root = (cache_dir or default_cache_dir()) / "proto" / f"kubelet-{KUBELET_API_VERSION}-tools-{_tools_version()}"
    if _complete(root):
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root) + ".lock"):
        if _complete(root):
            return root
        apis = (source or kubelet_module_dir()) / "pkg" / "apis"
        from grpc_tools import protoc

        with tempfile.TemporaryDirectory(prefix="kubeletapi-", dir=root.parent) as scratch:
            staged, out = Path(scratch) / "in", Path(scratch) / "out"
            for dest, src in PROTOS.items():
                (staged / PACKAGE / dest).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(apis / src, staged / PACKAGE / dest)
            out.mkdir()
            names = [f"{PACKAGE}/{dest}" for dest in PROTOS]
            code = protoc.main(["protoc", f"-I{staged}", f"--python_out={out}", f"--grpc_python_out={out}", *names])
            if code != 0:
                raise BindingsError(f"compile kubelet APIs with grpc_tools.protoc: exit code {code}")
            for package in {out / PACKAGE, *((out / name).parent for name in names)}:
                while package != out:
                    (package / "__init__.py").touch()
                    package = package.parent
            shutil.rmtree(root, ignore_errors=True)
            out.rename(root)
    return root


@dataclass(frozen=True)
class KubeletAPI:
    """The generated message (`*_pb2`) and service (`*_pb2_grpc`) modules."""

    dra_v1: ModuleType
    dra_v1_grpc: ModuleType
    dra_v1beta1: ModuleType
    dra_v1beta1_grpc: ModuleType
    health_v1: ModuleType
    health_v1_grpc: ModuleType
    health_v1alpha1: ModuleType
    health_v1alpha1_grpc: ModuleType
    registration: ModuleType
    registration_grpc: ModuleType
    deviceplugin: ModuleType
    deviceplugin_grpc: ModuleType


def load(cache_dir: Path | None = None) -> KubeletAPI:
    """Generate if needed, put the bindings on sys.path, and import them."""
    root = str(generate(cache_dir))
    if root not in sys.path:
        sys.path.append(root)

    def module(dest: str, suffix: str) -> ModuleType:
        return importlib.import_module(f"{PACKAGE}.{dest.removesuffix('.proto').replace('/', '.')}{suffix}")

    names = list(PROTOS)
    modules = [module(dest, suffix) for dest in names for suffix in ("_pb2", "_pb2_grpc")]
    return KubeletAPI(*modules)


if __name__ == "__main__":
    print(generate())
