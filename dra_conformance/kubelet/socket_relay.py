"""A driver's kubelet-plugin sockets on a node whose file system is elsewhere, reached through its node agent.

The agent's pod runs `socket-relay` (clusters/local/socket-relay) on its own loopback; the suite reaches it through
a port-forward, names a socket by its path on the node, and from then on talks to that socket. On this machine a
`SocketMirror` stands for the node's kubelet root: each socket found there is a local unix socket at the same
relative path, and each connection to it is relayed. Checks then use the mirror as they would the node's kubelet
root, through `DriverEndpoint` (with `node_kubelet_root` set).
"""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from dra_conformance.errors import BackendError
from dra_conformance.kube import waits
from dra_conformance.kubelet.node_agent import HOST, SCRATCH, NodeAgent
from dra_conformance.model.driver import RELAY_ERRORS, RELAYED_DIRECTORIES

# Any port: it is the agent pod's own loopback, which nothing else uses.
RELAY_PORT = 7607
RELAY_BINARY = SCRATCH / "socket-relay"
RELAY_LOG = SCRATCH / "socket-relay.log"
# A ~2.4 MB static binary through the API server's exec stream: seconds, even on a slow link to the cluster.
UPLOAD_TIMEOUT = 60.0
# The relay prints its line within milliseconds of starting; the rest is one exec round trip per look.
RELAY_READY_TIMEOUT = 15.0
# A port-forward (a websocket through the API server and the kubelet) plus the relay's one-line answer.
CONNECT_TIMEOUT = 15.0
# A unix socket path holds at most 107 bytes (sun_path).
MAX_SOCKET_PATH = 107


def start_relay(agent: NodeAgent, binary: Path, kubelet_root: PurePosixPath) -> None:
    """Copy the relay into the agent's pod and start it for the sockets under the node's kubelet root."""
    agent.upload(binary.read_bytes(), RELAY_BINARY, UPLOAD_TIMEOUT)
    allowed = ",".join(str(kubelet_root / directory) for directory in RELAYED_DIRECTORIES)
    command = f"{RELAY_BINARY} -port {RELAY_PORT} -root {HOST} -allow {shlex.quote(allowed)}"
    # In a subshell, its input and output away from the exec's streams, so it outlives the exec that starts it; the
    # agent's pod going ends it. The agent's image need have no nohup (Debian's busybox has none).
    agent.sh(f"({command} > {RELAY_LOG} 2>&1 < /dev/null &); echo started")
    log = waits.until(
        lambda: agent.sh(f"cat {RELAY_LOG} 2>/dev/null"),
        lambda text: bool(text.strip()),
        timeout=RELAY_READY_TIMEOUT,
        what=f"socket relay in node agent {agent.namespace}/{agent.pod} listening",
    )
    if "listening" not in log:
        raise BackendError(f"socket relay in the node agent on {agent.node} did not start: {log.strip()}")


