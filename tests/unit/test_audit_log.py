"""Reading the audit log: a user's requests per second, as bench/driver reports a driver's API request rate."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from dra_conformance.kube.audit_log import requests_per_second

DRIVER = "system:serviceaccount:fake-dra:fake-dra"
START = datetime(2026, 12, 2, 3, 0, 0, tzinfo=UTC).timestamp()


def _event(user: str, offset: float, stage: str = "ResponseComplete") -> str:
    stamp = datetime.fromtimestamp(START + offset, tz=UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    return json.dumps(
        {"stage": stage, "user": {"username": user}, "requestReceivedTimestamp": stamp, "verb": "get"},
        separators=(",", ":"),
    )


def test_requests_are_counted_per_second_of_arrival_for_the_user_alone(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    lines = [
        _event(DRIVER, 0.1),
        _event(DRIVER, 0.2, stage="RequestReceived"),  # the same request's first stage: counted once
        _event(DRIVER, 0.9),
        _event("system:kube-scheduler", 1.5),
        _event(DRIVER, 1.5),
        _event(DRIVER, 2.99),
        _event(DRIVER, 3.5),  # after the window
        _event(DRIVER, -0.5),  # before it
        '{"stage":"ResponseComplete","user":{"username":"' + DRIVER + '"',  # cut short by a crash: passed over
    ]
    log.write_text("\n".join(lines) + "\n")
    assert requests_per_second(log, DRIVER, START, START + 3.0) == [2, 1, 1]


def test_a_window_shorter_than_a_second_is_one_bucket(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(_event(DRIVER, 0.3) + "\n")
    assert requests_per_second(log, DRIVER, START, START + 0.5) == [1]
