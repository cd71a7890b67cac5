"""The one percentile every figure of the suite and its benchmarks uses."""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], fraction: float) -> float:
    """The nearest-rank percentile: the smallest sample with at least `fraction` of the samples at or below it.

    Nearest-rank, not interpolated, because every figure is compared with an SLO or an upstream floor: the answer
    is always a latency that was observed, never one between two samples that no request took, and it never
    understates the tail (over fewer than 20 samples, p95 is the slowest). For 1, 2, 3, 4 it gives p50 2 (the
    interpolated median would say 2.5) and p95 4. `fraction` is in [0, 1]; 0 gives the smallest sample.
    Raises ValueError for no samples: callers say what an empty figure means to them.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"percentile fraction {fraction} is not within [0, 1]")
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no samples")
    # Rounded first, so that 0.07 * 100 (7.000000000000001 in binary floating point) is rank 7, not 8.
    rank = math.ceil(round(fraction * len(ordered), 9))
    return ordered[max(rank, 1) - 1]
