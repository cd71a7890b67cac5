"""The kubelet plugin API bindings are generated from the pinned k8s.io/kubelet protos, not from copies."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_wire import kubelet_api


@pytest.mark.needs_go
def test_bindings_are_generated_from_the_pinned_module_into_the_cache(tmp_path: Path) -> None:
    root = kubelet_api.generate(cache_dir=tmp_path)
    assert root.parent == tmp_path / "proto", root
    generated = sorted(str(p.relative_to(root)) for p in root.rglob("*_pb2*.py"))
    assert "kubeletapi/dra/v1/api_pb2_grpc.py" in generated, generated
    assert "kubeletapi/pluginregistration/v1/api_pb2.py" in generated, generated
    assert kubelet_api.generate(cache_dir=tmp_path) == root  # second call reuses


@pytest.mark.needs_go
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
