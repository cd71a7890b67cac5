"""Python bindings of the kubelet plugin APIs (DRA, DRA health, plugin registration, device plugin v1beta1).

They are compiled when dra-wire is built (build_hooks/dra_wire_build.py): the .proto files of the pinned
`k8s.io/kubelet` module (dra_wire.kubelet_pin), checked against its go.sum hash, go through grpcio-tools and
mypy-protobuf into the typed subpackage `dra_wire.kubeletapi`. Nothing is generated, downloaded or added to sys.path
at run time, and nothing upstream is copied into this repository.

Code that speaks one API version imports its modules, typed:

    from dra_wire.kubeletapi.pluginregistration.v1 import api_pb2, api_pb2_grpc

`load()` gathers every API in one object, for code that picks a version at run time.

    python -m dra_wire.kubelet_api   # print where the bindings are
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from dra_wire.kubelet_pin import KUBELET_API_VERSION, KUBELET_MODULE, PACKAGE, PROTOS

__all__ = ["KUBELET_API_VERSION", "KUBELET_MODULE", "PROTOS", "BindingsError", "KubeletAPI", "bindings_dir", "load"]

# The bindings' package: dra_wire.kubeletapi.
BINDINGS = f"{__package__}.{PACKAGE}"


class BindingsError(Exception):
    """The bindings are missing: this dra_wire was not installed through its build (which compiles them)."""


@dataclass(frozen=True)
class KubeletAPI:
    """The generated message (`*_pb2`) and service (`*_pb2_grpc`) modules, in the order of PROTOS."""

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


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if not (error.name or "").startswith(BINDINGS):
            raise
        raise BindingsError(
            f"{name} is missing: dra_wire was not installed through its build, which compiles the bindings; "
            "install it with pip (pip install drivers/dra-wire, or pip install -e drivers/dra-wire in a checkout)"
        ) from None


def load() -> KubeletAPI:
    """Every API's modules (imported from dra_wire.kubeletapi)."""
    packages = [f"{BINDINGS}.{dest.removesuffix('/api.proto').replace('/', '.')}" for dest in PROTOS]
    return KubeletAPI(*(_import(f"{package}.api{suffix}") for package in packages for suffix in ("_pb2", "_pb2_grpc")))


def bindings_dir() -> Path:
    """The directory of dra_wire.kubeletapi (BindingsError when it is missing)."""
    return Path(str(_import(BINDINGS).__file__)).parent


if __name__ == "__main__":
    print(bindings_dir())
