#!/usr/bin/env python3
"""`dra-conformance slices check` on the reference driver's partitionable pools: combinations tried, and seconds.

    bench/slices_check [--max-devices N ...] [--json [PATH]]

For each pool (the gpu-partitions pools the reference driver publishes, drivers/fake-dra-go/testdata) and each
bound, one line: combinations tried, allocations asked of the pinned structured allocator, the allocator's own
seconds and the whole check's, and the findings (none on the correct pools, two under
partitions-oversubscribe-counters). The allocator program is built first (cached), outside the timing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import bench_record
from bench_record import Figure, higher, lower

from dra_conformance.backends.registry import build_slice_allocator
from dra_conformance.config import SuiteConfig
from dra_conformance.driver import slice_check

TESTDATA = Path(__file__).resolve().parent.parent / "drivers" / "fake-dra-go" / "testdata"
# Two GPUs (14 devices), the same under the broken mode, three GPUs (21 devices).
POOLS = ("release-1-words", "oversubscribed", "three-devices")
# The default bound, and every device of a two-GPU pool.
DEFAULT_BOUNDS = (slice_check.DEFAULT_MAX_DEVICES, 14)


def main() -> int:
    """Run the check on each pool at each bound; print one line each, and the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--max-devices", type=int, action="append", help="a bound to try (repeatable)")
    bench_record.add_option(parser)
    args = parser.parse_args()
    allocator = slice_check.program_allocator(build_slice_allocator(SuiteConfig()))
    figures: list[Figure] = []
    for bound in args.max_devices or DEFAULT_BOUNDS:
        for name in POOLS:
            path = TESTDATA / f"partitions-{name}.json"
            started = time.monotonic()
            report = slice_check.check(
                slice_check.load_slices(path),
                allocator,
                source=str(path),
                max_devices=bound,
                max_allocations=sys.maxsize,
            )
            wall = time.monotonic() - started
            allocator_seconds = sum(pool.allocator_seconds for pool in report.pools)
            print(
                f"{name} up to {bound} devices: {report.combinations} combinations, {report.allocations} allocations, "
                f"allocator {allocator_seconds:.2f}s, check {wall:.2f}s, {len(report.findings)} findings",
                flush=True,
            )
            figures += [
                higher(f"{name}_{bound}_combinations", report.combinations, "combinations"),
                lower(f"{name}_{bound}_s", wall, "s"),
            ]
    bench_record.save(args.json, "slices_check", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
