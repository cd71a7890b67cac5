"""The owners of a local cluster: live processes only, a reused pid is not its former owner, kept means kept."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_conformance.backends.local.owners import Owner, Owners

# A stand-in run: a process that lives until its stdin closes.
HOLDER = [sys.executable, "-c", "import sys; sys.stdin.read()"]
# Reaping a process we killed: immediate in practice; a bound so a stuck wait fails the test instead of hanging it.
REAP_TIMEOUT = 10.0


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[bytes]]]:
    started = [subprocess.Popen(HOLDER, stdin=subprocess.PIPE) for _ in range(2)]
    yield started
    for holder in started:
        holder.kill()
        holder.wait(REAP_TIMEOUT)


def _end(holder: subprocess.Popen[bytes]) -> None:
    holder.kill()
    holder.wait(REAP_TIMEOUT)


def test_the_cluster_is_abandoned_only_once_every_owner_left_or_died(holders: list[subprocess.Popen[bytes]]) -> None:
    first, second = holders
    owners = Owners().joined(first.pid).joined(second.pid).joined(first.pid)
    assert owners.pids == (first.pid, second.pid), owners
    assert not owners.left(first.pid).live().abandoned, owners
    _end(second)
    assert owners.live().pids == (first.pid,), owners.live()
    assert owners.left(first.pid).live().abandoned, owners.left(first.pid).live()


def test_a_dead_process_never_joins_and_a_reused_pid_is_not_the_former_owner(
    holders: list[subprocess.Popen[bytes]],
) -> None:
    first, _ = holders
    owner = Owner.of(first.pid)
    assert owner is not None and owner.alive(), owner
    impostor = Owner(first.pid, owner.started - 1)  # the same pid, another process's start time
    assert not impostor.alive(), impostor
    assert Owners((impostor,)).live().abandoned
    _end(first)
    assert Owner.of(first.pid) is None and not owner.alive(), owner
    assert Owners().joined(first.pid).abandoned, "a process that is gone cannot hold a cluster"


def test_a_kept_cluster_is_never_abandoned_and_the_record_survives_a_round_trip(
    holders: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    first, _ = holders
    kept = Owners().joined(first.pid).joined(None)
    assert kept.kept and kept.pids == (first.pid,), kept
    assert not kept.left(first.pid).abandoned, "a kept cluster outlives its runs"
    path = tmp_path / "owners.json"
    assert Owners.read(path) is None
    kept.write(path)
    assert Owners.read(path) == kept, path.read_text()
