"""Reading the kube-apiserver audit log (JSON lines), where the backend makes it readable."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any


def matching(audit_log: Path, keep: Callable[[str], bool]) -> Iterator[dict[str, Any]]:
    """Audit events whose raw line `keep` accepts (a cheap pre-filter: most of the log is about other things).

    The log is streamed: a whole run's log can be large. A line cut short (a crash mid-write) says nothing and is
    passed over.
    """
    with audit_log.open(errors="replace") as log:
        for line in log:
            if keep(line):
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue


def events(audit_log: Path, *, containing: str) -> Iterator[dict[str, Any]]:
    """Audit events whose line contains `containing`."""
    return matching(audit_log, lambda line: containing in line)


def status_writes(audit_log: Path, namespace: str, claim: str, user: str, *, since: float | None = None) -> list[str]:
    """Every attempt (allowed or not) by `user` to write the status of a ResourceClaim: "<verb> -> <code>".

    `since`: only those the API server received at or after that time (epoch seconds).
    """
    attempts = []
    for event in events(audit_log, containing=f'"name":"{claim}"'):
        reference = event.get("objectRef") or {}
        if (
            event.get("stage") == "ResponseComplete"
            and reference.get("resource") == "resourceclaims"
            and reference.get("subresource") == "status"
            and reference.get("namespace") == namespace
            and reference.get("name") == claim
            and event.get("verb") in ("update", "patch")
            and event.get("user", {}).get("username") == user
            and (since is None or (received(event) or 0.0) >= since)
        ):
            code = (event.get("responseStatus") or {}).get("code", "?")
            attempts.append(f"{event['verb']} -> {code}")
    return attempts


def received(event: dict[str, Any]) -> float | None:
    """When the API server received the request (epoch seconds), or None where the event does not say."""
    stamp = event.get("requestReceivedTimestamp")
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def requests_per_second(audit_log: Path, user: str, since: float, until: float) -> list[int]:
    """How many requests `user` made in each whole second from `since` to `until` (Unix times), by arrival.

    Each request counts once (its ResponseComplete event); the last bucket is the partial second before `until`.
    """
    buckets = [0] * max(1, math.ceil(until - since))
    for event in events(audit_log, containing=f'"username":"{user}"'):
        if event.get("stage") != "ResponseComplete" or (event.get("user") or {}).get("username") != user:
            continue
        received_at = received(event)
        if received_at is not None and since <= received_at < until:
            buckets[min(len(buckets) - 1, int(received_at - since))] += 1
    return buckets
