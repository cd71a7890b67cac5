"""A client-side rate limit on the driver's API requests, as client-go's token bucket puts on most Go drivers.

Off by default. `--api-qps 5 --api-burst 10` plays a driver that kept client-go's defaults (k8s.io/client-go
rest/config.go: DefaultQPS 5, DefaultBurst 10), so that a benchmark can show what such a limit does to concurrent
prepares and that its diagnosis recognizes it.
"""

from __future__ import annotations

import threading
import time


class TokenBucket:
    """`burst` requests at once, then `qps` per second; `admit` blocks until the caller's request may go."""

    def __init__(self, qps: float, burst: int) -> None:
        """A full bucket of `burst` tokens, refilled at `qps` per second."""
        if qps <= 0 or burst < 1:
            raise ValueError(f"a rate limit needs qps > 0 and burst >= 1, got qps={qps} burst={burst}")
        self.qps, self.burst = qps, burst
        self._tokens = float(burst)
        self._updated = time.monotonic()
        self._lock = threading.Lock()

    def reserve(self, now: float) -> float:
        """Take a token at time `now` (monotonic seconds); how long the caller must wait before its request."""
        with self._lock:
            self._tokens = min(float(self.burst), self._tokens + (now - self._updated) * self.qps)
            self._updated = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def admit(self) -> None:
        """Block until one more request is within the rate (the token is taken at once, so waiters queue fairly)."""
        delay = self.reserve(time.monotonic())
        if delay > 0:
            time.sleep(delay)  # the limiter's purpose is to delay the request: this wait is what it models
