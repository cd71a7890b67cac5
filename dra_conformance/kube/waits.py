"""Waiting on a condition under a named deadline, raising `WaitTimeout` with the last observed state."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_exponential

from dra_conformance.errors import WaitTimeout

T = TypeVar("T")

# Poll backoff: start fast so a ready cluster is noticed within tens of milliseconds, cap so a slow
# condition does not flood the API server.
POLL_MIN_INTERVAL = 0.05
POLL_MAX_INTERVAL = 1.0
# Every wait is logged here at DEBUG when it ends, with `wait_what`, `wait_seconds`, `wait_deadline` and
# `wait_met` on the record: what `--dra-phases-file` (and so `bench/suites --profile-phases`) reads.
LOG = logging.getLogger(__name__)


def until(
    probe: Callable[[], T],
    ready: Callable[[T], bool],
    *,
    timeout: float,
    what: str,
    describe: Callable[[T], object] = repr,
    retry_on: tuple[type[BaseException], ...] = (),
    max_interval: float = POLL_MAX_INTERVAL,
) -> T:
    """Call `probe` until `ready(result)` holds, and return that result.

    `max_interval` caps the poll backoff; lower it where seconds of latency matter (cluster start-up).
    Exceptions listed in `retry_on` count as "not yet" (the last one is reported on timeout); any other
    exception propagates at once. On timeout raise `WaitTimeout` naming `what` and the last observation.
    """
    last: dict[str, object] = {}

    def attempt() -> tuple[bool, T | None]:
        try:
            value = probe()
        except retry_on as error:
            last["error"] = error
            return False, None
        last.pop("error", None)
        last["observed"] = describe(value)
        return ready(value), value

    retrying = Retrying(
        stop=stop_after_delay(timeout),
        wait=wait_exponential(multiplier=POLL_MIN_INTERVAL, min=POLL_MIN_INTERVAL, max=max_interval),
        retry=retry_if_result(lambda outcome: not outcome[0]),
    )
    started = time.monotonic()
    try:
        done, value = retrying(attempt)
    except RetryError:
        _log_wait(what, time.monotonic() - started, timeout, met=False)
        error = last.get("error")
        raise WaitTimeout(
            what,
            timeout,
            last_observed=last.get("observed"),
            last_error=error if isinstance(error, BaseException) else None,
        ) from None
    _log_wait(what, time.monotonic() - started, timeout, met=True)
    assert done
    return value  # type: ignore[return-value]


def _log_wait(what: str, seconds: float, deadline: float, *, met: bool) -> None:
    if LOG.isEnabledFor(logging.DEBUG):
        fields = {"wait_what": what, "wait_seconds": seconds, "wait_deadline": deadline, "wait_met": met}
        ending = "met" if met else "timed out"
        LOG.debug("waited %.3f s of %g s for %s (%s)", seconds, deadline, what, ending, extra=fields)
