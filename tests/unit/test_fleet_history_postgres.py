"""The fleet history on a real PostgreSQL server: Debian's package, a throwaway cluster per module, no mock.

The fixture installs the server through the project's own Debian-package installer from
fleet_history_debian_packages.txt (as root), then initdb's a cluster in a fresh directory and starts it with pg_ctl
on a free loopback port; it stops the server and removes the directory afterwards, also when a test failed. A
machine where the package is missing and cannot be installed fails the test with one line saying how to install it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dra_conformance.backends.local import host_packages
from dra_conformance.cli import main
from dra_conformance.errors import UsageError
from dra_conformance.report.fleet.command import EXIT_REGRESSED
from dra_conformance.report.fleet.history import open_history
from dra_conformance.report.fleet.nights import Night, night_of
from dra_conformance.report.fleet.runs import run_of
from dra_conformance.report.fleet.sources import FoundSummary
from tests.unit.fleet_history_summaries import night
from tests.unit.fleet_summaries import write_run

PACKAGES = Path(__file__).with_name("fleet_history_debian_packages.txt")
POSTGRES_LIB = Path("/usr/lib/postgresql")
# initdb of an empty cluster takes a few seconds on a loaded 2-core machine; a minute guards a hung one.
INITDB_TIMEOUT = 60.0
# pg_ctl start -w waits until the server accepts connections (about a second); pg_ctl stop -m fast likewise.
PG_CTL_TIMEOUT = 60
# initdb refuses to run as root: the server runs as the package's own user.
SERVER_USER = "postgres"
DATABASE_USER = "fleet"


def _bin_dir() -> Path:
    """The newest installed server's bin directory (/usr/lib/postgresql/<major>/bin)."""
    versions = sorted(POSTGRES_LIB.glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    if not versions:
        pytest.fail(f"no initdb under {POSTGRES_LIB} after installing {PACKAGES.name}", pytrace=False)
    return versions[-1].parent


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run(command: list[str], timeout: float, user: str | None) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, user=user, check=False)
    if result.returncode != 0:
        pytest.fail(f"{' '.join(command[:2])} failed ({result.returncode}): {result.stderr.strip()}", pytrace=False)


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A URL of a PostgreSQL server of this module's own, on loopback, gone after the module."""
    try:
        host_packages.install(PACKAGES, print, needed_by="the fleet history's PostgreSQL test")
    except UsageError as error:
        pytest.fail(f"{error}: apt-get install -y postgresql", pytrace=False)
    binaries = _bin_dir()
    user = SERVER_USER if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="fleet-history-pg-"))
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    if user is not None:
        owner = pwd.getpwnam(user)
        for path in (root, sockets):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    port = _free_port()
    started = False
    try:
        _run([str(binaries / "initdb"), "-D", str(data), "-U", DATABASE_USER, "--auth=trust"], INITDB_TIMEOUT, user)
        options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1"
        start = [str(binaries / "pg_ctl"), "start", "-D", str(data), "-w", "-t", str(PG_CTL_TIMEOUT)]
        _run([*start, "-l", str(root / "server.log"), "-o", options], PG_CTL_TIMEOUT + 10, user)
        started = True
        yield f"postgresql://{DATABASE_USER}@127.0.0.1:{port}/postgres"
    finally:
        if started:
            stop = [str(binaries / "pg_ctl"), "stop", "-D", str(data), "-m", "fast", "-w", "-t", str(PG_CTL_TIMEOUT)]
            subprocess.run(stop, capture_output=True, timeout=PG_CTL_TIMEOUT + 10, user=user, check=False)
        shutil.rmtree(root, ignore_errors=True)


def _nights(count: int, cluster: str) -> list[Night]:
    newest = datetime(2026, 12, 5, 2, 30, tzinfo=UTC)
    nights = []
    for n in range(count):
        document = night(cluster=cluster, finished_at=newest - timedelta(days=count - 1 - n), ready=None if n else 1.3)
        found = FoundSummary(f"/runs/{n}/summary.json", f"run-{n:02d}", document, 0.0)
        nights.append(night_of(found, run_of(found)))
    return nights


def test_postgres_history_ingests_once_and_reads_back_what_sqlite_does(postgres_url: str, tmp_path: Path) -> None:
    nights = _nights(4, "pg-a")
    shared, local = open_history(postgres_url), open_history(str(tmp_path / "h.sqlite3"))
    try:
        counts = (shared.ingest(nights), shared.ingest(nights), local.ingest(nights))
        from_postgres, from_sqlite = shared.nights(), local.nights()
        recent = shared.nights(nights[-2].finished_at)
    finally:
        shared.close()
        local.close()
    assert counts == (4, 0, 4), counts
    assert from_postgres == from_sqlite == nights, (from_postgres, from_sqlite)
    assert [n.run_id for n in recent] == ["run-02", "run-03"], recent
    assert from_postgres[1].figures.ready_p95 is None, from_postgres[1].figures  # a gap stays a gap (NULL)


def test_cli_with_a_postgres_history_exits_regressed(
    postgres_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = datetime.now(UTC)
    write_run(tmp_path / "in", "20261204-020000-0001", night(cluster="pg-b", finished_at=now - timedelta(days=1)))
    write_run(tmp_path / "in", "20261205-020000-0002", night(cluster="pg-b", finished_at=now, errors=3))
    code = main(["report", "--fleet", str(tmp_path / "in"), "--history", postgres_url, "--since", "14d"])
    captured = capsys.readouterr()
    assert code == EXIT_REGRESSED, (code, captured.err)
    assert "regressed: pg-b gpu.example.com" in captured.err and "error budget used 3" in captured.err, captured.err
    assert f"history {postgres_url}: 2 new run(s) stored" in captured.err, captured.err