class SocketMirror:
    """Local unix sockets standing for sockets on a node, each connection relayed through the node's agent."""

    def __init__(self, connect: Callable[[], Any], node_root: PurePosixPath, node: str) -> None:
        """Relay through `connect` (a new connection to the relay each call) the sockets under `node_root`."""
        self.connect, self.node_root, self.node = connect, node_root, node
        # Short, private, and this machine's: socket paths are limited to 107 bytes.
        self.directory = Path(tempfile.mkdtemp(prefix="dra-m-"))
        self._listeners: dict[PurePosixPath, socket.socket] = {}
        self._closed = threading.Event()
        # What the relay could not carry, newest last; also written to RELAY_ERRORS for whoever holds the endpoint.
        self.errors: list[str] = []
        self._errors_lock = threading.Lock()

    def add(self, node_path: PurePosixPath, modified: int | None = None) -> Path:
        """Mirror the node's socket `node_path`; the local socket keeps the node's modification time."""
        local = self._local(node_path)
        if len(str(local).encode()) > MAX_SOCKET_PATH:
            raise BackendError(f"cannot mirror {node_path} of {self.node}: {local} is longer than a socket path")
        local.parent.mkdir(parents=True, exist_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(local))
        listener.listen()
        if modified is not None:
            os.utime(local, (modified, modified))
        self._listeners[node_path] = listener
        threading.Thread(target=self._accept, args=(listener, node_path), daemon=True).start()
        return local

    def sync(self, sockets: dict[PurePosixPath, int]) -> None:
        """Mirror exactly `sockets` (node path -> modification time), as the node has them now.

        A driver restarted since (its DaemonSet pod deleted, a rolling update) names its sockets anew, with its new
        pod's UID: the mirror follows, so that the newest registration socket is the one a client picks.
        """
        for gone in set(self._listeners) - set(sockets):
            self._drop(gone)
        for node_path, modified in sockets.items():
            if node_path in self._listeners:
                os.utime(self._local(node_path), (modified, modified))
            else:
                self.add(node_path, modified)

    def _local(self, node_path: PurePosixPath) -> Path:
        return self.directory / node_path.relative_to(self.node_root)

    def _drop(self, node_path: PurePosixPath) -> None:
        listener = self._listeners.pop(node_path)
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        self._local(node_path).unlink(missing_ok=True)

    def probe(self, node_path: PurePosixPath) -> str | None:
        """Whether the relay carries a connection to `node_path` now: None if it does, else what went wrong."""
        before = len(self.errors)
        try:
            remote = self.connect()
        except Exception as error:  # as in _relay: whatever the port-forward raised
            return f"port-forward to the node agent on {self.node}: {error}"
        with contextlib.closing(remote):
            if self._name_socket(remote, node_path) is not None:
                return None
        return self.errors[-1] if len(self.errors) > before else f"relay on {self.node}: no answer for {node_path}"

    def _failed(self, problem: str) -> None:
        with self._errors_lock:
            self.errors.append(problem)
            with (self.directory / RELAY_ERRORS).open("a") as log:
                log.write(problem.replace("\n", " ") + "\n")

    def close(self) -> None:
        """Stop listening and remove the mirror directory (connections in flight end with it)."""
        self._closed.set()
        for node_path in list(self._listeners):
            self._drop(node_path)
        shutil.rmtree(self.directory, ignore_errors=True)

    def _accept(self, listener: socket.socket, node_path: PurePosixPath) -> None:
        while not self._closed.is_set():
            try:
                local, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(local, node_path), daemon=True).start()

    def _relay(self, local: socket.socket, node_path: PurePosixPath) -> None:
        with local:
            try:
                remote = self.connect()
            except Exception as error:  # the API server's, the kubelet's or the client's: all end this connection
                self._failed(f"port-forward to the node agent on {self.node}: {error}")
                return
            with contextlib.closing(remote):
                early = self._name_socket(remote, node_path)
                if early is None:
                    return
                if early:
                    local.sendall(early)
                pump(local, remote)

    def _name_socket(self, remote: Any, node_path: PurePosixPath) -> bytes | None:
        """Send the relay the socket's path; the bytes after its "ok" line, or None when it refused."""
        remote.settimeout(CONNECT_TIMEOUT)
        remote.sendall(f"{node_path}\n".encode())
        answer = b""
        try:
            while b"\n" not in answer:
                chunk = remote.recv(4096)
                if not chunk:
                    break
                answer += chunk
        except OSError as error:
            self._failed(f"relay on {self.node} for {node_path}: {error}")
            return None
        remote.settimeout(None)
        line, _, rest = answer.partition(b"\n")
        if line != b"ok":
            said = line.decode(errors="replace") or "the connection closed (is the relay running?)"
            self._failed(f"relay on {self.node} for {node_path}: {said}")
            return None
        return rest


def pump(first: Any, second: Any) -> None:
    """Copy bytes both ways between two connected sockets until either side closes."""
    peers = {first: second, second: first}
    while True:
        readable, _, _ = select.select(list(peers), [], [])
        for side in readable:
            try:
                data = side.recv(65536)
            except OSError:
                return
            if not data:
                return
            peers[side].sendall(data)
