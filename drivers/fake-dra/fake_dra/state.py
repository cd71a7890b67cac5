"""Prepared claims, keyed by UID and persisted, so prepare is idempotent and unprepare works after a restart."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any


class PreparedClaims:
    """UID -> what was prepared (namespace, name, devices, CDI IDs); written atomically on every change."""

    def __init__(self, path: Path) -> None:
        """Load what an earlier run of this driver left in `path`."""
        self.path = path
        self._lock = threading.Lock()
        self._claims: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.exists() else {}

    def get(self, uid: str) -> dict[str, Any] | None:
        """The prepared record of a claim, or None."""
        with self._lock:
            record = self._claims.get(uid)
            return dict(record) if record else None

    def put(self, uid: str, record: dict[str, Any]) -> None:
        """Remember a prepared claim."""
        with self._lock:
            self._claims[uid] = record
            self._save()

    def remove(self, uid: str) -> None:
        """Forget a claim (unprepared)."""
        with self._lock:
            self._claims.pop(uid, None)
            self._save()

    def all(self) -> dict[str, dict[str, Any]]:
        """Copies of every prepared record, by UID, sorted."""
        with self._lock:
            return {uid: dict(self._claims[uid]) for uid in sorted(self._claims)}

    def _save(self) -> None:
        partial = self.path.with_suffix(".partial")
        partial.write_text(json.dumps(self._claims, indent=2, sort_keys=True))
        partial.replace(self.path)
