"""Mutants of the reference driver as shipped (its image and DaemonSet) are caught on the local cluster's real node.

They take the real node, one per machine, so they run in the real-node group, not beside the other mutants.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.mutants.harness import MUTANT_RUN_DEADLINE, MUTANTS, Mutant, assert_caught
from tests.reference_image import IMAGE_BUILD_DEADLINE

pytestmark = [
    pytest.mark.xdist_group("real-node"),  # one real node per machine: fixed paths, ports and the bridge
    pytest.mark.skipif(os.geteuid() != 0, reason="not applicable: a real node needs root (cgroups, mounts, sysctls)"),
    # The image build and the run have their own deadlines; the suite-wide 300 s would cut a cold build first.
    pytest.mark.timeout(IMAGE_BUILD_DEADLINE + MUTANT_RUN_DEADLINE),
]


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if m.shipped and m.in_ci], ids=str)
def test_shipped_mutant_is_caught_on_the_real_node(mutant: Mutant, tmp_path: Path) -> None:
    assert_caught(mutant, tmp_path)
