"""The kubelet plugin API bindings are a typed subpackage built with dra-wire from the pinned protos, not copies."""

from __future__ import annotations

import sys
from pathlib import Path

import dra_wire
from dra_wire import kubelet_api


def test_bindings_are_a_typed_subpackage_of_dra_wire() -> None:
    root = kubelet_api.bindings_dir()
    assert root == Path(dra_wire.__file__).parent / "kubeletapi", root
    for dest in kubelet_api.PROTOS:
        module = root / dest.removesuffix(".proto")
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi"):
            assert module.with_name(module.name + suffix).is_file(), f"{dest}: no {module.name}{suffix} in {root}"


def test_load_imports_the_subpackage_without_touching_sys_path() -> None:
    before = list(sys.path)
    api = kubelet_api.load()
    assert sys.path == before
    assert api.dra_v1.__name__ == "dra_wire.kubeletapi.dra.v1.api_pb2", api.dra_v1.__name__
    assert "kubeletapi" not in sys.modules, "the bindings must import each other inside dra_wire"


def test_dra_service_has_the_kubelet_methods() -> None:
    api = kubelet_api.load()
    service = api.dra_v1.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert api.dra_v1.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1"
    assert sorted(m.name for m in service.methods) == ["NodePrepareResources", "NodeUnprepareResources"]
    info_fields = {f.name for f in api.registration.PluginInfo.DESCRIPTOR.fields}
    assert {"type", "name", "endpoint", "supported_versions"} <= info_fields, info_fields


def test_no_proto_file_is_committed() -> None:
    repository = Path(__file__).resolve().parents[2]
    copied = [p for p in repository.rglob("*.proto") if ".tox" not in p.parts]
    assert copied == [], f"upstream .proto files must be fetched at build time, found {copied}"
