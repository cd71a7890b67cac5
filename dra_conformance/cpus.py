"""How many CPUs this process may use, and the run's default number of pytest-xdist workers from it."""

from __future__ import annotations

import math
import os
from pathlib import Path

# cgroup v2: the unified hierarchy's mount, and this process's place in it ("0::/<path>").
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")
# Most checks wait on the cluster (a pod to start, a controller to act, the next metrics sample), so a CPU can
# carry two workers: on 2 cores, 4 workers ran the default suites in 45 s against 58 s with 2, and 6 workers in
# 48.5 s (each worker's start and the cluster's own processes take the rest).
WORKERS_PER_CPU = 2
# No more workers than this by default, however many CPUs: each worker's start costs about a CPU-second, and the
# default run has about 200 checks. Measured only on 2 cores, where 6 workers were already slower than 4.
MAX_DEFAULT_WORKERS = 8


def quota_cpus(cpu_max: str) -> int | None:
    """The CPUs a cgroup v2 `cpu.max` ("<quota> <period>" in microseconds, or "max <period>") allows; None: no limit.

    A fraction of a CPU counts as one.
    """
    fields = cpu_max.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return max(math.ceil(quota / period), 1) if quota > 0 and period > 0 else None


def cpus_from(affinity: int, cpu_max: list[str]) -> int:
    """The CPUs a process may use: its affinity set, lowered by the tightest cgroup v2 quota over it.

    A container's CPU limit is such a quota, while its affinity still lists every CPU of the node. `cpu_max` holds
    the `cpu.max` files from the process's own cgroup up to the root: a parent's limit applies to its children.
    """
    limits = [cpus for cpus in map(quota_cpus, cpu_max) if cpus is not None]
    return min([max(affinity, 1), *limits])


def cgroup_cpu_max() -> list[str]:
    """The `cpu.max` files this process is under, its own cgroup's first (none on cgroup v1)."""
    try:
        lines = PROC_SELF_CGROUP.read_text().splitlines()
    except OSError:
        return []
    path = next((line[len("0::") :] for line in lines if line.startswith("0::")), None)
    if path is None:
        return []
    found = []
    directory = CGROUP_ROOT / path.strip().lstrip("/")
    while directory.is_relative_to(CGROUP_ROOT):
        try:
            found.append((directory / "cpu.max").read_text())
        except OSError:
            pass  # the root cgroup has no cpu.max; a cgroup namespace may hide the rest of the path
        if directory == CGROUP_ROOT:
            break
        directory = directory.parent
    return found


def available_cpus() -> int:
    """The CPUs this process may use (see `cpus_from`), read from the kernel."""
    return cpus_from(len(os.sched_getaffinity(0)), cgroup_cpu_max())


def default_workers(cpus: int) -> int:
    """The run's pytest-xdist workers when `-n` is not given: two per CPU, at most MAX_DEFAULT_WORKERS."""
    return min(WORKERS_PER_CPU * max(cpus, 1), MAX_DEFAULT_WORKERS)
