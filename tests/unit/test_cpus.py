"""The run's default worker count: CPUs from the affinity set and cgroup v2 quotas."""

from __future__ import annotations

import pytest

from dra_conformance.cpus import MAX_DEFAULT_WORKERS, cpus_from, default_workers, quota_cpus


@pytest.mark.parametrize(
    ("cpu_max", "expected"),
    [
        ("max 100000\n", None),
        ("200000 100000\n", 2),
        ("150000 100000", 2),  # a fraction of a CPU counts as one
        ("50000 100000", 1),
        ("", None),
        ("garbage", None),
        ("x 100000", None),
        ("0 100000", None),
    ],
)
def test_quota_cpus_reads_cgroup_v2_cpu_max(cpu_max: str, expected: int | None) -> None:
    assert quota_cpus(cpu_max) == expected, f"cpu.max {cpu_max!r}"


def test_the_tightest_quota_over_the_process_lowers_its_affinity() -> None:
    assert cpus_from(16, []) == 16
    assert cpus_from(16, ["max 100000"]) == 16
    assert cpus_from(16, ["400000 100000", "200000 100000"]) == 2, "a parent's tighter limit applies"
    assert cpus_from(2, ["800000 100000"]) == 2, "a quota above the affinity set adds no CPU"
    assert cpus_from(0, []) == 1


def test_default_workers_are_two_per_cpu_up_to_the_cap() -> None:
    assert [default_workers(cpus) for cpus in (1, 2, 3)] == [2, 4, 6]
    assert default_workers(64) == MAX_DEFAULT_WORKERS
