"""A builder waiting on another's cache entry says once whom it waits for: "waiting for <component> built by pid N".

The holder is a real second process holding the entry's lock; the waiter runs in a thread of this one, so the test
sees its line while it still waits, and lets it go by ending the holder.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from dra_conformance.backends.local import build_lock
from dra_conformance.backends.local.build import BinaryBuilder, Component

# Guards against a hang only: each wait below ends as soon as the other side acts (a line, a release).
WAIT = 60.0

HOLDER = """
import sys
from pathlib import Path
from dra_conformance.backends.local import build_lock

with build_lock.hold(Path(sys.argv[1]), "tool v1", print):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes our stdin
"""


@contextmanager
def _held_by_another_process(lock: Path) -> Iterator[subprocess.Popen[str]]:
    """A second process holding `lock` (as a builder does) until the block ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n", "the holder never took the lock"
        yield holder
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=WAIT)


class Waiter:
    """Runs `wait` in a thread; records what it echoes, and whether it got through."""

    def __init__(self, wait: Callable[[Callable[[str], None]], object]) -> None:
        """Start `wait(echo)` in a thread."""
        self.lines: list[str] = []
        self.said = threading.Event()
        self.result: object = None
        self.thread = threading.Thread(target=self._run, args=(wait,), daemon=True)
        self.thread.start()

    def _run(self, wait: Callable[[Callable[[str], None]], object]) -> None:
        self.result = wait(self._echo)

    def _echo(self, line: str) -> None:
        self.lines.append(line)
        self.said.set()

    def done(self) -> bool:
        """Whether it got through (within WAIT once let go)."""
        self.thread.join(timeout=WAIT)
        return not self.thread.is_alive()


def test_a_waiter_names_the_pid_of_the_process_that_builds_and_goes_on_once_it_is_done(tmp_path: Path) -> None:
    lock = tmp_path / "tool-v1-0123456789ab.lock"
    got_through = threading.Event()

    def wait(echo: Callable[[str], None]) -> None:
        with build_lock.hold(lock, "tool v1", echo):
            got_through.set()

    with _held_by_another_process(lock) as holder:
        assert build_lock.holder_pid(lock) == holder.pid
        waiter = Waiter(wait)
        assert waiter.said.wait(WAIT), "the waiter said nothing"
        assert waiter.lines == [f"waiting for tool v1 built by pid {holder.pid}"]
        assert not got_through.is_set(), "the waiter took a lock another process holds"
    assert waiter.done() and got_through.is_set()
    assert len(waiter.lines) == 1, f"said more than once: {waiter.lines}"
    assert not build_lock.holder_file(lock).exists(), "the record outlived the lock"


def test_the_holder_records_its_own_pid_only_while_it_holds_the_lock(tmp_path: Path) -> None:
    lock = tmp_path / "entry.lock"
    lines: list[str] = []
    with build_lock.hold(lock, "tool v1", lines.append):
        assert build_lock.holder_file(lock).read_text() == f"{os.getpid()}\n"
    assert not build_lock.holder_file(lock).exists()
    assert lines == [], "a free lock is taken without a word"


@pytest.mark.parametrize(
    ("pid", "line"),
    [(4242, "waiting for kube v1.37.2 built by pid 4242"), (None, "waiting for kube v1.37.2 built by another process")],
)
def test_the_waiting_line_names_the_holder_or_says_it_is_unknown(pid: int | None, line: str) -> None:
    assert build_lock.waiting_line("kube v1.37.2", pid) == line


@pytest.mark.needs_go
def test_a_builder_waiting_on_another_process_says_so_once_then_builds(tmp_path: Path) -> None:
    """BinaryBuilder.ensure: the entry's lock held by another process; once let go (without a binary), it builds."""
    module = tmp_path / "assets" / "tool"
    module.mkdir(parents=True)
    (module / "go.mod").write_text("module example.com/tool\n\ngo 1.22\n")
    (module / "main.go").write_text("package main\n\nfunc main() {}\n")
    builder = BinaryBuilder(tmp_path / "assets", tmp_path / "cache", timeout=300, echo=lambda _m: None)
    component = Component("tool", "tool", ".", "v1")
    entry = builder.path(component).parent
    entry.mkdir(parents=True)

    def ensure(echo: Callable[[str], None]) -> Path:
        return BinaryBuilder(tmp_path / "assets", tmp_path / "cache", timeout=300, echo=echo).ensure(component)

    with _held_by_another_process(Path(f"{entry}.lock")) as holder:
        waiter = Waiter(ensure)
        assert waiter.said.wait(WAIT), "the builder said nothing while it waited"
        assert waiter.lines == [f"waiting for tool v1 built by pid {holder.pid}"], waiter.lines
    assert waiter.done(), "the builder never got the lock"
    assert waiter.result == builder.path(component) and builder.path(component).is_file()
    assert waiter.lines[1].startswith("building tool v1: "), waiter.lines
