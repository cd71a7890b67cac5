"""The lock one builder of a cache entry holds, and the pid of its holder beside it, so a waiter can name who builds.

Two processes that need the same missing binary (two CI jobs on one runner, a run and `dra-conformance build`)
build it once: the second waits on `<entry>.lock`. Without a word it looks hung for the minutes a cold build
takes; with the holder's pid, which `<entry>.lock.holder` records while the lock is held, it says whom it waits
for, once. The record is written after the lock is taken and removed before it is released, so a waiter that reads
none (the holder has just taken or is just leaving the lock) says "another process" instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from filelock import FileLock, Timeout

HOLDER_SUFFIX = ".holder"


def holder_file(lock: Path) -> Path:
    """Where the pid of `lock`'s holder is recorded while it holds it."""
    return lock.with_name(lock.name + HOLDER_SUFFIX)


def holder_pid(lock: Path) -> int | None:
    """The pid recorded as holding `lock`, if a readable record names one."""
    try:
        return int(holder_file(lock).read_text().strip())
    except (OSError, ValueError):
        return None


def waiting_line(what: str, pid: int | None) -> str:
    """What a builder prints once when another process holds the lock of what it needs."""
    return f"waiting for {what} built by {f'pid {pid}' if pid is not None else 'another process'}"


def _record_holder(lock: Path) -> None:
    record = holder_file(lock)
    partial = record.with_name(f"{record.name}.{os.getpid()}")
    partial.write_text(f"{os.getpid()}\n")
    partial.replace(record)  # whole or absent to a reader


@contextmanager
def hold(lock: Path, what: str, echo: Callable[[str], None]) -> Iterator[None]:
    """Hold `lock` (building `what`); if another process holds it, say so once through `echo`, then wait for it."""
    file_lock = FileLock(str(lock))
    try:
        file_lock.acquire(timeout=0)
    except Timeout:
        echo(waiting_line(what, holder_pid(lock)))
        file_lock.acquire()
    try:
        _record_holder(lock)
        yield
    finally:
        with suppress(OSError):
            holder_file(lock).unlink()
        file_lock.release()
