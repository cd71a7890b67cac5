"""The local cluster's record (cluster.json): what is written is what is read, and a missing record reads None."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

from dra_conformance.backends.local.cluster_record import ClusterRecord, record_path
from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.model.driver import DriverEndpoint


def _record() -> ClusterRecord:
    return ClusterRecord(
        nodes=("kwok-node-0", "kwok-node-1"),
        real_nodes=("real-node-0",),
        drivers=(
            DriverEndpoint("gpu.example.com", "kwok-node-0", Path("/state/nodes/kwok-node-0/kubelet")),
            DriverEndpoint(
                "gpu.example.com",
                "real-node-0",
                Path("/var/lib/kubelet"),
                Path("/var/run/cdi"),
                PurePosixPath("/var/lib/kubelet"),
                True,
            ),
        ),
        metrics="fake",
        profile="/profiles/gpu.yaml",
        profile_digest="0123abcd",
        reference_driver_go="/cache/bin/reference_driver_go",
        startup={"render": 0.25, "control_plane": 3.5},
    )


def test_a_written_record_reads_back_the_same(tmp_path: Path) -> None:
    layout = ClusterLayout(tmp_path)
    _record().write(layout)
    assert ClusterRecord.read(layout) == _record()
    assert not list(tmp_path.glob("*.partial")), list(tmp_path.iterdir())


def test_no_record_or_a_torn_one_reads_none(tmp_path: Path) -> None:
    layout = ClusterLayout(tmp_path)
    assert ClusterRecord.read(layout) is None
    record_path(layout).write_text('{"nodes": [')
    assert ClusterRecord.read(layout) is None


def test_a_driver_swap_keeps_nodes_adapter_and_timings(tmp_path: Path) -> None:
    swapped = _record().with_driver((), profile="/profiles/other.yaml", profile_digest="ffff", reference_driver_go="")
    assert (swapped.nodes, swapped.real_nodes, swapped.metrics, swapped.startup) == (
        _record().nodes,
        _record().real_nodes,
        "fake",
        _record().startup,
    ), swapped
    assert (swapped.drivers, swapped.profile, swapped.profile_digest) == ((), "/profiles/other.yaml", "ffff"), swapped
    layout = ClusterLayout(tmp_path)
    swapped.write(layout)
    assert json.loads(record_path(layout).read_text())["metrics"] == "fake"
