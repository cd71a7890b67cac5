"""The call log: every gRPC call the driver served, with claims, outcome and latency."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any


class CallLog:
    """Thread-safe record of calls, mirrored to a JSON-lines file; readers get copies sorted by start time."""

    def __init__(self, path: Path, node: str) -> None:
        """Append to `path`; every record names `node`."""
        self.path = path
        self.node = node
        self._calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        # Open for the driver's lifetime, line-buffered: one write per call instead of an open and close as well.
        self._mirror = path.open("a", buffering=1)

    def record(self, method: str, started: float, *, claims: list[str], outcome: str, **extra: Any) -> None:
        """Add one call: `started` is a time.time() value; latency is measured until now."""
        entry = {
            "method": method,
            "node": self.node,
            "claims": claims,
            "outcome": outcome,
            "started": started,
            "latency": time.time() - started,
            **extra,
        }
        with self._lock:
            self._calls.append(entry)
            self._mirror.write(json.dumps(entry) + "\n")

    def calls(self) -> list[dict[str, Any]]:
        """Copies of every record, oldest first."""
        with self._lock:
            return sorted((dict(call) for call in self._calls), key=lambda call: call["started"])
