"""Loopback ports reserved machine-wide, so that clusters started at the same moment never pick the same one.

A port is ours while we hold an exclusive flock on its lock file in one directory every cluster on the machine
uses (`machine_lock_dir`). The backend takes the locks before it renders the flags, hands the open files to the
supervisor (inherited descriptors share the lock) and closes its own copies: the locks then live exactly as long as
the supervisor, which exits only after every component it started has stopped. Two processes cannot hold one flock,
so no two live clusters hold one port, whatever the timing; a crashed supervisor releases its locks with its
process, so nothing stale is left to clean. The bind probe beside the lock keeps out ports that other programs
(not clusters) listen on.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

from dra_conformance.backends.local.network import LOOPBACK
from dra_conformance.errors import BackendError

# Listener ports (see listener_port_range): Linux's default ephemeral range starts at 32768; below 20000 sit
# many well-known services; 200 random probes find a free port unless thousands are in use.
DEFAULT_EPHEMERAL_LOW = 32768
MIN_LISTENER_PORT = 20000
MIN_RANGE_SIZE = 1000
PORT_PROBES = 200
# Sticky and writable by all, as /tmp is: clusters of different users on one machine share the reservations.
LOCK_DIR_MODE = 0o1777


def machine_lock_dir() -> Path:
    """The directory of the port lock files, one for the whole machine (not per user, not per checkout)."""
    return Path(tempfile.gettempdir()) / "dra-conformance-ports"


def listener_port_range() -> range:
    """Ports for our listeners: from MIN_LISTENER_PORT up to the kernel's ephemeral range.

    A port the kernel hands out with bind(0) is an ephemeral one, and until the component binds it, any outgoing
    connection on the machine may take it as its source port: in CI a controller-manager failed with "bind: address
    already in use" that way while the tests around it made thousands of connections. Below the ephemeral range
    only listeners compete.
    """
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = DEFAULT_EPHEMERAL_LOW
    # A machine whose ephemeral range starts low still gets a range (where only the probe protects it).
    return range(MIN_LISTENER_PORT, max(low, MIN_LISTENER_PORT + MIN_RANGE_SIZE))


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def _open_lock_file(path: Path) -> int:
    """Open (creating if needed) a lock file; never with O_CREAT on another user's file (fs.protected_regular)."""
    while True:
        with contextlib.suppress(FileNotFoundError):
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        with contextlib.suppress(FileExistsError):
            return os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)


class PortReservation:
    """Ports held by this process (and whoever inherits `descriptors`) until `close`."""

    def __init__(self, lock_dir: Path | None = None, candidates: range | None = None) -> None:
        """Reserve among `candidates` (default: listener_port_range) in `lock_dir` (default: machine_lock_dir)."""
        self.lock_dir = lock_dir or machine_lock_dir()
        self.candidates = candidates or listener_port_range()
        self._held: dict[int, int] = {}  # port -> open lock file

    def _lock_dir_ready(self) -> Path:
        if not self.lock_dir.is_dir():
            with contextlib.suppress(FileExistsError):
                self.lock_dir.mkdir(parents=True)
                self.lock_dir.chmod(LOCK_DIR_MODE)
        return self.lock_dir

    def _try_hold(self, port: int) -> bool:
        fd = _open_lock_file(self._lock_dir_ready() / f"{port}.lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False
            raise
        if not _bindable(port):  # another program listens there: not for us, lock or no lock
            os.close(fd)
            return False
        self._held[port] = fd
        return True

    def take(self) -> int:
        """Reserve one more port: nothing listens on it and no other live cluster holds it."""
        ports = self.candidates
        for _ in range(PORT_PROBES):
            port = secrets.choice(ports)
            if port in self._held:
                continue
            if self._try_hold(port):
                return port
        raise BackendError(
            f"no free loopback port found in {PORT_PROBES} tries in {ports.start}-{ports.stop - 1} "
            f"(held by other clusters: see {self.lock_dir})"
        )

    @property
    def ports(self) -> tuple[int, ...]:
        """The ports held, in the order they were taken."""
        return tuple(self._held)

    @property
    def descriptors(self) -> tuple[int, ...]:
        """The open lock files: a child that inherits them (`pass_fds`) holds the ports after `close`."""
        return tuple(self._held.values())

    def close(self) -> None:
        """Drop this process's hold (a child that inherited the descriptors keeps the locks)."""
        for fd in self._held.values():
            os.close(fd)
        self._held.clear()


@contextlib.contextmanager
def reserved(lock_dir: Path | None = None, candidates: range | None = None) -> Iterator[PortReservation]:
    """A reservation closed on exit, also on failure (its ports are free again unless a child inherited them)."""
    reservation = PortReservation(lock_dir, candidates)
    try:
        yield reservation
    finally:
        reservation.close()


def free_port() -> int:
    """A port free right now (nothing listens, no cluster holds it), not held for the caller.

    For a tool that picks its own ports from what it is told (the benchmark's kwokctl): it is not race-free.
    """
    with reserved() as reservation:
        return reservation.take()
