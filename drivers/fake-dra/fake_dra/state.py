"""Prepared claims, keyed by UID and persisted, so prepare is idempotent and unprepare works after a restart.

During a rolling update two instances of the driver serve one node, and the kubelet may prepare a claim through one
and unprepare it through the other. Shared (`shared=True`), every operation reads the file under an exclusive file
lock and writes it before letting go, so neither instance works from a stale copy.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fake_dra.broken import CHECKPOINT_WRITE_WINDOW

# Release 2 writes the claims inside an envelope that names its format and writer; release 1 wrote the bare map.
# Both releases read both, so a downgrade keeps what the newer release prepared.
ENVELOPE_FORMAT = 2


class PreparedClaims:
    """UID -> what was prepared (namespace, name, devices, CDI IDs); written atomically on every change."""

    def __init__(
        self, path: Path, driver_version: str = "1.0.0", *, shared: bool = False, writes_outside_lock: bool = False
    ) -> None:
        """Load what an earlier run of this driver (maybe another release) left in `path`.

        `shared`: other instances on this node write the file too (a rolling update); read it on every operation.
        `writes_outside_lock`: the CHECKPOINT_WRITTEN_OUTSIDE_LOCK mutant (see `_change_outside_lock`).
        """
        self.path = path
        self.driver_version = driver_version
        self.shared = shared
        self.writes_outside_lock = writes_outside_lock
        self._lock = threading.Lock()
        # Serializes file writes (taken before `_lock`, never while holding it); the versions say which in-memory
        # change the file holds.
        self._write_lock = threading.Lock()
        self._version = self._written = 0
        self._claims: dict[str, dict[str, Any]] = {}
        # The major release that wrote the file (1 for the bare map, or no file).
        self.written_by_major = 1
        self._load()

    def _load(self) -> None:
        loaded = json.loads(self.path.read_text()) if self.path.exists() else {}
        enveloped = isinstance(loaded.get("format"), int)
        self._claims = loaded.get("claims", {}) if enveloped else loaded
        self.written_by_major = int(str(loaded.get("writtenBy", "1")).split(".", 1)[0]) if enveloped else 1

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            if not self.shared:
                yield
                return
            with self.path.with_suffix(".lock").open("a") as lock_file:
                fcntl.flock(lock_file, fcntl.LOCK_EX)  # released when the file closes
                self._load()
                yield

    def get(self, uid: str) -> dict[str, Any] | None:
        """The prepared record of a claim, or None."""
        with self._locked():
            record = self._claims.get(uid)
            return dict(record) if record else None

    def put(self, uid: str, record: dict[str, Any]) -> None:
        """Remember a prepared claim (on disk before this returns)."""
        self._change(lambda claims: claims.__setitem__(uid, record))

    def remove(self, uid: str) -> None:
        """Forget a claim (unprepared; on disk before this returns)."""
        self._change(lambda claims: claims.pop(uid, None))

    def all(self) -> dict[str, dict[str, Any]]:
        """Copies of every prepared record, by UID, sorted."""
        with self._locked():
            return {uid: dict(self._claims[uid]) for uid in sorted(self._claims)}

    def _change(self, apply: Callable[[dict[str, dict[str, Any]]], object]) -> None:
        """Apply one change in memory and return once a file that holds it is written.

        Not shared, the file is written after the in-memory lock is let go, so a concurrent prepare's lookup does
        not wait for another claim's disk write. Changes made while a write is in progress are committed together
        by the next writer, which encodes the map once for all of them (encoding it once per change made 100
        concurrent prepares spend a fifth of their driver time re-encoding the same map).
        """
        if self.writes_outside_lock:
            self._change_outside_lock(apply)
            return
        with self._locked():
            apply(self._claims)
            self._version += 1
            version = self._version
            if self.shared:  # other instances read the file under the file lock held here
                self._replace_file(self._encoded())
                self._written = version
                return
        self._commit(version)

    def _change_outside_lock(self, apply: Callable[[dict[str, dict[str, Any]]], object]) -> None:
        """The CHECKPOINT_WRITTEN_OUTSIDE_LOCK mutant: the change made in memory, then to what the file holds now.

        No lock is held from the read to the write (slow storage widens the window), so concurrent changes overwrite
        each other on disk, and a restart loads a file that lost some of them.
        """
        with self._lock:
            apply(self._claims)
        disk = PreparedClaims(self.path, self.driver_version)
        time.sleep(CHECKPOINT_WRITE_WINDOW)
        apply(disk._claims)
        with tempfile.NamedTemporaryFile("w", dir=self.path.parent, suffix=".partial", delete=False) as partial:
            partial.write(disk._encoded())
        Path(partial.name).replace(self.path)

    def _commit(self, version: int) -> None:
        with self._write_lock:
            if version <= self._written:
                return  # a writer that came first wrote this change with its own
            with self._lock:
                latest, body = self._version, self._encoded()
            self._replace_file(body)
            self._written = latest

    def _encoded(self) -> str:
        body: dict[str, Any] = self._claims
        if int(self.driver_version.split(".", 1)[0]) >= ENVELOPE_FORMAT:
            body = {"format": ENVELOPE_FORMAT, "writtenBy": self.driver_version, "claims": self._claims}
        # Compact: json's C encoder serves only calls without indent.
        return json.dumps(body, sort_keys=True)

    def _replace_file(self, body: str) -> None:
        partial = self.path.with_suffix(".partial")
        partial.write_text(body)
        partial.replace(self.path)
