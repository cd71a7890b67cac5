"""The local cluster's listener ports come from below the kernel's ephemeral range, distinct and free."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from dra_conformance.backends.local import control_plane
from dra_conformance.backends.local.control_plane import Ports, free_port, listener_port_range
from dra_conformance.errors import BackendError


def test_listener_ports_lie_below_the_ephemeral_range_that_outgoing_connections_use() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = listener_port_range()
    assert ports.start == control_plane.MIN_LISTENER_PORT and ports.stop <= max(low, ports.start + 1000), ports
    allocated = Ports.allocate()
    chosen = [allocated.etcd_client, allocated.etcd_peer, allocated.apiserver, allocated.controller_manager]
    chosen += [allocated.scheduler, allocated.kwok]
    assert len(set(chosen)) == 6 and all(port in ports for port in chosen), chosen


def test_a_port_something_listens_on_or_already_taken_is_never_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind((control_plane.LOOPBACK, 0))
        busy.listen()
        held = busy.getsockname()[1]
        monkeypatch.setattr(control_plane, "listener_port_range", lambda: range(held, held + 1))
        with pytest.raises(BackendError, match="no free loopback port"):
            free_port()
    monkeypatch.setattr(control_plane, "listener_port_range", lambda: range(held, held + 1))
    assert free_port() == held, "the port is free again once its listener closed"
    with pytest.raises(BackendError, match="no free loopback port"):
        free_port(frozenset({held}))
