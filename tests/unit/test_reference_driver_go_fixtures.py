"""The Go build's partition fixtures are what the Python build produces today, not values copied once.

drivers/fake-dra-go/partitions_test.go compares the Go build's pools with testdata/partitions-<case>.json. Each
case here is the Python call that file holds, so a change to the Python build that the fixtures miss fails here
(and a regenerated fixture then fails the Go build's own test until it follows). Regenerate with:

    .tox/tests/bin/python tests/unit/test_reference_driver_go_fixtures.py --write
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from fake_dra import partitions
from fake_dra.broken import BrokenMode
from fake_dra.config import DriverConfig

TESTDATA = Path(__file__).resolve().parents[2] / "drivers" / "fake-dra-go" / "testdata"
BASE = DriverConfig(
    driver_name="d.example.com",
    node_name="n1",
    kubelet_root=Path("/unused"),
    cdi_dir=Path("/unused"),
    state_dir=Path("/unused"),
    profile="gpu-partitions",
    driver_version="2.0.0",
)


@dataclass(frozen=True)
class Case:
    """One fixture: the Python build's pool for `config` at `generation`, in the shape the Go test gives."""

    config: DriverConfig
    generation: int
    published: int
    unavailable: set[str] = field(default_factory=set)
    informational: frozenset[str] = frozenset()

    def pool(self) -> str:
        slices = partitions.resource_slices(
            self.config,
            self.generation,
            unavailable=self.unavailable,
            published=self.published,
            informational=self.informational,
        )
        return json.dumps(slices, sort_keys=True)


# The cases of partitions_test.go's TestPartitionSlicesAreThePythonBuilds, by fixture name.
CASES = {
    "three-devices": Case(replace(BASE, devices=3), 5, published=3),
    "twenty-devices": Case(replace(BASE, devices=20), 9, published=20),
    "tainted": Case(
        replace(BASE, devices=3),
        2,
        published=3,
        unavailable={"gpu-1-half-0", "gpu-0-quarter-3"},
        informational=frozenset({"gpu-2", "gpu-0-quarter-3"}),
    ),
    "reduced-capacity": Case(replace(BASE, devices=4), 3, published=2, unavailable={"gpu-3", "gpu-1-quarter-2"}),
    "no-devices": Case(replace(BASE, devices=4), 4, published=0),
    "release-1-words": Case(replace(BASE, devices=2, driver_version="1.3.0", id_format="words"), 1, published=7),
    "oversubscribed": Case(
        replace(BASE, devices=2, broken=frozenset({BrokenMode.PARTITIONS_OVERSUBSCRIBE_COUNTERS})), 1, published=2
    ),
}


def first_difference(recorded: Any, today: Any, at: str = "") -> str:
    """Where two JSON values first differ, and what each holds there."""
    if isinstance(recorded, dict) and isinstance(today, dict):
        for key in sorted(recorded.keys() | today.keys()):
            if recorded.get(key) != today.get(key):
                return first_difference(recorded.get(key), today.get(key), f"{at}.{key}")
    if isinstance(recorded, list) and isinstance(today, list) and len(recorded) == len(today):
        for index, (old, new) in enumerate(zip(recorded, today, strict=True)):
            if old != new:
                return first_difference(old, new, f"{at}[{index}]")
    return f"at {at or 'the top'}: recorded {json.dumps(recorded)[:200]}, today {json.dumps(today)[:200]}"


def fixture_path(name: str) -> Path:
    """Where the Go build's test reads the fixture `name`."""
    return TESTDATA / f"partitions-{name}.json"


def test_every_fixture_of_the_go_build_has_a_case_here() -> None:
    on_disk = {path.name.removeprefix("partitions-").removesuffix(".json") for path in TESTDATA.glob("partitions-*")}
    assert on_disk == set(CASES), (
        f"fixtures without a case: {on_disk - set(CASES)}; cases without one: {set(CASES) - on_disk}"
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_go_builds_fixture_is_the_python_builds_pool_today(name: str) -> None:
    today = json.loads(CASES[name].pool())
    recorded = json.loads(fixture_path(name).read_text())
    assert recorded == today, (
        f"{fixture_path(name)} is not what the Python build produces today, {first_difference(recorded, today)}; "
        f"regenerate with `{Path(__file__).relative_to(TESTDATA.parents[2])} --write`, then make the Go build follow"
    )


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: {sys.argv[0]} --write  (rewrites the Go build's partition fixtures from the Python build)")
    for case_name, case in CASES.items():
        fixture_path(case_name).write_text(case.pool() + "\n")
        print(f"wrote {fixture_path(case_name)}")
