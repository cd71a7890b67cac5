"""The node agent's socket relay: the Go program itself (built as CI builds it), and the suite's local mirror of it.

The relay runs here on this machine's file system (its `-root` is `/`), with a unix echo server standing for a
driver's socket; the mirror is tested against a stand-in relay on a socket pair, which is all it connects to.
"""

from __future__ import annotations

import contextlib
import platform
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import cast

import pytest

from dra_conformance.backends.registry import build_socket_relay
from dra_conformance.config import SuiteConfig
from dra_conformance.errors import BackendError, RelayUnavailable
from dra_conformance.kube import waits
from dra_conformance.kubelet.client import DriverClient
from dra_conformance.kubelet.socket_relay import SocketMirror
from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.plugin.driver_fixtures import _socket_relay
from dra_wire.kubelet_api import KubeletAPI

# The relay prints its line as soon as it listens; a build from the warm cache takes a second.
RELAY_START = 10.0
# One local round trip through the relay.
ROUND_TRIP = 5.0
GOARCH = {"x86_64": "amd64", "aarch64": "arm64"}


@contextlib.contextmanager
def echo_server(path: Path) -> Iterator[None]:
    """A unix socket at `path` that echoes what each connection sends."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Bound through its directory: `path` may be longer than a socket path may be (the point of one test).
    with contextlib.chdir(path.parent):
        server.bind(path.name)
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(4096):
                    conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield
    finally:
        server.close()


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """The built relay listening on a free port, allowed to relay sockets under `<tmp>/allowed`: (port, dir)."""
    binary = build_socket_relay(SuiteConfig(), GOARCH[platform.machine()])
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "relay.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(binary), "-port", str(port), "-root", "/", "-allow", str(allowed)], stdout=out, stderr=out
        )
    try:
        waits.until(log.read_text, lambda text: bool(text.strip()), timeout=RELAY_START, what="the relay's first line")
        assert "listening" in log.read_text(), f"relay did not start: {log.read_text()}"
        yield port, allowed
    finally:
        process.kill()
        process.wait()


def _ask(port: int, line: str) -> tuple[bytes, socket.socket]:
    """Connect to the relay, name a socket; its answer line and the open connection."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=ROUND_TRIP)
    conn.sendall(line.encode() + b"\n")
    answer = b""
    while b"\n" not in answer:
        chunk = conn.recv(1)
        if not chunk:
            break
        answer += chunk
    return answer.strip(), conn


@pytest.mark.needs_go
def test_the_relay_carries_bytes_to_an_allowed_socket_even_past_the_socket_path_limit(
    relay: tuple[int, Path],
) -> None:
    port, allowed = relay
    # Longer than the 107 bytes a unix socket path may have, as under a node agent's /host mount it can be.
    deep = allowed / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    target = deep / "driver-reg.sock"
    assert len(str(target)) > 107
    with echo_server(target):
        answer, conn = _ask(port, str(target))
        with conn:
            assert answer == b"ok", f"relay refused {target}: {answer!r}"
            conn.sendall(b"hello through the relay")
            echoed = conn.recv(4096)
    assert echoed == b"hello through the relay", f"echo through the relay: {echoed!r}"


@pytest.mark.needs_go
@pytest.mark.parametrize(
    "naming", ["outside", "relative", "dot-dot"], ids=["outside-allowed", "relative-path", "escape-by-dot-dot"]
)
def test_the_relay_refuses_sockets_outside_its_allowed_directories(relay: tuple[int, Path], naming: str) -> None:
    port, allowed = relay
    outside = Path(tempfile.mkdtemp(prefix="dra-r-")) / "runtime.sock"
    named = {
        "outside": str(outside),
        "relative": "allowed/x.sock",
        "dot-dot": f"{allowed}/../{outside.parent.name}/runtime.sock",
    }[naming]
    try:
        with echo_server(outside):
            answer, conn = _ask(port, named)
            conn.close()
    finally:
        outside.unlink(missing_ok=True)
        outside.parent.rmdir()
    assert answer.startswith(b"error:") and b"is not under" in answer, f"relay answered {answer!r} for {named}"


def _stand_in_relay(answer: bytes, seen: list[bytes]) -> socket.socket:
    """One end of a socket pair whose other end answers the relay's way: reads the named path, says `answer`."""
    suite_end, relay_end = socket.socketpair()

    def serve() -> None:
        with relay_end:
            line = b""
            while not line.endswith(b"\n"):
                line += relay_end.recv(1)
            seen.append(line.strip())
            relay_end.sendall(answer)
            if answer.startswith(b"ok"):
                while data := relay_end.recv(4096):
                    relay_end.sendall(data.upper())

    threading.Thread(target=serve, daemon=True).start()
    return suite_end


def test_the_mirror_names_the_node_path_and_relays_bytes_both_ways_including_those_sent_with_the_answer() -> None:
    seen: list[bytes] = []
    node_root = PurePosixPath("/var/lib/kubelet")
    # A gRPC server speaks first (its SETTINGS frame), so bytes can arrive right behind the relay's "ok".
    mirror = SocketMirror(lambda: _stand_in_relay(b"ok\nEARLY", seen), node_root, "node-a")
    try:
        local = mirror.add(node_root / "plugins_registry" / "drv-reg.sock", modified=1_700_000_000)
        assert local == mirror.directory / "plugins_registry" / "drv-reg.sock" and local.is_socket()
        assert int(local.stat().st_mtime) == 1_700_000_000, "the mirror does not keep the node's modification time"
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(ROUND_TRIP)
            client.connect(str(local))
            assert client.recv(5) == b"EARLY"
            client.sendall(b"ping")
            assert client.recv(4) == b"PING"
    finally:
        mirror.close()
    assert seen == [b"/var/lib/kubelet/plugins_registry/drv-reg.sock"]
    assert mirror.errors == []
    assert not mirror.directory.exists(), "the mirror directory outlived close()"


