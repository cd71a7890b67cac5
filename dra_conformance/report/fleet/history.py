"""The fleet's nightly history: one table, one row per run of a cluster, in SQLite (a file) or PostgreSQL (shared).

`open_history("path/to/file.sqlite3")` uses the standard library's sqlite3; `open_history("postgresql://...")`
uses psycopg, so many CI runners can write one history. Both hold the same schema (`SCHEMA`) and answer the same
three calls: `ingest`, `nights` and `close`. A run ingested twice counts once: the key is (run id, cluster), and a
second ingest of the same key changes nothing.

Times are stored as ISO 8601 text in UTC with a fixed width, so they sort and compare as text in both databases.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import astuple, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from dra_conformance.report.fleet.nights import Figures, Night
from dra_conformance.report.fleet.sources import FleetInputError

TABLE = "fleet_nights"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
# A shared PostgreSQL server that does not answer within this is down or unreachable; a CI job should say so at
# once rather than hang on it.
CONNECT_TIMEOUT_SECONDS = 10
# SQLite waits this long for another process's write (two CI jobs on one runner sharing the file) before failing.
SQLITE_BUSY_TIMEOUT_SECONDS = 30.0
_FIGURES = tuple(field.name for field in fields(Figures))
_KEYS = ("run_id", "cluster", "driver", "finished_at", "verdict", "canary_gate", "source")
COLUMNS = (*_KEYS, *_FIGURES)
SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} ("
    "run_id TEXT NOT NULL, cluster TEXT NOT NULL, driver TEXT NOT NULL, finished_at TEXT NOT NULL, "
    "verdict TEXT NOT NULL, canary_gate TEXT NOT NULL, source TEXT NOT NULL, "
    + "".join(f"{name} DOUBLE PRECISION, " for name in _FIGURES)
    + "PRIMARY KEY (run_id, cluster))"
)


class HistoryError(FleetInputError):
    """The history cannot be opened, read or written (one line, naming it)."""


class Connection(Protocol):
    """The part of a DB-API connection the history uses (sqlite3's and psycopg's both have it)."""

    def cursor(self) -> Any: ...  # noqa: D102

    def commit(self) -> None: ...  # noqa: D102

    def close(self) -> None: ...  # noqa: D102


class History:
    """A history in one database; `placeholder` is the driver's parameter mark (`?` for sqlite3, `%s` for psycopg)."""

    def __init__(self, connection: Connection, placeholder: str, where: str) -> None:
        """Create the table where it does not exist yet."""
        self.connection, self.placeholder, self.where = connection, placeholder, where
        self._execute([(SCHEMA, ())])

    def ingest(self, nights: Iterable[Night]) -> int:
        """Store each night not stored yet (by run id and cluster); return how many were new."""
        marks = ", ".join([self.placeholder] * len(COLUMNS))
        insert = f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES ({marks}) ON CONFLICT (run_id, cluster) DO NOTHING"
        return self._execute([(insert, row_of(night)) for night in nights])

    def nights(self, since: datetime | None = None) -> list[Night]:
        """Every stored night (finished at or after `since`), oldest first."""
        query = f"SELECT {', '.join(COLUMNS)} FROM {TABLE}"
        parameters: tuple[Any, ...] = ()
        if since is not None:
            query += f" WHERE finished_at >= {self.placeholder}"
            parameters = (stamp(since),)
        query += " ORDER BY finished_at, cluster, run_id"
        try:
            cursor = self.connection.cursor()
            cursor.execute(query, parameters)
            rows = cursor.fetchall()
        except Exception as error:
            raise HistoryError(f"history {self.where}: cannot read: {error}") from None
        return [night_of_row(row) for row in rows]

    def close(self) -> None:
        """Close the connection."""
        self.connection.close()

    def _execute(self, statements: Sequence[tuple[str, tuple[Any, ...]]]) -> int:
        """Run the statements in one transaction; return the rows they changed."""
        changed = 0
        try:
            cursor = self.connection.cursor()
            for statement, parameters in statements:
                cursor.execute(statement, parameters)
                changed += max(cursor.rowcount, 0)
            self.connection.commit()
        except Exception as error:
            raise HistoryError(f"history {self.where}: cannot write: {error}") from None
        return changed


def is_postgres(location: str) -> bool:
    """Whether `--history` names a PostgreSQL server rather than a SQLite file."""
    return location.startswith(POSTGRES_SCHEMES)


def open_history(location: str) -> History:
    """The history at `location`: a postgresql:// URL, else a SQLite file (created, with its directory)."""
    if is_postgres(location):
        return _open_postgres(location)
    path = Path(location)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_SECONDS)
    except (OSError, sqlite3.Error) as error:
        raise HistoryError(f"history {path}: cannot open: {error}") from None
    return History(connection, "?", str(path))


def _open_postgres(url: str) -> History:
    where = redacted(url)
    try:
        # Imported here: only a PostgreSQL history needs the driver.
        import psycopg
    except ImportError as error:
        raise HistoryError(f"history {where}: the PostgreSQL driver psycopg is not installed ({error})") from None
    try:
        connection = psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_SECONDS)
    except psycopg.Error as error:
        raise HistoryError(f"history {where}: cannot connect: {error}") from None
    return History(connection, "%s", where)


def redacted(url: str) -> str:
    """The URL without its password, for messages: 'postgresql://ci:***@db:5432/fleet'."""
    scheme, _, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}://{credentials.split(':', 1)[0]}:***@{host}"


def stamp(moment: datetime) -> str:
    """A time as stored: '2026-12-05T18:41:30+00:00' (UTC, seconds, fixed width)."""
    return moment.astimezone(UTC).isoformat(timespec="seconds")


def row_of(night: Night) -> tuple[Any, ...]:
    """A night as the table's row, in COLUMNS' order."""
    return (
        night.run_id,
        night.cluster,
        night.driver,
        stamp(night.finished_at),
        night.verdict,
        night.canary_gate,
        night.source,
        *astuple(night.figures),
    )


def night_of_row(row: Sequence[Any]) -> Night:
    """A stored row as a night."""
    values = dict(zip(COLUMNS, row, strict=True))
    figures = Figures(**{name: None if values[name] is None else float(values[name]) for name in _FIGURES})
    return Night(
        run_id=str(values["run_id"]),
        cluster=str(values["cluster"]),
        driver=str(values["driver"]),
        finished_at=datetime.fromisoformat(str(values["finished_at"])),
        verdict=str(values["verdict"]),
        canary_gate=str(values["canary_gate"]),
        figures=figures,
        source=str(values["source"]),
    )
