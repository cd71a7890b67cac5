"""The reference driver's rolling-update support: sockets named by its pod UID, and prepared claims shared by instances.

No cluster: the command line is parsed, two `PreparedClaims` share one file as two instances on a node do, and the
REMOVES_OTHER_INSTANCES_SOCKETS mutant is run against real unix sockets in a temporary kubelet root.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest

from fake_dra.__main__ import parse_args, remove_other_instances_sockets
from fake_dra.state import PreparedClaims

DRIVER = "gpu.example.com"


def _args(root: Path, *extra: str) -> list[str]:
    return ["--driver-name", DRIVER, "--node-name", "node-a", f"--kubelet-root={root}", *extra]


def test_an_instance_with_a_pod_uid_names_every_socket_after_it(tmp_path: Path) -> None:
    config = parse_args(_args(tmp_path, "--rolling-update-uid=1234-abcd"))
    names = (config.registration_socket.name, config.dra_socket.name, config.control_socket.name)
    assert names == (f"{DRIVER}-1234-abcd-reg.sock", "dra-1234-abcd.sock", "control-1234-abcd.sock"), names
    plain = parse_args(_args(tmp_path))
    assert (plain.registration_socket.name, plain.dra_socket.name) == (f"{DRIVER}-reg.sock", "dra.sock")


def test_a_claim_one_instance_prepared_is_known_to_and_forgotten_by_the_other(tmp_path: Path) -> None:
    path = tmp_path / "prepared.json"
    old, new = PreparedClaims(path, shared=True), PreparedClaims(path, shared=True)
    old.put("uid-1", {"namespace": "ns", "name": "claim-1", "devices": []})
    assert new.get("uid-1") is not None, f"the new instance does not see what the old one prepared: {new.all()}"
    new.remove("uid-1")
    old.put("uid-2", {"namespace": "ns", "name": "claim-2", "devices": []})
    assert sorted(new.all()) == ["uid-2"], f"claims after one was unprepared by the new instance: {new.all()}"


def test_an_unshared_instance_keeps_its_own_copy(tmp_path: Path) -> None:
    path = tmp_path / "prepared.json"
    first, second = PreparedClaims(path), PreparedClaims(path)
    first.put("uid-1", {"namespace": "ns", "name": "claim-1", "devices": []})
    assert second.get("uid-1") is None, "an unshared instance read the file again after its start"


def test_claims_prepared_at_once_are_all_on_disk_when_each_put_returns(tmp_path: Path) -> None:
    path = tmp_path / "prepared.json"
    claims = PreparedClaims(path)
    on_disk_after_put: dict[str, bool] = {}

    def prepare(index: int) -> None:
        claims.put(f"uid-{index}", {"namespace": "ns", "name": f"claim-{index}", "devices": []})
        # A restart right now must know the claim: the file holds it (or a newer version, which holds it too).
        on_disk_after_put[f"uid-{index}"] = f"uid-{index}" in PreparedClaims(path).all()

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(prepare, range(64)))
    missing = sorted(uid for uid, found in on_disk_after_put.items() if not found)
    assert not missing, f"claims whose put returned before the file held them: {missing}"
    assert sorted(PreparedClaims(path).all()) == sorted(on_disk_after_put), "the file lost claims"


@pytest.fixture
def listening() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


@pytest.fixture
def short_root() -> Iterator[Path]:
    """A kubelet root with a short path: unix socket paths are limited to 107 bytes, pytest's tmp_path is long."""
    root = Path(tempfile.mkdtemp(prefix="ru-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _listen(stack: ExitStack, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    server = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
    server.bind(str(path))


def test_the_broken_instance_removes_the_old_instances_sockets_and_nothing_else(
    short_root: Path, listening: ExitStack
) -> None:
    old = parse_args(_args(short_root, "--rolling-update-uid=old"))
    new = parse_args(_args(short_root, "--rolling-update-uid=new"))
    other_plugin = short_root / "plugins_registry" / "csi.example.com-reg.sock"
    for path in (old.registration_socket, old.dra_socket, new.registration_socket, new.dra_socket, other_plugin):
        _listen(listening, path)

    remove_other_instances_sockets(new)

    left = sorted(p.name for p in short_root.rglob("*.sock"))
    assert left == sorted(["csi.example.com-reg.sock", new.registration_socket.name, new.dra_socket.name]), left
