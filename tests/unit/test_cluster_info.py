"""The controller hands the checked cluster to xdist workers as JSON: nothing may be lost on the way."""

from __future__ import annotations

import json
from pathlib import Path

from dra_conformance.model.cluster import BackendCapability, ClusterInfo
from dra_conformance.model.driver import DriverEndpoint


def test_cluster_info_survives_the_trip_to_a_worker() -> None:
    info = ClusterInfo(
        backend="local",
        kubeconfig=Path("/state/kubeconfig"),
        server="https://127.0.0.1:6443",
        nodes=("kwok-node-0", "kwok-node-1"),
        capabilities=frozenset({BackendCapability.AUDIT_LOG, BackendCapability.KWOK_NODES}),
        pki_dir=Path("/state/pki"),
        audit_log=None,
        log_dir=Path("/state/logs"),
        drivers=(
            DriverEndpoint("gpu.example.com", "kwok-node-0", Path("/tmp/k0"), Path("/state/cdi0")),
            DriverEndpoint("gpu.example.com", "kwok-node-1", Path("/tmp/k1"), None),
        ),
        details={"state_dir": "/state"},
    )
    sent = info.to_json()
    assert json.loads(json.dumps(sent)) == sent, "execnet and JSON carry plain types only"
    assert all(type(name) is str for name in sent["capabilities"]), sent["capabilities"]
    assert ClusterInfo.from_json(json.loads(json.dumps(sent))) == info
