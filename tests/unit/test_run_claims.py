"""One run per local cluster: a second run is refused naming the first, waits (--dra-wait), or shares if both ask."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from filelock import FileLock

from dra_conformance.backends.local.run_claims import RunClaims
from dra_conformance.cli import EXIT_USAGE, main
from dra_conformance.errors import UsageError
from dra_conformance.kube import waits

# A helper process starts and a claim's thread notices its end within this (a poll of a local file).
SETTLE = 30.0


@pytest.fixture
def holder() -> Iterator[subprocess.Popen[bytes]]:
    """A live process standing for another run's owner; ended when the test ends."""
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def test_a_second_run_is_refused_in_one_line_naming_the_first(tmp_path: Path, holder: subprocess.Popen[bytes]) -> None:
    claims = RunClaims(tmp_path)
    assert claims.try_claim("first", holder.pid) is None
    with pytest.raises(UsageError) as refused:
        claims.claim("second", os.getpid(), echo=print)
    message = str(refused.value)
    assert f"is in use by run first (pid {holder.pid}, since 20" in message and " UTC)" in message, message
    assert "--dra-wait" in message and "\n" not in message, message
    assert [c.run_id for c in claims.holders()] == ["first"], claims.holders()


def test_processes_of_one_run_share_its_claim(tmp_path: Path, holder: subprocess.Popen[bytes]) -> None:
    claims = RunClaims(tmp_path)
    assert claims.try_claim("run", holder.pid) is None
    assert claims.try_claim("run", os.getpid()) is None, "a worker of the same run was refused"
    assert [c.pid for c in claims.holders()] == [holder.pid], claims.holders()


def test_the_claim_of_a_gone_process_counts_for_nothing(tmp_path: Path, holder: subprocess.Popen[bytes]) -> None:
    claims = RunClaims(tmp_path)
    assert claims.try_claim("crashed", holder.pid) is None
    holder.kill()
    holder.wait()
    assert claims.try_claim("next", os.getpid()) is None, claims.holders()
    assert [c.run_id for c in claims.holders()] == ["next"], claims.holders()


def test_runs_share_only_when_both_ask(tmp_path: Path, holder: subprocess.Popen[bytes]) -> None:
    claims = RunClaims(tmp_path)
    assert claims.try_claim("first", holder.pid, shared=True) is None
    blocking = claims.try_claim("second", os.getpid())
    assert blocking is not None and blocking.run_id == "first", blocking
    assert claims.try_claim("second", os.getpid(), shared=True) is None
    assert sorted(c.run_id for c in claims.holders()) == ["first", "second"], claims.holders()


def test_a_released_claim_lets_the_next_run_in(tmp_path: Path, holder: subprocess.Popen[bytes]) -> None:
    claims = RunClaims(tmp_path)
    assert claims.try_claim("first", holder.pid) is None
    claims.release("first")
    assert claims.try_claim("second", os.getpid()) is None, claims.holders()


def test_a_waiting_run_says_whom_it_waits_for_and_claims_once_the_other_ends(
    tmp_path: Path, holder: subprocess.Popen[bytes]
) -> None:
    claims = RunClaims(tmp_path)
    assert claims.try_claim("first", holder.pid) is None
    lines: list[str] = []
    errors: list[BaseException] = []

    def wait_for_it() -> None:
        try:
            claims.claim("second", os.getpid(), wait=True, echo=lines.append)
        except BaseException as error:  # reported below, in the test's thread
            errors.append(error)

    waiter = threading.Thread(target=wait_for_it, name="waiting-run")
    waiter.start()
    try:
        waits.until(lambda: list(lines), bool, timeout=SETTLE, what="the waiting line", describe=repr)
        assert f"waiting for run first (pid {holder.pid}" in lines[0], lines
        assert waiter.is_alive(), f"did not wait: {errors}"
    finally:
        holder.kill()
        holder.wait()
        waiter.join(SETTLE)
    assert not waiter.is_alive() and not errors, f"alive={waiter.is_alive()} errors={errors}"
    assert [c.run_id for c in claims.holders()] == ["second"], claims.holders()


def test_a_run_on_a_held_state_dir_is_refused_before_anything_starts(
    tmp_path: Path, holder: subprocess.Popen[bytes], pytester: pytest.Pytester
) -> None:
    state = tmp_path / "cluster"
    assert RunClaims(state).try_claim("first", holder.pid) is None
    pytester.makepyfile(test_nothing="def test_nothing(cluster):\n    pass\n")

    result = pytester.runpytest_subprocess("--dra-cluster=local", f"--dra-state-dir={state}", "-p", "no:cacheprovider")

    output = result.stdout.str() + result.stderr.str()
    assert result.ret == 2, f"exit {result.ret}: {output}"
    refusal = [line for line in output.splitlines() if "is in use by run first" in line]
    assert len(refusal) == 1 and f"pid {holder.pid}" in refusal[0], output
    assert sorted(p.name for p in state.iterdir()) == ["runs.json", "runs.lock"], "the cluster was started or joined"


def test_a_state_dir_of_another_user_is_one_line_naming_its_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = tmp_path / "runs.lock"

    def refused(self: FileLock, *args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(lock))

    monkeypatch.setattr(FileLock, "acquire", refused)  # as root, the kernel itself would let this process in
    with pytest.raises(UsageError) as refusal:
        RunClaims(tmp_path).claim("run", os.getpid(), echo=print)
    message = str(refusal.value)
    assert f"is not this user's (uid {os.geteuid()}): cannot open {lock}" in message, message
    assert f"(owned by uid {tmp_path.stat().st_uid})" in message and "\n" not in message, message


def test_cluster_up_on_a_state_dir_of_another_user_exits_2_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = tmp_path / "local.lock"

    def refused(self: FileLock, *args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(lock))

    monkeypatch.setattr(FileLock, "acquire", refused)
    code = main(["cluster", "up", "--state-dir", str(tmp_path / "local"), "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and err == (
        f"dra-conformance: {lock}: Permission denied (running as uid {os.geteuid()}; owned by uid "
        f"{tmp_path.stat().st_uid}): run as its owner, or give this user a directory of its own (--state-dir, "
        "--cache-dir)\n"
    ), f"exit {code}: {err!r}"
