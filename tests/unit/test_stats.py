"""The one percentile (nearest-rank) that every figure and benchmark uses."""

from __future__ import annotations

import statistics

import pytest

from dra_conformance.model.stats import percentile


def test_four_samples_p50_is_an_observed_sample_not_the_interpolated_median() -> None:
    samples = [4.0, 1.0, 3.0, 2.0]
    # The copies this replaced disagreed here: round(0.5 * 3) picked 3.0, ceil(0.5 * 4) picks 2.0, and
    # statistics.median interpolates 2.5, which no request took.
    assert percentile(samples, 0.5) == 2.0, percentile(samples, 0.5)
    assert statistics.median(samples) == 2.5
    assert percentile(samples, 0.75) == 3.0 and percentile(samples, 0.95) == 4.0 and percentile(samples, 1.0) == 4.0


@pytest.mark.parametrize(
    ("fraction", "expected"), [(0.0, 1.0), (0.01, 1.0), (0.07, 7.0), (0.5, 50.0), (0.95, 95.0), (0.99, 99.0)]
)
def test_hundred_samples_rank_is_the_fraction_of_the_count(fraction: float, expected: float) -> None:
    samples = [float(n) for n in range(100, 0, -1)]
    # 0.07 * 100 is 7.000000000000001 in binary floating point: still rank 7.
    assert percentile(samples, fraction) == expected, (fraction, percentile(samples, fraction))


def test_p95_of_fewer_than_twenty_samples_is_the_slowest() -> None:
    assert percentile(range(1, 20), 0.95) == 19
    assert percentile(range(1, 21), 0.95) == 19 and percentile(range(1, 22), 0.95) == 20


def test_one_sample_is_every_percentile() -> None:
    assert {percentile([3.5], q) for q in (0.0, 0.5, 1.0)} == {3.5}


@pytest.mark.parametrize(("values", "fraction"), [([], 0.5), ([1.0], -0.1), ([1.0], 1.5)])
def test_no_samples_or_a_fraction_outside_0_1_is_refused(values: list[float], fraction: float) -> None:
    with pytest.raises(ValueError, match="percentile") as raised:
        percentile(values, fraction)
    assert str(raised.value), raised
