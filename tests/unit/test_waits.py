"""Waits give up at their deadline and say what they waited for and what they saw last."""

from __future__ import annotations

import itertools

import pytest

from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.timeouts import Timeouts


def test_wait_returns_the_first_ready_value() -> None:
    counter = itertools.count()
    assert waits.until(lambda: next(counter), lambda n: n >= 2, timeout=5, what="counter at 2") == 2


def test_timeout_names_the_condition_and_last_observation() -> None:
    with pytest.raises(WaitTimeout) as timed_out:
        waits.until(
            lambda: "Pending",
            lambda phase: phase == "Running",
            timeout=0.2,
            what="pod Running",
            describe=lambda phase: f"phase={phase}",
        )
    message = str(timed_out.value)
    assert "pod Running" in message and "phase=Pending" in message and "0.2s" in message, message


def test_listed_errors_are_retried_and_reported_on_timeout() -> None:
    def probe() -> int:
        raise ConnectionError("connection refused")

    with pytest.raises(WaitTimeout) as timed_out:
        waits.until(probe, lambda _: True, timeout=0.2, what="API answers", retry_on=(ConnectionError,))
    assert "ConnectionError: connection refused" in str(timed_out.value), str(timed_out.value)


def test_unlisted_errors_propagate_at_once() -> None:
    def probe() -> int:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        waits.until(probe, lambda _: True, timeout=30, what="never")


def test_timeout_overrides_reject_unknown_names() -> None:
    assert Timeouts().override(delete=5).delete == 5
    with pytest.raises(ValueError, match="unknown timeout"):
        Timeouts().override(delet=5)
