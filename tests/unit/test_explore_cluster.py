"""The cluster world's own logic without a cluster: status writes from watch events, sockets seen in a registry."""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_conformance.explore import cluster
from dra_conformance.explore.cluster import StatusWatch, _pool_gaps, _sockets

DRIVER = "gpu.example.com"


def _claim(version: str, *devices: str, other: tuple[str, ...] = ()) -> dict[str, Any]:
    entries = [{"driver": DRIVER, "pool": "node-a", "device": d} for d in devices]
    entries += [{"driver": "nic.example.com", "pool": "node-a", "device": d} for d in other]
    return {"metadata": {"uid": "u1", "resourceVersion": version}, "status": {"devices": entries}}


def test_writes_of_the_drivers_entries_are_counted_up_to_the_version_a_call_returned_at(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cluster, "WATCH_CATCH_UP_SECONDS", 0.01)
    watch = StatusWatch(client.ApiClient(), "ns", DRIVER)
    watch._record(_claim("1"))  # created: no entry
    watch._record(_claim("2", "gpu-0"))  # the prepare's write
    watch._record(_claim("3", "gpu-0", other=("nic-0",)))  # another driver's entry: not this driver's write
    watch._record(_claim("4"))  # the unprepare removed its entries: no write
    assert watch.mark("u1", "4") == 1, watch.writes("u1")
    watch._record(_claim("5", "gpu-0"))  # written again after the unprepare
    writes = watch.writes("u1")
    assert [(w.version, w.entries) for w in writes] == [("2", ("node-a/gpu-0",)), ("5", ("node-a/gpu-0",))], writes
    assert watch.mark("u1", "9") is None, "a version the watch never delivered has no place among the writes"
    assert watch.mark("u1", None) == 2, "a claim that is gone: every write so far came before"


@pytest.fixture
def registry() -> Iterator[Path]:
    """A registration directory with a short path: a unix socket's path takes 107 bytes at most."""
    root = Path(tempfile.mkdtemp(prefix="explore-"))
    (root / "plugins_registry").mkdir()
    yield root / "plugins_registry"
    shutil.rmtree(root)


def test_a_socket_bound_again_under_its_name_is_told_apart_by_its_inode(registry: Path) -> None:
    path = registry / f"{DRIVER}-reg.sock"
    with socket.socket(socket.AF_UNIX) as first:
        first.bind(str(path))
        before = _sockets(registry)
        (registry / "notes.txt").write_text("not a socket")
        assert list(before) == [path.name] and _sockets(registry) == before, _sockets(registry)
        path.unlink()
        with socket.socket(socket.AF_UNIX) as second:
            second.bind(str(path))
            after = _sockets(registry)
    assert list(after) == [path.name] and after[path.name] != before[path.name], (before, after)


def _slice(pool: str, generation: int, count: int) -> dict[str, Any]:
    return {"spec": {"pool": {"name": pool, "generation": generation, "resourceSliceCount": count}}}


def test_a_pool_gone_or_incomplete_at_its_highest_generation_is_a_gap_a_watcher_sees() -> None:
    pools = {"node-a", "node-b"}
    assert _pool_gaps([_slice("node-a", 2, 1), _slice("node-b", 1, 1)], pools) == []
    # Older generations left over do not matter; a new generation with one of its two slices does.
    assert _pool_gaps([_slice("node-a", 1, 1), _slice("node-a", 2, 1), _slice("node-b", 2, 2)], pools) == [
        "pool node-b generation 2: 1 of 2 slices"
    ]
    assert _pool_gaps([_slice("node-b", 1, 1), _slice("node-c", 1, 1)], pools) == ["pool node-a gone"]
