"""Waiting on a condition under a named deadline, raising `WaitTimeout` with the last observed state."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_exponential

from dra_conformance.errors import WaitTimeout

T = TypeVar("T")

# Poll backoff: start fast so a ready cluster is noticed within tens of milliseconds, cap so a slow
# condition does not flood the API server.
POLL_MIN_INTERVAL = 0.05
POLL_MAX_INTERVAL = 1.0


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
    try:
        done, value = retrying(attempt)
    except RetryError:
        error = last.get("error")
        raise WaitTimeout(
            what,
            timeout,
            last_observed=last.get("observed"),
            last_error=error if isinstance(error, BaseException) else None,
        ) from None
    assert done
    return value  # type: ignore[return-value]
