"""A client-side rate limit: the reference driver's optional one, and bench/driver's diagnosis of one.

The driver's limit is a token bucket, as client-go's; the bench recognizes one from the requests per second.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from fake_dra.rate_limit import TokenBucket

BENCH_DRIVER = Path(__file__).resolve().parents[2] / "bench" / "bench_driver.py"


def test_a_burst_goes_at_once_then_requests_wait_one_qps_interval_each() -> None:
    bucket = TokenBucket(qps=5, burst=2)
    now = bucket._updated
    waits = [bucket.reserve(now) for _ in range(4)]
    assert waits == pytest.approx([0.0, 0.0, 0.2, 0.4]), waits


def test_tokens_come_back_at_the_rate_up_to_the_burst() -> None:
    bucket = TokenBucket(qps=10, burst=3)
    now = bucket._updated
    assert [bucket.reserve(now) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve(now + 10.0) == 0.0, "ten idle seconds refill the bucket, but only to its burst"
    assert [bucket.reserve(now + 10.0) for _ in range(3)] == pytest.approx([0.0, 0.0, 0.1])


def test_a_limit_needs_a_positive_rate_and_burst() -> None:
    with pytest.raises(ValueError, match="qps > 0 and burst >= 1"):
        TokenBucket(qps=0, burst=10)


def _bench_driver() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_driver", BENCH_DRIVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_driver", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("requests", "p99", "floor", "expected"),
    [
        ([12, 5, 5, 5, 5, 5, 5, 3], 30.0, 0.8, "THROTTLED: the driver's API requests ran flat at ~5/s for 6 s"),
        ([12, 5, 5, 5, 5, 5, 5, 3], 1.0, 0.8, "request rate flat at ~5/s, but prepares kept within 2x"),
        ([40, 90, 150, 60, 20], 30.0, 0.8, "no sign of a client-side rate limit: 60-150 requests per second"),
        ([192, 8], 1.0, 0.8, "no sign of a client-side rate limit: 200 requests within 2 s"),
    ],
    ids=["flat-and-slow", "flat-but-fast", "varying", "too-short"],
)
def test_throttling_is_diagnosed_only_from_a_flat_rate_with_slow_prepares(
    requests: list[int], p99: float, floor: float, expected: str
) -> None:
    diagnosis = _bench_driver().throttling_diagnosis(requests, p99, floor)
    assert diagnosis.startswith(expected), diagnosis