def test_a_refusal_of_the_relay_closes_the_connection_and_is_kept_for_the_failure_message() -> None:
    node_root = PurePosixPath("/var/lib/kubelet")
    mirror = SocketMirror(lambda: _stand_in_relay(b"error: no such socket\n", []), node_root, "node-a")
    try:
        local = mirror.add(node_root / "plugins" / "drv" / "dra.sock")
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(ROUND_TRIP)
            client.connect(str(local))
            assert client.recv(1) == b"", "the connection stayed open after the relay refused"
        waits.until(lambda: list(mirror.errors), bool, timeout=ROUND_TRIP, what="the refusal recorded")
    finally:
        mirror.close()
    problem = "relay on node-a for /var/lib/kubelet/plugins/drv/dra.sock: error: no such socket"
    assert mirror.errors == [problem]


def test_a_call_the_relay_could_not_carry_is_the_suites_error_with_the_relays_reason_not_the_drivers() -> None:
    node_root = PurePosixPath("/var/lib/kubelet")
    mirror = SocketMirror(lambda: _stand_in_relay(b"error: dial unix: connection refused\n", []), node_root, "node-a")
    try:
        local = mirror.add(node_root / "plugins_registry" / "drv-reg.sock")
        endpoint = DriverEndpoint("drv", "node-a", mirror.directory, node_kubelet_root=node_root)
        assert endpoint.registration_socket == local
        assert endpoint.reachable_on_node(local) == "/var/lib/kubelet/plugins_registry/drv-reg.sock"
        client = DriverClient(cast(KubeletAPI, None), local, endpoint.reachable, endpoint.relay_errors)
        with client, pytest.raises(RelayUnavailable, match=r"relay did not carry it: .*connection refused") as raised:
            client.get_info()
        assert raised.value.obligation == "run.node-agent-relay-carries-the-driver-sockets"
        # gRPC fails the channel's next call without a new connection (so without a new relay problem): still ours.
        with client, pytest.raises(RelayUnavailable):
            client.notify_registration_status()
        assert endpoint.relay_errors() == mirror.errors, "the endpoint does not see what the mirror recorded"
    finally:
        mirror.close()


def test_a_relayed_endpoint_maps_the_sockets_the_driver_names_on_its_node_into_the_mirror() -> None:
    node_root = PurePosixPath("/var/lib/kubelet")
    endpoint = DriverEndpoint("drv", "node-a", Path("/tmp/dra-m-x"), node_kubelet_root=node_root)
    assert endpoint.reachable("/var/lib/kubelet/plugins/drv/dra.sock") == "/tmp/dra-m-x/plugins/drv/dra.sock"
    # Outside the relayed directories the relay reaches nothing: the suite's limit, never the driver's failure.
    for elsewhere in ("/run/drv/dra.sock", "/var/lib/kubelet/pods/x/dra.sock"):
        with pytest.raises(
            RelayUnavailable, match="relay carries only sockets under /var/lib/kubelet/plugins_registry"
        ):
            endpoint.reachable(elsewhere)
    local = DriverEndpoint("drv", "node-a", Path("/var/lib/kubelet"))
    assert local.reachable("/var/lib/kubelet/plugins/drv/dra.sock") == "/var/lib/kubelet/plugins/drv/dra.sock"


def test_the_mirror_follows_the_nodes_sockets_when_a_restarted_driver_names_them_anew() -> None:
    node_root = PurePosixPath("/var/lib/kubelet")
    old, new = (
        node_root / "plugins_registry" / "drv-uid1-reg.sock",
        node_root / "plugins_registry" / "drv-uid2-reg.sock",
    )
    mirror = SocketMirror(lambda: _stand_in_relay(b"ok\n", []), node_root, "node-a")
    try:
        mirror.sync({old: 1_700_000_000})
        endpoint = DriverEndpoint("drv", "node-a", mirror.directory, node_kubelet_root=node_root)
        assert endpoint.registration_socket.name == "drv-uid1-reg.sock"
        mirror.sync({new: 1_700_000_100})
        present = sorted(p.name for p in (mirror.directory / "plugins_registry").iterdir())
        assert present == ["drv-uid2-reg.sock"], f"the mirror kept what the node no longer has: {present}"
        assert endpoint.registration_socket.name == "drv-uid2-reg.sock"
    finally:
        mirror.close()


def test_without_go_the_relay_is_one_reason_naming_what_to_do(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # An empty build cache: a relay cached by an earlier build (with its Go version recorded) is used without Go.
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(BackendError) as raised:
        _socket_relay(SuiteConfig(cache_dir=tmp_path / "cache"), "arm64")
    message = str(raised.value)
    assert "\n" not in message and "arm64" in message and "install Go" in message and "suite's image" in message, (
        message
    )
