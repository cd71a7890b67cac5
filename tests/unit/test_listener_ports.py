"""Listener ports: below the kernel's ephemeral range, free, and reserved machine-wide so no two clusters share one."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dra_conformance.backends.local import control_plane, ports
from dra_conformance.backends.local.network import LOOPBACK
from dra_conformance.backends.local.ports import PortReservation, listener_port_range, reserved
from dra_conformance.errors import BackendError

# Each reserver process prints its ports and holds them until its stdin closes; generous for a loaded 2-core host.
RESERVER_TIMEOUT = 60.0

RESERVER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from dra_conformance.backends.local.ports import PortReservation
    low, high, count = (int(arg) for arg in sys.argv[2:5])
    reservation = PortReservation(Path(sys.argv[1]), range(low, high))
    print(json.dumps([reservation.take() for _ in range(count)]), flush=True)
    sys.stdin.read()
    """
)


def _candidates(size: int) -> range:
    """`size` ports of the listener range starting at a random one nothing listens on now (tests run side by side)."""
    with reserved() as probe:
        start = probe.take()
    span = listener_port_range()
    start = min(start, span.stop - size)
    return range(start, start + size)


def test_listener_ports_lie_below_the_ephemeral_range_that_outgoing_connections_use(tmp_path: Path) -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    span = listener_port_range()
    assert span.start == ports.MIN_LISTENER_PORT and span.stop <= max(low, span.start + 1000), span
    with reserved(tmp_path) as reservation:
        allocated = control_plane.allocate_ports(reservation)
        chosen = list(vars(allocated).values())
        assert len(set(chosen)) == 6 and all(port in span for port in chosen), chosen
        assert set(reservation.ports) == set(chosen), (reservation.ports, chosen)


def test_a_port_something_listens_on_is_never_reserved(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind((LOOPBACK, 0))
        busy.listen()
        held = busy.getsockname()[1]
        with reserved(tmp_path, range(held, held + 1)) as reservation, pytest.raises(BackendError, match="no free"):
            reservation.take()
    with reserved(tmp_path, range(held, held + 1)) as reservation:
        assert reservation.take() == held, "the port is free again once its listener closed"


def test_a_port_another_reservation_holds_is_never_reserved_until_it_is_closed(tmp_path: Path) -> None:
    candidates = _candidates(1)
    first = PortReservation(tmp_path, candidates)
    port = first.take()
    with reserved(tmp_path, candidates) as second, pytest.raises(BackendError, match="held by other clusters"):
        second.take()
    first.close()
    with reserved(tmp_path, candidates) as third:
        assert third.take() == port


def test_a_child_that_inherits_the_locks_holds_the_ports_after_the_parent_closes(tmp_path: Path) -> None:
    # The supervisor's case: the backend reserves, spawns it with the lock files, and closes its own copies.
    candidates = _candidates(2)
    reservation = PortReservation(tmp_path, candidates)
    taken = {reservation.take(), reservation.take()}
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        pass_fds=reservation.descriptors,
    )
    try:
        reservation.close()
        with reserved(tmp_path, candidates) as other, pytest.raises(BackendError, match="no free"):
            other.take()
    finally:
        holder.communicate(timeout=RESERVER_TIMEOUT)  # closes its stdin: it exits, and the locks go with it
    with reserved(tmp_path, candidates) as other:
        assert {other.take(), other.take()} == taken


def test_threads_reserving_at_once_never_share_a_port(tmp_path: Path) -> None:
    threads, each = 16, 5
    candidates = _candidates(2 * threads * each)  # room for ports other programs listen on, and for random probes
    reservations = [PortReservation(tmp_path, candidates) for _ in range(threads)]
    try:
        with ThreadPoolExecutor(threads) as pool:
            results = list(pool.map(lambda r: [r.take() for _ in range(each)], reservations))
        flat = [port for result in results for port in result]
        assert len(flat) == len(set(flat)) == threads * each, sorted(flat)
    finally:
        for reservation in reservations:
            reservation.close()


def test_processes_reserving_at_once_never_share_a_port(tmp_path: Path) -> None:
    # Half of the range is wanted at once, so an overlap in the locking would show as a duplicate.
    processes, each = 8, 5
    candidates = _candidates(2 * processes * each)
    argv = [sys.executable, "-c", RESERVER, str(tmp_path), str(candidates.start), str(candidates.stop), str(each)]
    reservers = [
        subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(processes)
    ]
    try:
        results = []
        for reserver in reservers:
            assert reserver.stdout is not None
            line = reserver.stdout.readline()
            assert line, f"reserver {reserver.pid} printed nothing (exit {reserver.poll()})"
            results.append(json.loads(line))
    finally:
        for reserver in reservers:
            reserver.communicate(timeout=RESERVER_TIMEOUT)
    flat = [port for result in results for port in result]
    assert len(flat) == len(set(flat)) == processes * each, sorted(flat)
