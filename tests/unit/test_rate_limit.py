"""bench/driver's diagnosis of a client-side rate limit, recognized from the driver's requests per second."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH_DRIVER = Path(__file__).resolve().parents[2] / "bench" / "bench_driver.py"


def _bench_driver() -> ModuleType:
    if str(BENCH_DRIVER.parent) not in sys.path:
        sys.path.insert(0, str(BENCH_DRIVER.parent))  # its sibling modules (bench_record)
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
